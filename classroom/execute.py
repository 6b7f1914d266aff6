"""Running one notebook for grading: the kernel in the sandbox, the verdicts out here.

``python -m classroom.execute NOTEBOOK FILES OUT`` runs ``NOTEBOOK`` (the
submission with the instructor's test cells put back) in a kernel inside the sandbox
(``sandbox.py``), with a private copy of the student's folder ``FILES`` as its working
folder, and writes the executed notebook to ``OUT``. This process is the grader's:
student code never runs in it and never sees ``OUT``.

For each test cell it writes a verdict into the cell's metadata (``autodiff``):
``passed``, ``failed`` (and the error's name), or ``tampered``. Before every test
cell it asks the kernel-side monitor (``monitor.py``) whether an answer cell has
changed how code runs (transformers, hooks, replaced functions); if so, the test is
not run and scores zero, with the monitor's findings. The verdict, not what the
kernel printed, is what feedback shows.

A cell that kills the kernel or runs past its time costs that cell: the kernel
restarts in a fresh sandbox, the earlier cells run again, and grading goes on. Each
failed test that uses what a stopped cell defines names that cell and the limit it
hit (``cells`` in the notebook's metadata, for feedback); output past a limit is
dropped, never the grader's own messages nor a cell's error.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import ensure_async
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from autodiff.grading import oom

from . import monitor
from .course import is_test
from .sandbox import Limits, Sandbox, choose

MONITOR_START = "__import__('classroom.monitor', fromlist=['start']).start()"
MONITOR_CHECK = "__import__('classroom.monitor', fromlist=['check']).check({nonce!r})"
NOTEBOOK_OUTPUT_CELLS = 16  # a notebook's output: at most 16 cells' limit in all

NO_ANSWER = (
    "the grader's check got no answer: an answer cell changed how the kernel runs code or prints"
)


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels start inside ``sandbox`` and talk over Unix
    sockets in ``runtime``: the sandbox has no network to reach TCP ports."""

    def __init__(self, sandbox: Sandbox, work: Path, runtime: Path, **kwargs):
        super().__init__(**kwargs)
        self.sandbox, self.work, self.runtime = sandbox, work, runtime
        self.transport = "ipc"
        self.ip = str(runtime / "kernel")
        self.connection_file = str(runtime / "kernel.json")
        # The kit's own Python, whatever kernel the notebook names; interrupts go as
        # messages, since a signal to bwrap would not reach the kernel inside.
        self._kernel_spec = KernelSpec(
            # -P: the working folder (the student's) is not searched at start-up,
            # so a file there named ipykernel_launcher.py is not the kernel.
            argv=[sys.executable, "-P", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name="Python 3 (grading sandbox)",
            language="python",
            interrupt_mode="message",
        )

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        command, preexec = self.sandbox.wrap(kernel_cmd, self.work, self.runtime)
        kw["preexec_fn"] = preexec
        kw["cwd"] = str(self.work)
        # What the kernel process writes to its own stdout and stderr (a student can
        # write there directly) goes nowhere: cells' output comes through messages.
        kw["stdout"] = kw["stderr"] = subprocess.DEVNULL
        await super()._async_launch_kernel(command, **kw)

    def exit_status(self) -> int | None:
        """How the sandbox ended (bwrap exits 128 + signal when the kernel was killed)."""
        process = getattr(self.provisioner, "process", None)
        return None if process is None else process.poll()


class GradingClient(NotebookClient):
    """nbclient's NotebookClient with verdicts, the monitor, an output limit, and a
    kernel that restarts when a cell kills it."""

    def __init__(self, nb, km: SandboxedKernelManager, limits: Limits, **kwargs):
        timeout = int(os.environ.get("GRADING_CELL_TIMEOUT", "60"))
        super().__init__(
            nb,
            km=km,
            timeout=timeout,
            startup_timeout=120,
            interrupt_on_timeout=True,
            error_on_timeout={
                "ename": "CellTimeoutError",
                "evalue": f"the cell ran past its {timeout} s",
                "traceback": [f"CellTimeoutError: the cell ran past its {timeout} s"],
            },
            allow_errors=True,
            record_timing=False,
            **kwargs,
        )
        self.grading_km = km  # typed: nbclient's km attribute is any KernelManager
        self.key = secrets.token_hex(16)  # signs the monitor's answers (monitor.py)
        self.limits = limits
        self.output_bytes: dict[int, int] = {}
        self.output_total = 0
        self.limit_hits: list[str] = []
        self.findings: list[str] = []
        # The cells a limit stopped: index -> (the cell's name, why, names it defines)
        self.stopped: dict[int, tuple[str, str, set[str]]] = {}
        self.failed_by: dict[int, list[str]] = {}  # a stopped cell -> the tests it failed
        self.output_notes: list[str] = []  # cells whose output a limit cut
        self.grader_code = False  # the grader's own code is running (_quietly)
        # The cgroup this grader runs in: a student's server's, where she validates.
        self.own_cgroup = oom.own_cgroup()
        self.own_kills = 0  # its count of processes killed for memory at kernel start

    async def async_start_new_kernel_client(self):
        self.own_kills = oom.kills(self.own_cgroup)
        kc = await super().async_start_new_kernel_client()
        await self._start_monitor(0)
        return kc

    async def _start_monitor(self, cell_index: int) -> None:
        outputs = await self._quietly(monitor.start_source(self.key), cell_index)
        errors = [out for out in outputs if out.output_type == "error"]
        if errors:  # before any student code: the grader's own fault, said loudly
            raise RuntimeError(f"the grading monitor did not start: {errors[0].get('evalue')}")

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        test = is_test(cell)
        if test and (findings := await self._findings(cell, cell_index)):
            return _tampered(cell, findings, self.findings)
        try:
            cell = await super().async_execute_cell(
                cell, cell_index, execution_count, store_history
            )
        except (DeadKernelError, CellTimeoutError) as error:
            message, why = self._why_stopped(cell)
            cell.outputs.append(_error_output(type(error).__name__, message))
            self._stopped(cell, cell_index, why)
            await self._restart(cell, cell_index)
        else:
            if cell.metadata.get("autodiff_timed_out"):
                if not any(out.output_type == "error" for out in cell.outputs):
                    cell.outputs.append(_error_output("CellTimeoutError", _TIMED_OUT))
                self._stopped(cell, cell_index, self._timed_out())
                # The interrupt may not have stopped it (a loop in C holds the GIL).
                await self._restart(cell, cell_index)
        self._note_limits(cell, cell_index)
        if not test:
            cell.metadata.pop("autodiff_reply", None)
            return cell
        _record_verdict(cell)
        self._say_why(cell, cell_index)
        # A hook that the student's code installed while this test ran may have
        # decided it: checked again after the test, too.
        if findings := await self._findings(cell, cell_index):
            return _tampered(cell, findings, self.findings)
        return cell

    async def _findings(self, test, cell_index: int) -> list[str]:
        """What the monitor found that can change this test."""
        return _affecting(await self._check(cell_index), test.source)

    async def _check_raise_for_error(self, cell, cell_index, exec_reply):
        """Keep the kernel's reply status: an exception that IPython stops without
        showing it (``bdb.BdbQuit``, which run_code swallows) leaves no error output,
        but its reply says "error"."""
        if exec_reply is not None:
            content = exec_reply.get("content", {})
            cell.metadata["autodiff_reply"] = {
                "status": str(content.get("status")),
                "ename": str(content.get("ename", "")),
            }
        return await super()._check_raise_for_error(cell, cell_index, exec_reply)

    async def _async_handle_timeout(self, timeout, cell=None):
        if cell is not None:
            cell.metadata["autodiff_timed_out"] = True
        return await super()._async_handle_timeout(timeout, cell)

    async def _check(self, cell_index: int) -> list[str]:
        nonce = secrets.token_hex(8)
        outputs = await self._quietly(monitor.check_source(nonce), cell_index)
        text = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
        findings = monitor.read_answer(text, nonce, self.key)
        return [NO_ANSWER] if findings is None else findings

    async def _quietly(self, code: str, cell_index: int) -> list:
        """Run the grader's own code in the kernel, outside the notebook's history;
        what it prints is never counted against the cell's output limit."""
        cell = nbformat.v4.new_code_cell(code)
        real = self.nb.cells[cell_index] if self.nb.cells else None
        self.grader_code = True
        try:
            await super().async_execute_cell(cell, cell_index, store_history=False)
        except (DeadKernelError, CellTimeoutError):
            return []
        finally:
            self.grader_code = False
            if real is not None:
                self.nb.cells[cell_index] = real
        return cell.outputs

    def _why_stopped(self, cell) -> tuple[str, str]:
        """Why the kernel stopped while ``cell`` ran: the cell's error text, and the
        words for the student ("ran longer than 60 s and was stopped")."""
        status = self.grading_km.exit_status()
        if status == 128 + 24:  # SIGXCPU
            limit = f"the CPU-time limit ({self.limits.cpu_seconds} s)"
            self.limit_hits.append(limit)
            why = f"used more than {self.limits.cpu_seconds} s of CPU time and was stopped"
            return f"the kernel was stopped: it hit {limit}", why
        if status == 128 + 9 and (memory := self._memory_limit_hit()):
            self.limit_hits.append(f"the memory limit ({memory})")
            return oom.used_too_much(memory), f"used more than {memory} of memory and was stopped"
        if cell.metadata.get("autodiff_timed_out"):
            return _TIMED_OUT, self._timed_out()
        if status == 128 + 9:
            killed = "out of memory, or a loop that ignored interrupts"
            return f"the kernel was killed ({killed})", f"was stopped ({killed})"
        return _STOPPED, "stopped the kernel (exit(), a crash, or running out of memory)"

    def _timed_out(self) -> str:
        self.limit_hits.append(f"the time limit ({self.timeout} s a cell)")
        return f"ran longer than {self.timeout} s and was stopped"

    def _stopped(self, cell, cell_index: int, why: str) -> None:
        """Remember a cell a limit stopped: the tests that use what it defines are told."""
        if is_test(cell):
            cell.metadata["autodiff_stopped"] = why
            return
        name = _cell_name(cell, cell_index)
        self.stopped[cell_index] = (name, why, _defined_names(cell.source))

    def _say_why(self, test, cell_index: int) -> None:
        """A failed test's verdict says which limit made it fail: its own stop, or that
        of an earlier cell whose names it uses."""
        verdict = test.metadata.get("autodiff", {})
        stopped = test.metadata.pop("autodiff_stopped", None)
        if verdict.get("verdict") != "failed":
            return
        if stopped:
            verdict["stopped"] = stopped
        used = set(re.findall(r"[A-Za-z_]\w*", test.source))
        earlier = [
            index for index, (_, _, names) in sorted(self.stopped.items())
            if index < cell_index and names & used
        ]  # fmt: skip
        if earlier:
            verdict["because"] = [self._stopped_cell(index) for index in earlier]
        for index in earlier:
            self.failed_by.setdefault(index, []).append(_cell_name(test, cell_index))

    def cell_notes(self) -> list[str]:
        """What the limits did to cells, as the student reads it in feedback."""
        notes = list(self.output_notes)
        for index, tests in self.failed_by.items():
            listed = ", ".join(f"`{test}`" for test in tests)
            notes.append(
                f"{self._stopped_cell(index)}, so the tests that use it could not run: {listed}"
            )
        return notes

    def _stopped_cell(self, index: int) -> str:
        name, why, _ = self.stopped[index]
        return f"your cell `{name}` {why}"

    def _memory_limit_hit(self) -> str | None:
        """The memory limit that got the kernel killed, in words: its sandbox's cgroup's,
        or the one this grader runs in (a student's server, whose limit is lower than
        the sandbox's); None when neither killed a process since the kernel started."""
        groups = self.grading_km.sandbox.groups  # the last: this kernel's
        if groups and groups[-1].oom_kills():
            return self.limits.memory_in_words
        limit = oom.limit(self.own_cgroup)
        if limit is not None and oom.kills(self.own_cgroup) > self.own_kills:
            return oom.in_words(limit)
        return None

    async def _restart(self, cell, cell_index: int) -> None:
        """A fresh kernel (in a fresh sandbox) with the state of the earlier cells,
        bar the ones that crashed or hung; a replayed cell that crashes again is
        skipped too, and the replay starts over."""
        self.log.warning("Cell %d crashed or ran out of time: restarting the kernel", cell_index)
        cell.metadata["autodiff_skipped"] = True
        while True:
            self.own_kills = oom.kills(self.own_cgroup)
            await ensure_async(self.grading_km.restart_kernel(now=True))
            assert self.kc is not None
            await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))  # type: ignore[attr-defined]
            await self._start_monitor(cell_index)
            if await self._replay(cell_index):
                return

    async def _replay(self, index: int) -> bool:
        for earlier, cell in enumerate(self.nb.cells[:index]):
            if cell.cell_type != "code" or cell.metadata.get("autodiff_skipped"):
                continue
            replay = nbformat.from_dict(json.loads(json.dumps(cell)))
            try:
                await super().async_execute_cell(replay, earlier, store_history=False)
            except (DeadKernelError, CellTimeoutError):
                cell.metadata["autodiff_skipped"] = True
                cell.outputs.append(_error_output("KernelDied", "(again, on replay) " + _STOPPED))
                return False
            finally:
                self.nb.cells[earlier] = cell  # execute_cell stored the replay there
        return True

    def output(self, outs, msg, display_id, cell_index):
        """Keep at most ``limits.output_kb`` of output a cell; say so once when cut.
        The grader's own messages, and a cell's error (its verdict), always pass."""
        if self.grader_code:
            return super().output(outs, msg, display_id, cell_index)
        if msg.get("msg_type") == "error":
            return super().output(outs, _shortened(msg), display_id, cell_index)
        size = len(json.dumps(msg.get("content", {}), default=str))
        used = self.output_bytes.get(cell_index, 0) + size
        self.output_bytes[cell_index] = used
        self.output_total += size
        budget = self.limits.output_kb * 1024
        if self.output_total > NOTEBOOK_OUTPUT_CELLS * budget:  # many cells, each near it
            note = f"the output limit of a notebook ({NOTEBOOK_OUTPUT_CELLS} cells' worth)"
            if note not in self.limit_hits:
                self.limit_hits.append(note)
                self.output_notes.append(
                    f"your notebook printed more than {NOTEBOOK_OUTPUT_CELLS * budget // 2**20}"
                    f" MB; from cell `{_cell_name(self.nb.cells[cell_index], cell_index)}` on,"
                    " the rest of its output was dropped (the tests were still graded)"
                )
            return None
        if used > budget:
            if used - size <= budget:
                note = f"the output limit ({self.limits.output_kb} KB a cell) was hit"
                self.limit_hits.append(note)
                outs.append(nbformat.v4.new_output("stream", name="stdout", text=f"[{note}]\n"))
                name = _cell_name(self.nb.cells[cell_index], cell_index)
                self.output_notes.append(
                    f"your cell `{name}` printed more than {self.limits.output_kb} KB; the rest"
                    " of its output was dropped (its tests were still graded)"
                )
            return None
        return super().output(outs, msg, display_id, cell_index)

    def _note_limits(self, cell, cell_index: int) -> None:
        """A limit the cell's error names (memory, processes, files, disk): noted, and
        the cell counts as stopped by it."""
        for out in cell.get("outputs", []):
            if out.output_type != "error":
                continue
            text = f"{out.get('ename')}: {out.get('evalue')}"
            for pattern, name in _LIMIT_ERRORS:
                if re.search(pattern, text):
                    limit = name.format(limits=self.limits)
                    self.limit_hits.append(limit)
                    if cell_index not in self.stopped:
                        self._stopped(cell, cell_index, f"hit {limit}")


