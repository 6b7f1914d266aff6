"""The errors of the library, written for a student: each names the op, the shapes or
dtypes, and what to do instead. They subclass the built-in errors NumPy would raise
(``ValueError``, ``TypeError``), so code that catches those catches these too."""


class AutodiffError(Exception):
    """An error already written for a student: it names the op, the shapes or dtypes,
    and what to do. ``Op.run`` passes these on as they are, and explains any other."""


class ShapeError(AutodiffError, ValueError):
    """Inputs whose shapes do not fit together (the message names the op and the shapes)."""


class DTypeError(AutodiffError, TypeError):
    """An input whose dtype the op cannot take (the message names the op and the dtype)."""


class DeviceError(AutodiffError, ValueError):
    """Inputs of one op on different devices (the message names the op and both devices)."""


class DomainError(AutodiffError, ValueError):
    """An input value outside what the op accepts (class indices out of range, ...)."""
