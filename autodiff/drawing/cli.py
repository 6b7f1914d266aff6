"""The command line for lecturers: ``python -m autodiff render EXPR -o fig.svg``.

Exit status: 0 when the figure is written; 2 for a refused expression or bad arguments;
1 when the expression is fine but cannot be computed or drawn (shapes that do not fit,
``--renderer dot`` where Graphviz is not installed). The library's messages are printed
in the command line's words: ``--max-nodes 500``, not ``max_nodes=500``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence

from ..core.graph import Node, tensor
from . import renderer, viz
from .expression import ExpressionError, parse

EXAMPLES = """\
examples:
  python -m autodiff render "x*y + sin(x)" --wrt x y -o fig.svg
      forward graph and gradient graph side by side, as in the lecture
  python -m autodiff render "x**2*y + y + 2" --at x=3 y=4 -o classic.svg
      the same with values: each node shows its value, each adjoint its gradient
  python -m autodiff render "x**2*y + y + 2" --at x=3 y=4 --reads edges --digits 2 \\
      -o classic.png --scale 2
      the forward values each gradient node reads as dashed links, values to 2 digits
  python -m autodiff render "tanh(matmul(x, W) + b)" --at "x=[[1,2]]" \\
      "W=[[1,0],[0,1]]" "b=[0.5,0.5]" --wrt W b -o layer.pdf
      a matmul layer, as PDF
  python -m autodiff render "x*sin(x)" --mode steps -o steps.pdf
      the reverse pass one node at a time, a page per step (steps.gif: an animation;
      steps.svg: one file per step, steps-01.svg, steps-02.svg, ...)
  python -m autodiff render "exp(x) / (1 + exp(x))" --mode forward -o f.png --scale 2
      a PNG twice as wide and high as at --scale 1 (96 pixels per inch), for a projector

