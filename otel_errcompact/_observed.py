"""Observable instruments on a meter that outlives the handle that registered them.

A meter provider cannot drop an instrument, and one ``init()`` after another on the same provider (the
application's, or the one an earlier ``init()`` created) registers the same instruments again. The SDK
answers a second registration of a name with the first instrument and drops the new callbacks: the
counters would go on reading the first handle's writer and history, stale, and keep them alive for as long
as the provider lives.

So each observable instrument is registered once per meter, with a callback that reads whichever object
registered the name last, through a weak reference: a later handle takes the name over, and a handle
that is gone leaves the instrument reporting nothing.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

from opentelemetry.metrics import CallbackOptions, Meter, Observation

__all__ = ["observe"]

T = TypeVar("T")
_Reader = Callable[[Any, CallbackOptions], Iterable[Observation]]
_Slot = tuple["weakref.ref[Any]", _Reader]

_lock = threading.Lock()
_slots: weakref.WeakKeyDictionary[Meter, dict[str, _Slot]] = weakref.WeakKeyDictionary()


def observe(
    meter: Meter,
    name: str,
    owner: T,
    read: Callable[[T, CallbackOptions], Iterable[Observation]],
    *,
    kind: Literal["counter", "gauge"] = "counter",
    unit: str = "",
    description: str = "",
) -> None:
    """Report ``read(owner, options)`` as the observable ``kind`` ``name`` of ``meter``, in place of what
    an earlier registration of ``name`` on ``meter`` read. ``owner`` is not kept alive by the meter;
    ``read`` must not hold it either (a function of the owner, not a closure over it)."""
    with _lock:
        slots = _slots.get(meter)
        if slots is None:
            slots = _slots[meter] = {}
        first = name not in slots
        slots[name] = (weakref.ref(owner), read)
    if first:
        create = meter.create_observable_gauge if kind == "gauge" else meter.create_observable_counter
        create(name, callbacks=[functools.partial(_read, slots, name)], unit=unit, description=description)


def _read(slots: dict[str, _Slot], name: str, options: CallbackOptions) -> Iterable[Observation]:
    owner_ref, read = slots[name]
    owner = owner_ref()
    return () if owner is None else read(owner, options)
