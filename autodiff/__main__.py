"""``python -m autodiff render EXPR -o fig.svg``: the command line (drawing/cli.py)."""

import sys

from .drawing.cli import main

if __name__ == "__main__":
    sys.exit(main())
