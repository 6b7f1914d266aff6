"""What a student's notebook and server use for the class.

The released notebooks' test cells import from here: the visible tests' checks, which
say what went wrong (``checks``: ``expect``, ``calling``, ...), and ``forbid_calls``
(``helpers``), with which a hidden test makes sure an answer does not call the
library's own reference. A student's JupyterLab server on the class's hub runs
``lab_notice``, which says in the cell when a kernel was stopped for using too much
memory (``oom`` reads the cgroup's counts). The student kit ships all of it.

The instructor's tooling (grading, sandbox, exchange, hub, kit) is the ``classroom``
package, which students never receive; nothing here imports it.
"""

from .checks import calling, expect, expect_error, expect_true
from .helpers import forbid_calls

__all__ = ["calling", "expect", "expect_error", "expect_true", "forbid_calls"]
