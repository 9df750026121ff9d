"""A check's option: its default and help, and how a value from ddpdoctor.toml or ``--set`` is converted and
bounded. Re-exported by ``ddpdoctor.api``, which is where plugins import it from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Option:
    """A threshold or setting of a check. Settable in ddpdoctor.toml ([checks.NAME] key = value)
    and on the command line (``--set NAME.key=value``).

    Numbers are finite and within [min, max] (default 0 .. 1e9: no check's threshold is negative, and a
    larger one is a typo); an int option takes no bool and no fraction; TOML values keep their own type
    (``timeout = "soon"`` is an error, not a string), while ``--set`` strings are parsed."""

    default: Any
    help: str
    type: Callable[[Any], Any] | None = None  # converter; defaults to type(default)
    min: float | None = 0
    max: float | None = 1e9

    def convert(self, value: Any) -> Any:
        conv = self.type or (type(self.default) if self.default is not None else None)
        if conv is None or value is None:
            return value
        if conv is bool:
            return _to_bool(value)
        if conv in (int, float):
            return self._bounded(_to_number(value, conv))
        if conv is str and not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return conv(value)

    def _bounded(self, number: float) -> float:
        if self.min is not None and number < self.min:
            raise ValueError(f"{number!r} is below the minimum {self.min:g}")
        if self.max is not None and number > self.max:
            raise ValueError(f"{number!r} is above the maximum {self.max:g}")
        return number


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
    raise ValueError(f"expected true/false, got {value!r}")


def _to_number(value: Any, conv: type) -> int | float:
    """int or float from a TOML number or a --set string; bool is not a number here (True would be 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        number = float(value) if isinstance(value, str) else value
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):  # NaN compares false with every bound
        raise ValueError(f"expected a finite number, got {value!r}")
    if conv is int:
        if number != int(number):
            raise ValueError(f"expected a whole number, got {value!r}")
        return int(number)
    return float(number)
