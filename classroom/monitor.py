"""The grading kernel's watch for answers that change how the tests run.

A graded notebook runs the student's answer cells and the instructor's test cells
in one IPython kernel, so an answer cell can change how the tests run and forge a
pass: a transformer that rewrites test cells, an event callback, a trace function
that skips lines, ``numpy.allclose = lambda *a, **k: True``, a new
``builtins.abs``, a shell whose ``showtraceback`` shows nothing. The grader, which
runs outside the kernel, asks this module before every graded test cell whether
anything of the kind happened.

Protocol
--------
* Once, after the kernel starts and before any cell of the notebook, a silent
  execute of ``__import__('classroom.monitor', fromlist=['start']).start('<key>')``
  (no name is left in the notebook's namespace; ``start_source`` first moves the
  notebook's folder to the end of ``sys.path``, so that files a student left
  there, a ``classroom/`` or ``autodiff/`` of their own, cannot stand in for this
  module or the library), with a fresh random key (hex digits). ``start`` records
  the baseline and installs an audit hook; later calls do nothing.
* Before each graded test cell (and after the last cell), a cell whose whole
  source is
  ``__import__('classroom.monitor', fromlist=['check']).check('<nonce>')``
  with a fresh nonce (letters and digits). It prints exactly one line::

      AUTODIFF-CHECK <nonce> <JSON list of findings> <HMAC>

  Findings are sentences for the instructor ("numpy.allclose was replaced"); ``[]``
  is a clean kernel. The HMAC is HMAC-SHA256, in hex, of ``"<nonce> <JSON list>"``
  under the key, so a student's stand-in for ``check`` (or a transformer that
  rewrites the check cell) cannot print a clean line. Without a key the line ends
  at the JSON list.

The grader treats a check cell that does not print exactly one such line, with a
valid HMAC, as tampering. ``start_source``, ``check_source`` and ``read_answer``
below are the grader's side. After a kernel restart the grader starts the monitor
again before it replays any cell. Findings from the audit hook stay in every later
answer; the others last as long as the change does.

What is watched: the shell's transformers and event callbacks; the methods of
the shell, the kernel, its session and output streams (attributes of the objects
and of their classes); the functions of ``sys`` (``excepthook``, ``displayhook``),
the trace and profile functions; every builtin; the attributes of NumPy (and of
the NumPy modules its functions' code lives in), ``math``, ``autodiff`` and its
submodules, this module and its package, and the standard modules the tests lean
on, with their classes; the ``sys.modules`` entries of those modules; in the
notebook's namespace, ``__builtins__``, the setup cell's names and the builtins the
hidden tests call; notebook code running, or due to run, in another thread.
The audit hook refuses ``sys.addaudithook`` and records new code or defaults for a
watched function, and the ``sys.settrace``, ``sys.setprofile``, ctypes and gc
calls that notebook code makes (not those of the libraries it calls: the Graphviz
renderer uses ctypes, ``forbid_calls`` sets a profile function, doctest a trace
function).

Limits: the check runs inside the process it checks. A determined student can
defeat it with ctypes (a pointer cast raises no audit event), with gc (to reach
the key and the baseline held in the closures below), or with a hook that their
own code installs while a test runs and removes before the next check. Hence ctypes
and gc calls by notebook code are findings, the baseline and the code comparing
with it are out of reach of module attributes and builtins (sealed copies with
private globals), and a missing, malformed or unsigned line counts as tampering.
"""

from __future__ import annotations

import builtins
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Callable
from typing import Any