_STOPPED = (
    "the kernel stopped or stopped answering while running this cell (exit(), a crash, "
    "running out of memory, or a loop that ignores interrupts)"
)

_TIMED_OUT = "the cell ran past its time and was stopped"

_LIMIT_ERRORS = [
    (r"^MemoryError", "the memory limit ({limits.memory_in_words})"),
    (r"Resource temporarily unavailable", "the process limit ({limits.processes})"),
    (r"Too many open files", "the open-files limit ({limits.open_files})"),
    (r"File too large", "the file-size limit ({limits.file_size_mb} MB)"),
    (r"No space left on device", "the disk limit ({limits.disk_mb} MB)"),
]


def _cell_name(cell, index: int) -> str:
    """How the student knows a cell: its nbgrader name, or its place."""
    return str(cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index + 1}")


def _defined_names(source: str) -> set[str]:
    """The names a cell defines at its top level (functions, classes, variables,
    imports); by a line's start where the cell is not plain Python (magics)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        pattern = r"^(?:def|class)\s+(\w+)|^(\w+)\s*(?::[^=]*)?=(?!=)"
        found = re.findall(pattern, source, flags=re.MULTILINE)
        return {name for pair in found for name in pair if name}
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            for target in ast.walk(node):
                if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                    names.add(target.id)
    return names


def _shortened(msg: dict) -> dict:
    """An error message of reasonable size: its name, the start of its value and the
    end of its traceback (a student's exception can carry megabytes)."""
    content = msg.get("content", {})
    traceback = [str(line)[:2000] for line in content.get("traceback", [])[-20:]]
    short = {**content, "evalue": str(content.get("evalue", ""))[:2000], "traceback": traceback}
    return {**msg, "content": short}


def _error_output(name: str, message: str):
    text = f"{name}: {message}. Grading went on in a fresh kernel without this cell."
    return nbformat.v4.new_output("error", ename=name, evalue=message, traceback=[text])


_HIDDEN_BUILTIN = re.compile(r"^the notebook's name (\w+) hides the builtin \1$")


def _affecting(findings: list[str], test: str) -> list[str]:
    """The findings that can change this test. A name that hides a builtin (``from
    numpy import *`` hides ``abs``, ``all``, ``any``...) matters only to a test that
    calls it; any other finding matters to every test."""
    kept = []
    for finding in findings:
        hidden = _HIDDEN_BUILTIN.match(finding)
        if hidden is None or re.search(rf"(?<![\w.]){hidden[1]}\s*\(", test):
            kept.append(finding)
    return kept


def _tampered(cell, findings: list[str], all_findings: list[str]):
    """A test cell not run: what the monitor found instead of a verdict (zero points)."""
    message = "not run, because " + "; ".join(findings)
    cell.outputs = [_error_output("TamperingDetected", message)]
    cell.metadata["autodiff"] = {"verdict": "tampered", "findings": findings}
    all_findings.extend(f for f in findings if f not in all_findings)
    return cell


def _known_errors() -> frozenset[str]:
    """Error names feedback may show: Python's and NumPy's exceptions, and the
    grader's own. Any other name is the student's to choose, so it could carry
    text (a hidden test's, encoded) into feedback: it shows as "an error"."""
    import builtins

    import numpy

    names = {"CellTimeoutError", "DeadKernelError", "KernelDied", "StdinNotImplementedError"}
    for module in (builtins, numpy, numpy.linalg, getattr(numpy, "exceptions", numpy)):
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, BaseException):
                names.add(name)
    return frozenset(names)


