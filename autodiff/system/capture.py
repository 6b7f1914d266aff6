"""CUDA graphs: a compiled schedule recorded once on the GPU, then replayed at each run.

On a GPU a small training step is not limited by its arithmetic but by launching it:
each op costs the host 10-20 us of Python and driver work, while the GPU finishes its
kernel in a few. CUDA can *record* the kernels a stream is given (stream capture) into
a CUDA graph, and launch the whole recording at once: the host's cost of a step
becomes one launch per graph. ``Executor(outputs, capture=True)`` does this.

A replay reads and writes the very addresses the recording used, which decides the
rest:

* fed values are copied into buffers of the recording's own before each replay;
* tensors that are not fed (parameters) are read where they are, so they must stay the
  same arrays: the optimisers here update them in place; a tensor given a new array is
  recorded again;
* intermediate values live in a memory pool of the recording's own (``Recorder``),
  which nothing else allocates from;
* the outputs are copied out, so that each run's arrays are the caller's own.

Some steps cannot be recorded: CuPy refuses cuBLAS (matrix products) inside a capture,
an op that reads a value back on the host has to wait for it, and an op that draws
random numbers must draw new ones at every run. The schedule is cut around those steps:
recorded segments, and between them those steps, run as usual into buffers of their
own ("piecewise" CUDA graphs, as torch.compile makes them). Which steps cannot be
recorded is found by trying: the first run records each step alone, and the steps that
CUDA, CuPy or the kit refuse run as usual.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..core.graph import describe
from . import backend
from .compiled import INPUT_ERRORS, kernel
from .memory import writer
from .slots import Step

# The ops that draw new random numbers each time they run (dropout's mask): a recording
# would replay the same draws, so they run as usual.
RANDOM = {"dropout_mask"}
RECORDINGS_KEPT = 4  # the latest, by their keys (a training loop's last batch is smaller)
RECORDINGS_BEFORE_GIVING_UP = 8  # after which the Executor runs compiled


class CaptureRefused(Exception):
    """Work that a CUDA graph cannot record (it runs as usual instead)."""


class Recorder:
    """A CUDA stream and a memory pool of one recording's own.

    Inside ``active()`` CuPy launches its kernels on the stream and allocates from the
    pool, which nothing else uses: a replay writes where the recording wrote, so that
    memory must stay the recording's. ``record(work)`` records the kernels ``work()``
    launches into a CUDA graph, without running them.
    """

    def __init__(self):
        cupy = backend.import_cupy()
        self.pool = cupy.cuda.MemoryPool()
        self.stream = cupy.cuda.Stream(non_blocking=True)

    @contextmanager
    def active(self) -> Iterator[None]:
        cupy = backend.import_cupy()
        # What the default stream has queued (a parameter's update) comes first.
        cupy.cuda.get_current_stream().synchronize()
        try:
            with cupy.cuda.using_allocator(self.pool.malloc), self.stream:
                yield
        finally:  # after an error too: nothing queued on the stream outlives the block
            self.stream.synchronize()

    def record(self, work) -> Any:
        """The CUDA graph of the kernels ``work()`` launches; ``graph.launch()`` runs them.
        Raises what ``work`` raises, or CUDA's error when the recording broke."""
        self.stream.begin_capture()
        try:
            work()
        except BaseException:
            try:
                self.stream.end_capture()
            except Exception:  # (a capture that broke: its error is not the news)
                pass
            raise
        return self.stream.end_capture()

    def refusal(self, work) -> str | None:
        """Why ``work()`` cannot be recorded ("NotImplementedError: calling cuBLAS ..."),
        or None if it can. A trial: the recording is dropped, and any checks it left."""
        try:
            with backend.collected_checks():
                self.record(work)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def held_bytes(self) -> int:
        return int(self.pool.total_bytes())


@dataclass
class CaptureReport:
    """What ``Executor(capture=True)`` did: recordings made, replays run, and per
    replay the recorded graphs launched and the steps run as usual between them."""

    recordings: int = 0
    replays: int = 0
    graphs: int = 0  # launched per replay
    run_as_usual: list[str] = field(default_factory=list)  # "matmul: NotImplementedError: ..."
    held_bytes: int = 0  # the memory pools of the recordings kept
    not_captured: str | None = None  # why runs are compiled instead, if they are

    def __str__(self) -> str:
        if self.not_captured:
            return f"not captured: {self.not_captured}"
        return (
            f"{self.recordings} recording(s), {self.replays} replay(s): each runs "
            f"{self.graphs} CUDA graph(s) and {len(self.run_as_usual)} step(s) as usual "
            f"between them; {self.held_bytes / 2**20:.1f} MiB held by the recordings"
        )