# Modules the tests and IPython's run_code lean on, besides numpy and autodiff.
STANDARD_MODULES = (
    "bdb",  # run_code catches bdb.BdbQuit without showing it
    "builtins",
    "contextlib",
    "functools",
    "importlib",
    "inspect",
    "math",
    "operator",
    "sys",
    "threading",
    "types",
)
# Builtins the hidden tests call. Functions defined in a cell look names up in the
# notebook's namespace first, so a callable of that name there hides the builtin.
TEST_BUILTINS = (
    "abs all any bool callable dict enumerate float getattr hasattr int isinstance "
    "issubclass iter len list next range repr set str tuple type zip AssertionError "
    "BaseException Exception TypeError ValueError"
).split()
# The setup cell's names and the object each must stay.
SETUP_NAMES = {
    "np": "numpy",
    "numpy": "numpy",
    "ad": "autodiff",
    "autodiff": "autodiff",
    "math": "math",
    "forbid_calls": "autodiff.grading.forbid_calls",
}
# The shell's attributes that decide how a cell runs and how its errors show.
SHELL_ATTRIBUTES = (
    "user_ns",
    "kernel",
    "events",
    "compile",
    "displayhook",
    "display_pub",
    "display_trap",
    "builtin_trap",
    "input_transformer_manager",
    "InteractiveTB",
    "SyntaxTB",
    "custom_exceptions",
)
# ctypes events that read or write memory or reach the C API, and gc events that
# reach any object: findings when notebook code raises them.
MEMORY_EVENTS = frozenset(
    "ctypes.addressof ctypes.call_function ctypes.cdata ctypes.cdata/buffer "
    "ctypes.dlsym ctypes.dlsym/handle ctypes.PyObj_FromPtr ctypes.string_at "
    "ctypes.wstring_at".split()
)
GC_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
AUDITED = (
    MEMORY_EVENTS
    | GC_EVENTS
    | {
        "sys.addaudithook",
        "sys.settrace",
        "sys.setprofile",
        "sys.monitoring.register_callback",
        "object.__setattr__",
        "object.__delattr__",
    }
)
IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: int, numpy.ndarray...
MISSING = object()
CHECK_CALL = "__import__('classroom.monitor', fromlist=['check']).check({!r})"

_STATE: dict = {}  # filled in the sealed copy of this module's globals only


# --- the baseline -------------------------------------------------------------------


def begin(key: str, caller: types.FrameType) -> None:
    """Record the baseline and install the audit hook (sealed; runs once)."""
    global _STATE
    import linecache

    # IPython keeps every cell's source for tracebacks, silent ones too
    linecache.cache.pop(caller.f_code.co_filename, None)
    ip = get_shell()
    stream = sys.stdout  # its own methods: IPython wraps its write for every cell
    state = {
        "key": key.encode(),
        "digest": hmac_function(),
        "write": types.MethodType(type(stream).write, stream),
        "flush": types.MethodType(type(stream).flush, stream),
        "audit": [],
        "ip": ip,
        "roots": library_roots(),
        "ctypes_dir": os.path.join(sysconfig.get_paths()["stdlib"], "ctypes", ""),
        "builtins": dict(vars(builtins)),
        "modules": watched_modules(),
        "namespaces": [],
        "classes": set(),
        "labels": {},  # id of a watched function, class or module -> its name
        "run_code": None,
    }
    for module in list(state["modules"].values()):
        watch_module(state, module)
    if ip is not None:
        watch_shell(state, ip)
    state["hooks"] = hooks(ip)
    state["importers"] = list(sys.meta_path) + list(sys.path_hooks)
    state["user_ns"] = ip.user_ns if ip is not None else {}
    state["user_builtins"] = state["user_ns"].get("__builtins__", MISSING)
    state["setup"] = {path: find(path) for path in SETUP_NAMES.values()}
    _STATE = state
    sys.addaudithook(on_audit)


def find(path: str):
    """The module, or module attribute, that a dotted path names."""
    if path in sys.modules:
        return sys.modules[path]
    module, _, attr = path.rpartition(".")
    return getattr(sys.modules[module], attr)


def hmac_function():
    """HMAC, taken now: OpenSSL's C function where there is one, so no module
    attribute a student rebinds later ever sees the key."""
    try:
        from _hashlib import hmac_digest
    except ImportError:
        from hmac import digest as hmac_digest
    return hmac_digest


