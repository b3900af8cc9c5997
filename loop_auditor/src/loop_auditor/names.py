"""The names a script gives its optimizers and schedulers, so that findings can say
``optimizerD`` rather than "optimizer 1 (Adam)".

Both functions look at the first frame of the script's own code on the stack (frames of this
package, of the standard library and of installed packages are passed over), read nothing
from the device, and return None rather than raise: the caller then names the object by its
class and order.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import sysconfig

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARIES = tuple(
    sorted(
        {
            os.path.abspath(path) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib")
            if (path := sysconfig.get_paths().get(key))
        }
    )
)
# `name = Class(` or `self.name: Type = factory(`: the object is the direct value assigned
_ASSIGNED = re.compile(r"\s*([A-Za-z_][\w.]*)\s*(?::[^=]*)?=\s*[A-Za-z_][\w.]*\s*\(")
_RETURNED = re.compile(r"\s*return\b")
_WRAPPED_IN = ("optimizer", "_optimizer", "scheduler", "_scheduler")  # Accelerate, Lightning
_MAX_FRAMES = 64


def _is_library(frame) -> bool:
    filename = os.path.abspath(frame.f_code.co_filename)
    parts = filename.split(os.sep)
    return (
        filename.startswith(_HERE)
        or filename.startswith(_LIBRARIES)
        or "site-packages" in parts
        or "dist-packages" in parts
    )


def _script_frames():
    """The frames of the script's own code, innermost first."""
    frame = sys._getframe()
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return
        if not _is_library(frame):
            yield frame
        frame = frame.f_back


def _line(frame) -> str:
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno or 0)


def assigned_name(obj) -> str | None:
    """While ``obj`` is being constructed: the name the script's line assigns it to
    (``optimizerD = optim.Adam(...)`` gives ``optimizerD``; ``self.opt = ...``, ``self.opt``).
    A constructor of ``obj`` itself is passed over; a ``return Adam(...)`` in the script's
    own function is followed to the line that called it. None when there is no such line."""
    try:
        for frame in _script_frames():
            if frame.f_locals.get("self") is obj:  # the object's own __init__ (a subclass)
                continue
            line = _line(frame)
            if _RETURNED.match(line):  # built in the script's own function: read its caller
                frame = frame.f_back
                if frame is None or _is_library(frame):
                    return None
                line = _line(frame)
            match = _ASSIGNED.match(line)
            return match.group(1) if match else None
        return None
    except Exception:  # a name is a courtesy: never fail the audited code over it
        return None


def _holds(value, obj) -> bool:
    if value is obj:
        return True
    try:
        inner = vars(value)
    except TypeError:
        return False
    return any(inner.get(name) is obj for name in _WRAPPED_IN)


def bound_name(obj) -> str | None:
    """While the script calls a method of ``obj`` (``scheduler.step()``): the variable of the
    calling code that holds ``obj``, or the wrapper around it (Accelerate's), also as
    ``self.name``; when several do, the one on the calling line. None when the first frame of
    the script's own code holds it under no name."""
    try:
        frame = next(_script_frames(), None)
        if frame is None:
            return None
        names = [name for name, value in frame.f_locals.items() if _holds(value, obj)]
        this = frame.f_locals.get("self")
        if this is not None and this is not obj:
            try:
                names += [f"self.{n}" for n, value in vars(this).items() if _holds(value, obj)]
            except TypeError:
                pass
        if not names and frame.f_globals is not frame.f_locals:
            names = [name for name, value in frame.f_globals.items() if _holds(value, obj)]
        if len(names) > 1:
            line = _line(frame)
            names = [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}\b", line)]
        return names[0] if len(names) == 1 else None
    except Exception:  # a name is a courtesy: never fail the audited code over it
        return None