class Launch:
    """Replay one recorded segment."""

    def __init__(self, graph: Any):
        self.graph = graph

    def __call__(self) -> None:
        self.graph.launch()


class ShapeChanged(Exception):
    """A step run as usual gave another shape or dtype than when it was recorded."""


class AsUsual:
    """A step that cannot be recorded, run on the inputs the recording reads, into the
    buffer (of its own) that the later segments read."""

    def __init__(self, node: Any, input_vals: list, out: Any):
        self.node, self.input_vals, self.out = node, input_vals, out
        self.into = writer(node.op)  # how it writes into ``out``, if it can

    def __call__(self) -> None:
        node, out, into = self.node, self.out, self.into
        if into is not None:  # (its output's shape follows its inputs', which are fixed)
            into(out, *self.input_vals, **node.attrs)
            return
        value = kernel(node)(*self.input_vals)
        if getattr(value, "shape", None) != out.shape or value.dtype != out.dtype:
            raise ShapeChanged(
                f"{node.op.name} gave {describe(value)} where it gave "
                f"{describe(out)} when recorded: its shape depends on the "
                f"values, which the recorded kernels after it cannot follow"
            )
        out[...] = value


@dataclass
class Recording:
    """One recorded run: what each replay does, and what it must be fed as."""

    key: tuple
    recorder: Recorder
    leaves: list  # held, so that no other array takes a recorded one's id (the key)
    fed: list[tuple[int, Any]]  # (leaf slot, the buffer its value is copied into)
    actions: list  # Launch and AsUsual, in order
    outputs: list
    checks: list  # (flag, error): deferred checks whose flags each replay sets

    def replay(self, values: list) -> list:
        for slot, buffer in self.fed:
            buffer[...] = values[slot]
        for action in self.actions:
            action()
        for flag, error in self.checks:
            backend.check_later(flag.copy(), error)  # (the next replay overwrites flag)
        return [backend.copy_of(out) for out in self.outputs]