def get_shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def library_roots() -> tuple[str, ...]:
    """Folders of installed code: a ctypes call from a file in them is a
    library's (the Graphviz renderer's), not the notebook's."""
    import site

    import autodiff

    paths = sysconfig.get_paths()
    roots = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(site.getsitepackages())
    roots.add(os.path.dirname(autodiff.__file__))
    roots.add(os.path.dirname(__file__))  # this package: the monitor's own code
    return tuple(os.path.join(root, "") for root in sorted(roots))


def watched_modules() -> dict[str, types.ModuleType]:
    """numpy, numpy.testing, numpy.linalg, autodiff and its submodules, this module
    and its package, the standard modules above, and each NumPy or autodiff module
    that holds the code of a function the others export: numpy.allclose calls the
    isclose of numpy._core.numeric, so replacing that one forges allclose too."""
    import numpy.linalg
    import numpy.testing  # noqa: F401

    import autodiff.grading  # noqa: F401

    names = ["numpy", "numpy.testing", "numpy.linalg", *STANDARD_MODULES]
    ours = ("autodiff", "classroom")  # the library, and this module's package
    names += sorted(name for name in sys.modules if name.split(".")[0] in ours)
    modules = {name: sys.modules[name] for name in names if name in sys.modules}
    for module in list(modules.values()):
        for value in list(vars(module).values()):
            home = code_module(value)
            if home and home.split(".")[0] in ("numpy", *ours):
                modules.setdefault(home, sys.modules[home])
    return modules


def code_module(value) -> str | None:
    """The name of the module whose globals a function's code reads."""
    function = getattr(value, "_implementation", value)  # NumPy's dispatchers
    namespace = getattr(function, "__globals__", None)
    name = namespace.get("__name__") if isinstance(namespace, dict) else None
    return name if name in sys.modules else None


def watch_module(state: dict, module: types.ModuleType) -> None:
    """Its attributes but the module's own dunders (__file__...): public ones, and
    private code (forbid_calls runs autodiff.grading.helpers._code_objects)."""
    name = module.__name__
    entries = []
    for attr, value in list(vars(module).items()):
        if attr.startswith("__") and attr.endswith("__"):
            continue
        code = isinstance(value, (types.FunctionType, type))
        if attr.startswith("_") and not code:
            continue
        if name == "sys" and not callable(value):  # sys.stdout, sys.path... change
            continue
        entries.append((attr, value))
        label(state, value, f"{name}.{attr}")
        if isinstance(value, type) and value.__module__ == name:
            watch_class(state, value)
    state["namespaces"].append((name, vars(module), entries, None))


