"""The checks of every option of the Python API, each in one place.

A wrong type raises TypeError and a wrong value ValueError, each with one line that names
the argument ("format value 'e3m4' is not e4m3 or e5m2"). The accepted names are the C++
library's (ParseElementFormat, ParseScaleRule, ParseSavePolicy, ...); checking them here
as well lets the message name the Python argument, which the library cannot know.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

FORMATS = ("e4m3", "e5m2")
SCALE_RULES = ("rceil", "floor", "ceil", "even")
RECIPES = ("e4m3", "hybrid")
POLICIES = ("quantized", "deferred", "auto")
GEMMS = ("fprop", "dgrad", "wgrad")
HP_PRECISIONS = ("bf16", "fp32")
GROUP_LIST_TYPES = ("cumsum", "counts")
DTYPES = ("f32", "bf16")


def describe(value: Any) -> str:
    """The type of value, with the value itself when it is short (for one-line messages)."""
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__}"
    kind = type(value).__name__
    if value is None or isinstance(value, (bool, numbers.Number, str)):
        text = repr(value)
        if len(text) <= 40 and "\n" not in text:
            return f"{kind} {text}"
    return kind


def _or_list(choices: Sequence[Any]) -> str:
    words = [str(c) for c in choices]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def choice(name: str, value: Any, choices: Sequence[str], or_none: bool = False) -> str:
    """value, a str among choices (or None where or_none allows it)."""
    if not isinstance(value, str):
        kind = "None or a str" if or_none else "a str"
        raise TypeError(f"{name} must be {kind} ({_or_list(choices)}), got {describe(value)}")
    if value not in choices:
        raise ValueError(f"{name} value '{value}' is not {_or_list(choices)}")
    return value


def element_format(name: str, value: Any) -> str:
    """An MX element format: "e4m3" or "e5m2"."""
    return choice(name, value, FORMATS)


def scale_rule(value: Any, name: str = "scale") -> str:
    """An E8M0 scale rule (NUMERICS.md section 4)."""
    return choice(name, value, SCALE_RULES)


def dtype(name: str, value: Any) -> str:
    """A high-precision type: "f32" or "bf16" (uint16 bits in numpy)."""
    return choice(name, value, DTYPES)


def group_list_type(value: Any, name: str = "group_list_type") -> str:
    """"cumsum" (cumulative group ends) or "counts" (group sizes)."""
    return choice(name, value, GROUP_LIST_TYPES)


def recipe(value: Any) -> str:
    """The element-format recipe of a layer: "e4m3" or "hybrid" (E5M2 gradients)."""
    return choice("recipe", value, RECIPES)


def policy(name: str, value: Any) -> str | None:
    """A save policy, or None (the default of the layer)."""
    return None if value is None else choice(name, value, POLICIES, or_none=True)


def gemms(value: Any, name: str = "hp_gemms") -> tuple[str, ...]:
    """A set of training GEMMs: a tuple or list of distinct names among fprop, dgrad, wgrad
    (a single str is one name); () for none."""
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (tuple, list)):
        raise TypeError(f"{name} must be a tuple of GEMM names ({_or_list(GEMMS)}), "
                        f"got {describe(value)}")
    out = []
    for item in items:
        g = choice(f"{name} entry", item, GEMMS)
        if g in out:
            raise ValueError(f"{name} names '{g}' twice")
        out.append(g)
    return tuple(out)


def hp_precision(value: Any) -> str:
    """The compute type of the high-precision GEMMs: "bf16" or "fp32"."""
    return choice("hp_precision", value, HP_PRECISIONS)


def flag(name: str, value: Any) -> bool:
    """A bool (numpy's bool too); 0, 1, "yes" and None are refused, not read as truth."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {describe(value)}")
    return bool(value)


def integer(name: str, value: Any, minimum: int = 0) -> int:
    """An int (numpy's integers too, never a bool or a float) of at least minimum."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {describe(value)}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def threads(value: Any) -> int:
    """Worker threads: 0 means OpenMP's current count (omp_get_max_threads); a negative
    count is an error, not "all cores"."""
    return integer("threads", value, minimum=0)


def axis(value: Any, allow_both: bool) -> int | str:
    """The blocked axis: -1 (rowwise) or -2 (columnwise), or "both" where allowed.

    The strings "-1" and "-2" are the CLI's spelling and are accepted as well.
    """
    choices = "-1, -2 or both" if allow_both else "-1 or -2"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, str)):
        kind = "an int or a str" if allow_both else "an int"
        raise TypeError(f"axis must be {kind} ({choices}), got {describe(value)}")
    text = str(value)
    if text == "both" and allow_both:
        return "both"
    if text not in ("-1", "-2"):
        raise ValueError(f"axis value '{text}' is not {choices}")
    return int(text)


def array(name: str, value: Any) -> np.ndarray:
    """A numpy array, or an object numpy reads as one without a copy (the buffer protocol,
    __array__: a torch CPU tensor); a list, a tuple or a scalar is refused."""
    if isinstance(value, np.ndarray):
        return value
    refused = (list, tuple, dict, set, str, bytes, bytearray, numbers.Number, type(None))
    if not isinstance(value, refused):
        if any(hasattr(value, a) for a in ("__array__", "__array_interface__",
                                            "__array_struct__")):
            return np.asarray(value)
        try:
            memoryview(value)
        except TypeError:
            pass
        else:
            return np.asarray(value)
    raise TypeError(f"{name} must be a numpy array, got {describe(value)}")


def group_values(name: str, value: Any) -> list[int]:
    """The integers of a group list: a sequence of ints, or a 1-D integer array or tensor."""
    if value is None or isinstance(value, (str, bytes, float, bool)):
        raise TypeError(f"{name} must be a sequence of ints, got {describe(value)}")
    try:
        a = np.asarray(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a sequence of ints, got {describe(value)}") from None
    if a.ndim > 1:
        raise ValueError(f"{name} must be 1-D, got shape {list(a.shape)}")
    if a.size > 0 and a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold ints, got {a.dtype} values")
    return [int(v) for v in a.reshape(-1)]


def deprecated(message: str, stacklevel: int = 3) -> None:
    """A DeprecationWarning pointing at the caller of the public function."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)
