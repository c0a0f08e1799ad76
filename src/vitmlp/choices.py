"""The one check for enumerated options, light enough for every module to import."""
from __future__ import annotations

from typing import Iterable


def check_choice(what: str, value, choices: Iterable) -> None:
    """Raise ValueError naming the valid choices when ``value`` is not one of them."""
    choices = list(choices)
    if value not in choices:
        valid = ", ".join(map(str, choices)) or "(none)"
        raise ValueError(f"unknown {what} {value!r}; valid choices: {valid}")