def label(state: dict, value, name: str) -> None:
    """Remember the name of a function, class or module, for the audit hook."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, (types.FunctionType, type, types.ModuleType)):
        state["labels"].setdefault(id(value), name)
    inner = getattr(value, "_implementation", None)  # NumPy's dispatchers
    if isinstance(inner, types.FunctionType):
        state["labels"].setdefault(id(inner), name)


def watch_class(state: dict, cls: type) -> None:
    """Every attribute of a class that can change, and the names it inherits, so
    that a new attribute overriding one of them counts too."""
    if cls.__flags__ & IMMUTABLE_TYPE or id(cls) in state["classes"]:
        return
    state["classes"].add(id(cls))
    name = f"{cls.__module__}.{cls.__qualname__}"
    entries = list(vars(cls).items())
    for attr, value in entries:
        label(state, value, f"{name}.{attr}")
    inherited: set[str] = set()
    for base in cls.__mro__[1:]:
        inherited.update(vars(base))
    state["namespaces"].append((name, cls, entries, frozenset(inherited)))


def watch_object(state: dict, obj, name: str) -> None:
    """One of the kernel's objects: the callables among its attributes (a bound
    method replaced), its class and their bases."""
    methods: set[str] = set()
    for cls in type(obj).__mro__:
        watch_class(state, cls)
        methods.update(attr for attr, value in vars(cls).items() if callable(value))
    namespace = getattr(obj, "__dict__", {})
    # traitlets keep the values of traits (DisplayTrap.hook) in _trait_values
    for values in (namespace, namespace.get("_trait_values")):
        if isinstance(values, dict):
            entries = [(attr, value) for attr, value in values.items() if callable(value)]
            state["namespaces"].append((name, values, entries, frozenset(methods)))


def watch_shell(state: dict, ip) -> None:
    """The shell and the objects that run a cell and publish its output, and the
    modules of their classes. The streams' instances are left out: IPython wraps
    their write for every cell (and the answer line is signed anyway)."""
    kernel = ip.kernel
    objects = {
        "get_ipython()": ip,
        "get_ipython().kernel.session": kernel.session,
        "get_ipython().kernel.iopub_thread": kernel.iopub_thread,
    }
    for attr in SHELL_ATTRIBUTES[1:-1]:
        objects[f"get_ipython().{attr}"] = getattr(ip, attr)
    for name, obj in objects.items():
        watch_object(state, obj, name)
    classes = [cls for obj in objects.values() for cls in type(obj).__mro__]
    for stream in (sys.stdout, sys.stderr):
        classes += type(stream).__mro__
    for cls in classes:
        watch_class(state, cls)
        module = sys.modules.get(cls.__module__)
        if module is not None and cls.__module__ not in state["modules"]:
            state["modules"][cls.__module__] = module
            watch_module(state, module)
    state["shell_attributes"] = [(attr, getattr(ip, attr)) for attr in SHELL_ATTRIBUTES]
    state["run_code"] = type(ip).run_code.__code__
    state["run_ast_nodes"] = type(ip).run_ast_nodes.__code__


def hooks(ip) -> dict:
    """The hooks, copied: trace and profile functions, sys.monitoring tools
    (Python 3.12+), and the lists IPython runs on every cell."""
    functions = {
        "sys.settrace": sys.gettrace(),
        "sys.setprofile": sys.getprofile(),
        "threading.settrace": threading.gettrace(),
        "threading.setprofile": threading.getprofile(),
    }
    monitoring: Any = getattr(sys, "monitoring", None)
    for tool in range(6) if monitoring else ():
        functions[f"sys.monitoring tool {tool}"] = monitoring.get_tool(tool)
    lists = {}
    if ip is not None:
        manager = ip.input_transformer_manager
        lists["an AST transformer"] = list(ip.ast_transformers)
        lists["an input transformer (cleanup)"] = list(manager.cleanup_transforms)
        lists["an input transformer (line)"] = list(manager.line_transforms)
        lists["an input transformer (token)"] = list(manager.token_transformers)
        lists["an input transformer (post)"] = list(ip.input_transformers_post)
        for event, callbacks in ip.events.callbacks.items():
            lists[f"a callback of the '{event}' event"] = list(callbacks)
    return {"functions": functions, "lists": lists}


# --- the audit hook -----------------------------------------------------------------


def on_audit(event: str, args: tuple) -> None:
    """Refuse other audit hooks, record what the check reports. It runs on every
    audited event in the process (hundreds of thousands a notebook), so it
    returns at once for the others."""
    if event not in AUDITED:
        return
    if event == "sys.addaudithook":
        _STATE["audit"].append("sys.addaudithook was called")
        raise RuntimeError("grading does not allow sys.addaudithook")
    try:
        finding = audit_finding(event, args)
    except Exception:  # an error here would break the audited call itself
        finding = None
    if finding and finding not in _STATE["audit"]:
        _STATE["audit"].append(finding)


def audit_finding(event: str, args: tuple) -> str | None:
    if event in ("object.__setattr__", "object.__delattr__"):
        name = _STATE["labels"].get(id(args[0]))
        return f"{name}.{args[1]} was changed" if name else None
    if not from_notebook(sys._getframe(2)):  # 2: the audited function's caller
        return None  # doctest sets sys.settrace, forbid_calls sys.setprofile
    if not event.startswith(("ctypes.", "gc.")):
        return f"{event} was called by the notebook's code"
    if event in GC_EVENTS:
        return f"gc was used to reach the interpreter's objects ({event})"
    return f"ctypes was used to read or write memory ({event})"


def from_notebook(frame) -> bool:
    """Whether the nearest caller outside ctypes and the import system is the
    notebook's code (a cell, or code it compiled) rather than an installed library."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_STATE["ctypes_dir"]) or filename.startswith("<frozen")):
            return notebook_code(frame.f_code)
        frame = frame.f_back
    return False