class Capture:
    """Runs a schedule as a recorded CUDA graph: ``run(values)`` records at its first
    call (and again when the key of the leaves changes), replays after."""

    def __init__(self, steps: Sequence[Step], result_slots: Sequence[int]):
        self.steps, self.result_slots = steps, list(result_slots)
        self.leaf_slots = [i for i, (node, _, _) in enumerate(steps) if node.op.is_leaf]
        self.report = CaptureReport()
        self._recordings: dict[tuple, Recording] = {}  # oldest first
        self._given_up = False  # a recording failed, or too many were made

    def run(self, values: list) -> list | None:
        """The results, replayed (or recorded now); None where this run cannot be
        captured (the caller then runs the schedule as compiled)."""
        if self._given_up:
            return None
        key = self._key(values)
        if key is None:
            return None
        self.report.not_captured = None
        recording = self._recordings.pop(key, None)
        if recording is not None:
            self._recordings[key] = recording  # (the latest used, last)
            return self._replay(recording, values)
        if self.report.recordings >= RECORDINGS_BEFORE_GIVING_UP:
            self._give_up(
                f"recorded {self.report.recordings} times (the latest {RECORDINGS_KEPT} "
                f"are kept): the fed shapes or dtypes, the numbers fed, or the tensors' "
                f"arrays change from run to run (update parameters in place: "
                f"p -= lr * grad)"
            )
            return None
        while len(self._recordings) >= RECORDINGS_KEPT:  # their memory goes first
            del self._recordings[next(iter(self._recordings))]
        return self._record(values, key)

    def _replay(self, recording: Recording, values: list) -> list | None:
        try:
            results = recording.replay(values)
        except ShapeChanged as exc:
            self._give_up(str(exc))
            return None
        except INPUT_ERRORS:
            return None  # a step run as usual refused its inputs: the checked run explains
        self.report.replays += 1
        return results

    def _give_up(self, why: str) -> None:
        self._recordings.clear()
        self._given_up = True
        self.report.not_captured = why

    def _key(self, values: list) -> tuple | None:
        """What a recording is valid for: each leaf's shape and dtype (fed values), the
        very array (a tensor's own value, read where it is), or the number (baked into
        the kernels); None when a leaf is not on the GPU."""
        leaf_values = [values[i] for i in self.leaf_slots]
        devices = {backend.device_of(v) for v in leaf_values if not _is_number(v)}
        if "gpu" not in devices:
            self.report.not_captured = "the graph is on the CPU: nothing to record"
            return None
        if "cpu" in devices:
            self.report.not_captured = "a NumPy array is fed to a graph on the GPU"
            return None
        key: list = []
        for i, value in zip(self.leaf_slots, leaf_values, strict=True):
            if _is_number(value):  # -0.0 is not 0.0: by their text
                key.append((type(value), getattr(value, "dtype", None), repr(value)))
            elif value is self.steps[i][0].value:
                key.append(("own", id(value)))
            else:
                key.append(("fed", value.shape, value.dtype))
        return tuple(key)

    def _record(self, values: list, key: tuple) -> list | None:
        recorder = Recorder()
        fed = [
            (i, values[i].copy())
            for i in self.leaf_slots
            if not _is_number(values[i]) and values[i] is not self.steps[i][0].value
        ]
        static = list(values)
        for slot, buffer in fed:
            static[slot] = buffer
        recording = None
        with recorder.active():
            try:
                as_usual, results = self._try_each_step(recorder, static)
            except INPUT_ERRORS:
                return None  # a bad input: the checked run explains it
            try:
                actions, outputs, checks = self._record_segments(recorder, static, as_usual)
                leaves = [values[i] for i in self.leaf_slots]
                recording = Recording(key, recorder, leaves, fed, actions, outputs, checks)
            except Exception as exc:
                self._give_up(f"recording failed ({type(exc).__name__}: {exc})")
        if recording is not None:
            self._recordings[key] = recording
            report = self.report
            report.recordings += 1
            report.graphs = sum(isinstance(a, Launch) for a in actions)
            report.run_as_usual = [
                f"{self.steps[i][0].op.name}: {why}" for i, (why, _) in as_usual.items()
            ]
            report.held_bytes = sum(r.recorder.held_bytes() for r in self._recordings.values())
        # Copies, made outside the recording's pool: the values are the recording's own
        # buffers (a step's that runs as usual, a feed's).
        return [backend.copy_of(r) for r in results]

    def _try_each_step(self, recorder: Recorder, values: list) -> tuple[dict, list]:
        """Run the schedule, first recording each step alone (a trial, dropped). Returns
        the steps that cannot be recorded, each with why and the value it gave (the
        recording's buffer for it), and this run's results."""
        values = list(values)
        as_usual: dict[int, tuple[str, Any]] = {}
        for i, (node, input_slots, frees) in enumerate(self.steps):
            if node.op.is_leaf:
                continue
            compute, input_vals = kernel(node), [values[j] for j in input_slots]
            why = "draws new random numbers at every run" if node.op.name in RANDOM else None
            why = why or recorder.refusal(lambda f=compute, a=input_vals: f(*a))
            values[i] = compute(*input_vals)
            if why:
                as_usual[i] = (why, values[i])
            for j in frees:
                values[j] = None
        return as_usual, [values[i] for i in self.result_slots]

    def _record_segments(
        self, recorder: Recorder, values: list, as_usual: dict
    ) -> tuple[list, list, list]:
        """Record the schedule in segments, cut at the steps in ``as_usual``: those run
        as usual at each replay, into the buffer their first run's value is (the later
        segments read it there). Nothing runs here: the values are the first run's."""
        values = list(values)
        actions: list = []
        checks: list = []
        segment: list[int] = []

        def close_segment():
            if segment:
                with backend.collected_checks() as found:
                    graph = recorder.record(lambda: self._run_steps(segment, values))
                checks.extend(found.values())
                actions.append(Launch(graph))
                segment.clear()

        for i, (node, input_slots, frees) in enumerate(self.steps):
            if node.op.is_leaf:
                continue
            if i not in as_usual:
                segment.append(i)
                continue
            close_segment()
            out = as_usual[i][1]
            if backend.device_of(out) != "gpu":
                raise CaptureRefused(
                    f"{node.op.name} gives {type(out).__name__}, not a GPU array: the "
                    f"steps after it would bake its value into their kernels"
                )
            out = out.copy()  # a buffer of its own (the value may be an input, or a view)
            actions.append(AsUsual(node, [values[j] for j in input_slots], out))
            values[i] = out
            for j in frees:
                values[j] = None
        close_segment()
        return actions, [values[i] for i in self.result_slots], checks

    def _run_steps(self, segment: list[int], values: list) -> None:
        for i in segment:
            node, input_slots, frees = self.steps[i]
            values[i] = kernel(node)(*[values[j] for j in input_slots])
            for j in frees:
                values[j] = None


def _is_number(value: Any) -> bool:
    """A Python number, or a 0-d NumPy array (a number fed to a placeholder): recorded
    kernels take it as an argument, baked in."""
    return backend.is_weak_scalar(value) or (
        backend.device_of(value) == "cpu" and getattr(value, "ndim", None) == 0
    )