The expression uses the library's names: numbers, variables, + - * / ** @, unary minus,
and the functions exp log (or ln) sin cos tanh sigmoid relu sqrt power maximum matmul transpose
sum mean softmax log_softmax logsumexp. It is parsed, never run: anything else
(attributes, other calls, imports, lambdas, ...) is refused with exit status 2.
"""


class UsageError(ValueError):
    """Arguments that do not fit the expression (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m autodiff`` argument parser (one command: ``render``)."""
    parser = argparse.ArgumentParser(
        prog="python -m autodiff", description="Tools of the autodiff course kit."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser(
        "render",
        help="draw a lecture figure from an expression",
        description="Draw the forward graph of an expression and its gradient graph.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    render.add_argument("expression", metavar="EXPR", help='e.g. "x*y + sin(x)"')
    render.add_argument(
        "--wrt",
        nargs="+",
        metavar="NAME",
        help="differentiate with respect to these (default: all)",
    )
    render.add_argument(
        "-o",
        "--output",
        required=True,
        help="the file to write: .svg, .png, .pdf or .dot (.gif with --mode steps)",
    )
    render.add_argument(
        "--at", nargs="+", default=[], metavar="NAME=VALUE", help="values: x=3 or 'w=[1, 2]'"
    )
    render.add_argument(
        "--mode",
        choices=["side-by-side", "forward", "steps"],
        default="side-by-side",
        help="side-by-side (default), the forward graph only, or the backward steps: "
        "one file per step, or one .pdf (a page each) or .gif (an animation)",
    )
    render.add_argument("--title", help="the caption (default: the expression)")
    render.add_argument("--renderer", choices=renderer.RENDERERS, default="auto")
    render.add_argument(
        "--scale",
        type=positive,
        default=1,
        help="enlarge a .png or .gif: 2 is twice as wide and high, for a projector",
    )
    render.add_argument(
        "--reads",
        choices=viz.READS,
        default="label",
        help="the forward values a gradient node reads: named in its label (default), "
        "drawn as dashed links (edges: small graphs), or not shown",
    )
    render.add_argument(
        "--digits", type=digits, default=4, help="significant digits of the values shown (4)"
    )
    render.add_argument("--no-values", action="store_true", help="show no values")
    render.add_argument("--max-nodes", type=whole, default=viz.MAX_NODES)
    render.add_argument("--collapse", action="store_true", help="fold chains of ops into one")
    return parser


def whole(text: str) -> int:
    """``--max-nodes``' value: a whole number above 0."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0, e.g. 500")
    return int(text)


def digits(text: str) -> int:
    """``--digits``' value: a whole number from 1 to 17."""
    if not text.isdigit() or not 1 <= int(text) <= 17:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of digits from 1 to 17")
    return int(text)


def positive(text: str) -> float:
    """``--scale``'s value: a number above 0 (and not infinite)."""
    try:
        number = float(text)
    except ValueError:
        number = 0
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number, e.g. 2")
    return number


def values_at(assignments: Sequence[str]) -> dict[str, Node]:
    """``["x=3", "w=[1, 2]"]`` as named tensor leaves (JSON numbers and lists only).

    >>> values_at(["x=3"])["x"].value
    array(3.)
    """
    leaves = {}
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise UsageError(f"--at {assignment!r}: write NAME=VALUE, e.g. x=3 or 'w=[1, 2]'.")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--at {name}: {text!r} is not a number or a list.") from exc
        if not _is_numbers(value):
            raise UsageError(f"--at {name}: {text!r} is not a number or a list of numbers.")
        leaves[name] = tensor(value, name=name, dtype="float64")
    return leaves


def _is_numbers(value) -> bool:
    if isinstance(value, list):
        return all(_is_numbers(item) for item in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def render(args: argparse.Namespace) -> list[str]:
    """Draw ``args.expression`` as ``args.mode`` asks; the paths written."""
    suffix = args.output.rpartition(".")[2].lower()
    if suffix == "gif" and args.mode != "steps":
        raise UsageError(f"-o {args.output}: a GIF animates the steps: add --mode steps.")
    if suffix not in ("svg", "png", "pdf", "dot", "gif"):
        raise UsageError(
            f"-o {args.output}: the suffix picks the format: .svg, .png, .pdf or .dot "
            f"(.gif with --mode steps)."
        )
    try:
        renderer.check_scale(suffix, args.scale)
    except ValueError as exc:
        raise UsageError(as_flags(str(exc))) from exc
    leaves = values_at(args.at)
    output, variables = parse(args.expression, leaves)
    unused = [name for name in leaves if name not in variables]
    if unused:
        raise UsageError(f"--at names {', '.join(unused)}, which the expression does not use.")
    if not variables and args.mode != "forward":
        raise UsageError(
            f"{args.expression!r} has no variables, so there is nothing to differentiate: "
            f"draw its forward graph with --mode forward, or write one, e.g. 2*x."
        )
    wrt = args.wrt or list(variables)
    for name in wrt:
        if name not in variables:
            found = ", ".join(variables) or "none"
            raise UsageError(f"--wrt {name}: the expression has no variable {name!r} ({found}).")
    nodes = [variables[name] for name in wrt]
    if args.mode == "steps":
        if args.collapse:
            raise UsageError("--collapse folds a picture's chains; --mode steps shows each node.")
        steps = viz.backward_steps(
            output,
            nodes,
            max_nodes=args.max_nodes,
            reads=args.reads,
            digits=args.digits,
            values=not args.no_values,
            title=args.title,
        )
        for drawing in steps:
            drawing.renderer = args.renderer
        return [str(path) for path in steps.save(args.output, args.scale)]
    options = {"max_nodes": args.max_nodes, "collapse": args.collapse, "digits": args.digits}
    options["values"] = not args.no_values
    title = args.title or args.expression
    if args.mode == "forward":
        drawing = viz.draw(output, title=title, **options)
    else:
        drawing = viz.side_by_side(output, nodes, title=title, reads=args.reads, **options)
    drawing.renderer = args.renderer
    return [str(drawing.save(args.output, args.scale))]


def as_flags(message: str) -> str:
    """A library message in the command line's words: its flags, not Python arguments.

    >>> print(as_flags("renderer='dot' but ...; pass max_nodes=493, or collapse=True"))
    --renderer dot but ...; pass --max-nodes 493, or --collapse
    """
    message = message.replace("collapse=True", "--collapse")
    return re.sub(
        r"\b(renderer|scale|max_nodes)='?([\w.]+)'?",
        lambda match: f"--{match[1].replace('_', '-')} {match[2]}",
        message,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit status."""
    args = build_parser().parse_args(argv)
    try:
        written = render(args)
    except (ExpressionError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, ArithmeticError, renderer.RendererError, OSError) as exc:
        print(f"error: cannot draw {args.expression!r}: {as_flags(str(exc))}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