# --- the check ----------------------------------------------------------------------


def report(nonce: str, caller: types.FrameType) -> None:
    """Print the answer line through the stream the kernel had at start."""
    if not _STATE:
        findings = ["the grading monitor was not started"]
    else:
        findings = _STATE["audit"] + cell_findings(nonce, caller) + findings_now()
    payload = "[" + ", ".join(json_string(text) for text in dict.fromkeys(findings)) + "]"
    line = f"AUTODIFF-CHECK {nonce} {payload}"
    if _STATE.get("key"):
        message = f"{nonce} {payload}".encode()
        line += " " + _STATE["digest"](_STATE["key"], message, "sha256").hex()
    _STATE.get("write", sys.stdout.write)(line + "\n")
    _STATE.get("flush", sys.stdout.flush)()


def json_string(text: str) -> str:
    """A JSON string of printable ASCII (names in findings come from the student)."""
    out = []
    for char in text[:300]:
        if char in '"\\':
            out.append("\\" + char)
        else:
            out.append(char if " " <= char <= "~" else "?")
    return '"' + "".join(out) + '"'


def cell_findings(nonce: str, caller: types.FrameType) -> list[str]:
    """check() must be the whole check cell, run by IPython's run_code: a rewritten
    cell or a wrapper could take a hook out for the check and put it back after.
    IPython compiles each statement of a cell on its own, so the statements are
    counted in its run_ast_nodes, which runs them (its list ``nodelist``)."""
    code = caller.f_code
    if code.co_name != "<module>":
        return ["check() was called by other code than the check cell"]
    source = CHECK_CALL.format(nonce)
    for mode in ("exec", "single"):  # IPython runs a last expression as "single"
        expected = compile(source, "<check>", mode)
        if (code.co_code, code.co_names, code.co_consts) == (
            expected.co_code,
            expected.co_names,
            expected.co_consts,
        ):
            break
    else:
        return ["the check cell was changed before it ran"]
    if _STATE["run_code"] is None:  # not in IPython
        return []
    runner = caller.f_back
    if runner is None or runner.f_code is not _STATE["run_code"]:
        return ["check() was not called by IPython from the check cell"]
    cell = runner.f_back
    if cell is None or cell.f_code is not _STATE["run_ast_nodes"]:
        return ["check() was not called by IPython from the check cell"]
    if len(cell.f_locals.get("nodelist", ())) != 1:
        return ["the check cell was changed before it ran"]
    return []


def findings_now() -> list[str]:
    findings = []
    for prefix, where, entries, inherited in _STATE["namespaces"]:
        findings += namespace_findings(prefix, where, entries, inherited)
    findings += hook_findings()
    for name, module in _STATE["modules"].items():
        if sys.modules.get(name) is not module:
            findings.append(f"sys.modules[{name!r}] was replaced")
    return findings + notebook_findings() + thread_findings() + import_findings()


def import_findings() -> list[str]:
    """A module the tests import must be the installed one: the notebook's folder may
    not come before the installed packages in sys.path, and no import finder or path
    hook of the notebook's own code may be added."""
    findings = []
    here = ("", ".", os.getcwd())
    folder = [i for i, path in enumerate(sys.path) if path in here]
    installed = [i for i, path in enumerate(sys.path) if path.startswith(_STATE["roots"])]
    if folder and installed and min(folder) < max(installed):
        findings.append("sys.path looks in the notebook's folder before installed packages")
    for kind, now in (("sys.meta_path", sys.meta_path), ("sys.path_hooks", sys.path_hooks)):
        for item in now:
            if any(item is old for old in _STATE["importers"]):
                continue
            method = getattr(item, "find_spec", item)
            code = getattr(getattr(method, "__func__", method), "__code__", None)
            if code is not None and notebook_code(code):
                findings.append(f"an importer was added to {kind} ({describe(item)})")
    return findings


