"""Argument checks done in Python before any C call: ctypes converts silently
(a str with NUL is cut, an int >= 2**63 wraps, a float is truncated), and the C
API cannot see that an array is read-only, a broadcast view or on another
device. Every failure names the argument, its value and what is allowed."""
from __future__ import annotations

import numbers
import operator

from .errors import InvalidArgumentError

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
MAX_NAME_BYTES = 255


def invalid(function: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{function}: {message}", 1)


def integer(value, argument: str, function: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """An int (or anything with __index__; floats are refused, never truncated) in [low, high]."""
    try:
        result = operator.index(value)
    except TypeError:
        raise TypeError(f"{function}: argument '{argument}' = {value!r} is not an integer "
                        f"({type(value).__name__})") from None
    if not low <= result <= high:
        raise invalid(function, f"argument '{argument}' = {result} is outside {low}..{high}")
    return result


def flag(value, argument: str, function: str) -> int:
    """A bool, or the ints 0 and 1."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return int(value)
    raise TypeError(f"{function}: argument '{argument}' = {value!r} must be True or False")


def real(value, argument: str, function: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{function}: argument '{argument}' = {value!r} is not a real number")
    return float(value)


def name(value, argument: str, function: str) -> bytes:
    """A non-empty str of at most 255 UTF-8 bytes without NUL, encoded."""
    if not isinstance(value, str):
        raise TypeError(f"{function}: argument '{argument}' = {value!r} is not a str")
    encoded = value.encode()
    if not encoded or len(encoded) > MAX_NAME_BYTES or b"\0" in encoded:
        raise invalid(function, f"argument '{argument}' = {value!r} must have 1 to {MAX_NAME_BYTES} "
                                f"UTF-8 bytes and no NUL character")
    return encoded


def path(value, argument: str, function: str) -> bytes:
    """A str (possibly empty) without NUL, encoded."""
    if not isinstance(value, str):
        raise TypeError(f"{function}: argument '{argument}' = {value!r} is not a str")
    if "\0" in value:
        raise invalid(function, f"argument '{argument}' = {value!r} contains a NUL character")
    return value.encode()


def choice(value, table: dict, argument: str, function: str):
    """table[value], or an error listing the valid choices."""
    try:
        return table[value]
    except (KeyError, TypeError):
        valid = ", ".join(repr(k) for k in table)
        raise invalid(function, f"argument '{argument}' = {value!r} is not one of {valid}") from None
