"""The checks of options and notebook parameters, light enough for every module to import.

Each raises ValueError saying what is expected (the valid choices, the range) and what it got.
"""
from __future__ import annotations

from typing import Callable, Iterable


def check_choice(what: str, value, choices: Iterable) -> None:
    """Raise ValueError naming the valid choices when ``value`` is not one of them."""
    choices = list(choices)
    if value not in choices:
        valid = ", ".join(map(str, choices)) or "(none)"
        raise ValueError(f"unknown {what} {value!r}; valid choices: {valid}")


def pick(what: str, chosen, valid: Iterable | None = None, required: Iterable = (), because: str = "") -> list:
    """``chosen`` as a list without repeats (None: every valid choice), refused when it is not a
    list, is empty, holds a value outside ``valid`` (None: any value) or lacks one of ``required``
    (the message ends with ``because``, the reason they are required)."""
    valid = None if valid is None else list(valid)
    if chosen is None and valid is not None:
        chosen = valid
    if not isinstance(chosen, (list, tuple)) or not chosen:
        hint = f" from: {', '.join(map(str, valid))}" if valid is not None else ""
        raise ValueError(f"{what} must be a non-empty list{hint}; got {chosen!r}")
    for value in chosen if valid is not None else ():
        check_choice(f"{what} entry", value, valid)
    missing = [r for r in required if r not in chosen]
    if missing:
        raise ValueError(f"{what} must include {', '.join(map(repr, missing))}{': ' + because if because else ''}; "
                         f"got {list(chosen)!r}")
    return list(dict.fromkeys(chosen))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_int(what: str, value, low: int = 1, high: int | None = None, multiple: int = 1,
              none: bool = False) -> int | None:
    """``value`` if it is an int from ``low`` (to ``high``), a multiple of ``multiple`` (or None, if
    ``none``: a default chosen later); else ValueError saying what is expected."""
    if none and value is None:
        return None
    if not (_is_int(value) and value >= low and (high is None or value <= high) and value % multiple == 0):
        kind = f"a multiple of {multiple}" if multiple > 1 else "an int"
        if high is not None:
            expected = f"{kind} from {low} to {high}"
        elif low == max(1, multiple):
            expected = f"a positive {kind.split(' ', 1)[1]}"
        else:
            expected = f"{kind} >= {low}"
        raise ValueError(f"{what} must be {'None or ' if none else ''}{expected}, got {value!r}")
    return value


def check_number(what: str, value, above: float | None = None, at_least: float | None = None,
                 at_most: float | None = None) -> float:
    """``value`` if it is a number (not a bool) ``> above``, ``>= at_least`` and ``<= at_most``
    (each bound optional); else ValueError."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    bounds = [(f"> {above}", above, lambda v, b: v > b), (f">= {at_least}", at_least, lambda v, b: v >= b),
              (f"<= {at_most}", at_most, lambda v, b: v <= b)]
    if not ok or not all(b is None or test(value, b) for _, b, test in bounds):
        limits = " and ".join(text for text, b, _ in bounds if b is not None)
        raise ValueError(f"{what} must be a number{' ' + limits if limits else ''}, got {value!r}")
    return value


def check_bool(what: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be True or False, got {value!r}")
    return value


def check_list(what: str, values, check: Callable = check_int, count: int = 1, distinct: bool = False,
               **limits) -> list:
    """``values`` as a list, refused unless it is a list whose every value passes
    ``check(f"{what}[i]", value, **limits)``, with at least ``count`` different values (and no
    repeat at all if ``distinct``)."""
    some = {0: "a list", 1: "a non-empty list"}.get(count, f"a list of at least {count} different values")
    expected = f"{what} must be {some}{' without repeats' if distinct else ''}, got {values!r}"
    if not isinstance(values, (list, tuple)):
        raise ValueError(expected)
    for i, v in enumerate(values):
        check(f"{what}[{i}]", v, **limits)
    if len(set(values)) < count or (distinct and len(set(values)) != len(values)):
        raise ValueError(expected)
    return list(values)


def check_tuples(what: str, values, *checks: Callable) -> list[list]:
    """``values`` as a non-empty list of lists of ``len(checks)`` entries each (``[[model, batch], ...]``),
    entry j passing ``checks[j](f"{what}[i][j]", entry)``."""
    if not (isinstance(values, (list, tuple)) and values
            and all(isinstance(v, (list, tuple)) and len(v) == len(checks) for v in values)):
        raise ValueError(f"{what} must be a non-empty list of lists of {len(checks)} values, got {values!r}")
    for i, v in enumerate(values):
        for j, (check, x) in enumerate(zip(checks, v)):
            check(f"{what}[{i}][{j}]", x)
    return [list(v) for v in values]


def check_prefix(what: str, name, prefix: str) -> str:
    """``name`` if it is a string starting with ``prefix`` (a model family: ``"mixer_"``, ``"timm:"``)."""
    if not (isinstance(name, str) and name.startswith(prefix)):
        raise ValueError(f"{what} must be a {prefix}* name, got {name!r}")
    return name