def namespace_findings(prefix, where, entries, inherited) -> list[str]:
    """Attributes replaced or deleted; for classes and the kernel's objects, new
    attributes overriding inherited ones (type(get_ipython()).run_cell = ...)."""
    namespace = where.__dict__ if isinstance(where, type) else where
    findings = []
    for attr, value in entries:
        now = namespace.get(attr, MISSING)
        if now is not value and not same_method(now, value):
            findings.append(f"{prefix}.{attr} was {'deleted' if now is MISSING else 'replaced'}")
    if inherited is not None and (findings or len(namespace) != len(entries)):
        known = {attr for attr, _ in entries}
        for attr in namespace:
            if attr not in known and attr in inherited and attr != "__slotnames__":
                findings.append(f"{prefix}.{attr} was replaced")
    return findings


def same_method(now, value) -> bool:
    """Bound methods are made anew on each access: ipykernel sets builtins.input to
    a bound method for every request, run_code sets sys.excepthook for every cell."""
    if type(now) is not types.MethodType or type(value) is not types.MethodType:
        return False
    return now.__func__ is value.__func__ and now.__self__ is value.__self__


def hook_findings() -> list[str]:
    ip = _STATE["ip"]
    baseline, current = _STATE["hooks"], hooks(ip)
    findings = []
    for name, function in current["functions"].items():
        if function is not baseline["functions"].get(name):
            findings.append(f"{name} is set ({describe(function)})")
    for kind in dict.fromkeys([*baseline["lists"], *current["lists"]]):
        before = baseline["lists"].get(kind, [])
        findings += list_findings(kind, before, current["lists"].get(kind, []))
    for attr, value in _STATE.get("shell_attributes", []):
        if getattr(ip, attr, MISSING) is not value:
            findings.append(f"get_ipython().{attr} was replaced")
    return findings


def list_findings(kind: str, before: list, now: list) -> list[str]:
    findings = []
    for item in now:
        if not any(item is old for old in before) and not library_callback(kind, item):
            findings.append(f"{kind} was added ({describe(item)})")
    for old in before:
        if not any(item is old for item in now):
            findings.append(f"{kind} was removed ({describe(old)})")
    return findings


def library_callback(kind: str, item) -> bool:
    """Event callbacks that libraries register as a notebook runs (Matplotlib's
    flush_figures): functions of a module loaded from an installed package. Never
    transformers: a library's transformer with the student's arguments (a prompt
    pattern to strip) can rewrite test cells."""
    function = getattr(item, "__func__", item)
    namespace = getattr(function, "__globals__", None)
    code = getattr(function, "__code__", None)
    if not kind.startswith("a callback") or code is None or not isinstance(namespace, dict):
        return False
    module = sys.modules.get(str(namespace.get("__name__")))
    if module is None or vars(module) is not namespace:
        return False
    return not notebook_code(code)


def describe(obj) -> str:
    if obj is None:
        return "None"
    if isinstance(obj, (types.FunctionType, types.MethodType, type)):
        return obj.__qualname__
    return type(obj).__qualname__


def notebook_findings() -> list[str]:
    """Names in the notebook's namespace, where test cells and the functions the
    hidden tests define look names up before the builtins."""
    user_ns = _STATE["user_ns"]
    findings = []
    if user_ns.get("__builtins__", MISSING) is not _STATE["user_builtins"]:
        findings.append("the notebook's __builtins__ was replaced")
    for name, path in SETUP_NAMES.items():
        value = user_ns.get(name, MISSING)
        if value is not MISSING and value is not _STATE["setup"][path]:
            findings.append(f"the notebook's name {name} no longer refers to {path}")
    for name in TEST_BUILTINS:
        value = user_ns.get(name, MISSING)
        if value is not MISSING and callable(value) and value is not _STATE["builtins"][name]:
            findings.append(f"the notebook's name {name} hides the builtin {name}")
    return findings