_SAFE_ERRORS = _known_errors()


def _record_verdict(cell) -> None:
    """The grader's verdict of a test cell. A warning on stderr is not a failure, and
    a value the cell displays is not partial credit (a student's code could print one):
    the cell passes when it raised nothing."""
    errors = [out for out in cell.outputs if out.output_type == "error"]
    reply = cell.metadata.pop("autodiff_reply", None) or {}
    if reply.get("status", "ok") != "ok" and not errors:  # raised, but showed nothing
        # an error output, since nbgrader scores a test by its error outputs
        name = reply.get("ename") or "Error"
        text = f"{name}: the cell raised an error that IPython did not show"
        error = nbformat.v4.new_output("error", ename=name, evalue="", traceback=[text])
        cell.outputs.append(error)
        errors = [error]
    for out in cell.outputs:
        if out.output_type == "stream" and out.name == "stderr":
            out.name = "stdout"
        if out.output_type == "execute_result":
            out.output_type = "display_data"
            out.pop("execution_count", None)
    if not errors:
        cell.metadata["autodiff"] = {"verdict": "passed"}
        return
    name = str(errors[0].get("ename", "Error"))
    cell.metadata["autodiff"] = {
        "verdict": "failed",
        "error": name if name in _SAFE_ERRORS else "an error",
    }


