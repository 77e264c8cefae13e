"""Checks of the numbers users give the library's policy objects, worded as the settings' errors are
(``Limits.max_classes=0: expected an integer ≥ 1``).

NaN compares false with every bound, so ``value < 0`` lets it through: a NaN count is never reached, a NaN
wait cannot be slept, and a NaN deadline never comes. Each check says what it wants instead of what it
refuses.
"""

from __future__ import annotations

import math
import operator

from otel_errcompact.exceptions import ConfigurationError

__all__ = ["check_integer", "check_seconds"]


def check_integer(owner: str, name: str, value: object, least: int, want: str | None = None) -> None:
    """Refuse ``value`` for ``owner.name`` unless it is an integer ≥ ``least``. A float is refused even when
    it compares well."""
    try:
        ok = operator.index(value) >= least  # type: ignore[arg-type]
    except TypeError:
        ok = False
    if not ok:
        raise ConfigurationError(f"{owner}.{name}={value!r}: expected {want or f'an integer ≥ {least}'}")


def check_seconds(owner: str, name: str, value: object, *, zero: bool = True) -> None:
    """Refuse ``value`` for ``owner.name`` unless it is a finite number of seconds, ≥ 0 (``zero``) or > 0."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero):  # type: ignore[operator]
        raise ConfigurationError(
            f"{owner}.{name}={value!r}: expected a finite number {'≥ 0' if zero else '> 0'}"
        )