def thread_findings() -> list[str]:
    """Notebook code that runs, or is due to run, in another thread: a timer could
    take a hook out for the check and put it back after."""
    frames = sys._current_frames()
    findings = []
    for thread in threading.enumerate():
        if thread is threading.current_thread():
            continue
        due = [getattr(thread, "_target", None), getattr(thread, "function", None)]
        codes = [getattr(function, "__code__", None) for function in due]
        codes.append(getattr(type(thread).run, "__code__", None))
        frame = frames.get(thread.ident or 0)
        while frame is not None:
            codes.append(frame.f_code)
            frame = frame.f_back
        if any(code is not None and notebook_code(code) for code in codes):
            findings.append(f"the notebook's code runs in another thread ({thread.name})")
    return findings


def notebook_code(code: types.CodeType) -> bool:
    return not code.co_filename.startswith(_STATE["roots"])


# --- the grader's side (outside the kernel) ---------------------------------------


def start_source(key: str) -> str:
    """The silent cell that starts the monitor, sent before the notebook's cells
    (and again after every kernel restart, before any cell is replayed)."""
    # The notebook's folder ('' or the working folder in sys.path) goes last first:
    # a student's classroom/, autodiff/ or numpy.py there must not stand in for ours.
    return (
        "__import__('sys').path.sort(key=lambda p: p in ('', '.', __import__('os').getcwd()))"
        f" or __import__('classroom.monitor', fromlist=['start']).start({key!r})"
    )


def check_source(nonce: str) -> str:
    """The whole source of a check cell."""
    return CHECK_CALL.format(nonce)


def read_answer(output: str, nonce: str, key: str = "") -> list[str] | None:
    """The findings in a check cell's stream output, or None for tampering: no
    answer line, more than one, a malformed one, or one without the right HMAC."""
    import hmac
    import json

    prefix = f"AUTODIFF-CHECK {nonce} "
    lines = [line for line in output.splitlines() if line.startswith(prefix)]
    if len(lines) != 1:
        return None
    payload = lines[0][len(prefix) :]
    if key:
        payload, _, signature = payload.rpartition(" ")
        message = f"{nonce} {payload}".encode()
        expected = hmac.digest(key.encode(), message, "sha256").hex()
        if not hmac.compare_digest(signature, expected):
            return None
    try:
        findings = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(findings, list) or not all(isinstance(f, str) for f in findings):
        return None
    return findings


# --- sealing, and the two entry points ------------------------------------------------


def seal(namespace: dict, private: dict) -> None:
    """Fill ``private`` with this module's globals, a copy of the builtins and
    copies of its functions that look names up in ``private``: rebinding an
    attribute of this module, or a builtin, after start() changes nothing here."""
    private.update(namespace)
    private["__builtins__"] = dict(vars(builtins))
    for name, value in namespace.items():
        own = isinstance(value, types.FunctionType) and value.__module__ == __name__
        if own and value.__closure__ is None:  # not start and check themselves
            private[name] = types.FunctionType(value.__code__, private, name, value.__defaults__)


def entry_points() -> tuple[Callable[[str], None], Callable[[str], None]]:
    """start and check, sharing the sealed module through their closure only."""
    sealed: dict = {}

    def start(key: str = "") -> None:
        """Record the baseline, once (see the module's docstring)."""
        if not sealed:
            seal(globals(), sealed)
            sealed["begin"](key, sealed["sys"]._getframe(1))

    def check(nonce: str) -> None:
        """Print ``AUTODIFF-CHECK <nonce> <findings> <HMAC>`` (see the module's
        docstring)."""
        if sealed:
            sealed["report"](nonce, sealed["sys"]._getframe(1))
        else:
            report(nonce, sys._getframe(1))

    return start, check


start, check = entry_points()