def execute(
    notebook: Path, files: Path, out: Path, sandbox: Sandbox, scratch: Path | None = None
) -> nbformat.NotebookNode:
    """Run ``notebook`` in ``sandbox`` with a private copy of ``files`` as its folder;
    write the executed notebook (outputs, verdicts, limits hit) to ``out``."""
    nb = nbformat.read(notebook, as_version=4)
    private = Path(tempfile.mkdtemp(prefix="ad-", dir=scratch))
    try:
        work, runtime = private / "work", private / "rt"
        shutil.copytree(files, work, symlinks=False, ignore=_not_needed)
        runtime.mkdir(mode=0o700)
        km = SandboxedKernelManager(sandbox, work, runtime)
        client = GradingClient(nb, km, sandbox.limits)
        client.execute(cleanup_kc=True)  # our kernel manager: nbclient would leave it running
        nb.metadata.setdefault("autodiff", {})
        nb.metadata["autodiff"]["sandbox"] = sandbox.describe()
        nb.metadata["autodiff"]["limits_hit"] = sorted(set(client.limit_hits))
        nb.metadata["autodiff"]["cells"] = client.cell_notes()
        nb.metadata["autodiff"]["tampering"] = client.findings
        nb.metadata["autodiff"]["skipped"] = [
            index
            for index, cell in enumerate(nb.cells)
            if cell.metadata.get("autodiff_skipped") or cell.metadata.get("autodiff_timed_out")
        ]
    finally:
        shutil.rmtree(private, ignore_errors=True)
        sandbox.remove_cgroups()
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return nb


def _not_needed(folder: str, names: list[str]) -> list[str]:
    """Caches, and links: a link in a submission could point at the instructor's files,
    which copying would bring into the sandbox."""
    skipped = [name for name in names if name in (".ipynb_checkpoints", "__pycache__")]
    return skipped + [name for name in names if os.path.islink(os.path.join(folder, name))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m classroom.execute")
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="NOTEBOOK FILES OUT",
        help="the notebook to run (tests included), the student's folder (copied, never "
        "changed), where the executed notebook goes; repeated for more notebooks",
    )
    parser.add_argument("--sandbox", default="auto", help="auto, bwrap or none")
    args = parser.parse_args(argv)
    if len(args.runs) % 3:
        parser.error("give NOTEBOOK FILES OUT for each notebook")
    sandbox = choose(args.sandbox)
    for start in range(0, len(args.runs), 3):
        notebook, files, out = args.runs[start : start + 3]
        execute(notebook, files, out, sandbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
