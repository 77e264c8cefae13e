"""The compactor's values built by fast constructors (``otel_errcompact._frozen``) are the dataclasses' own.

The compactor builds each digest's ``Digest``, ``Location``, ``DedupKey`` and a plain traceback's ``Parsed``
without the frozen ``__setattr__``. A reader cannot tell: equal, hashed alike and frozen like instances the
dataclass's ``__init__`` builds. And a field the constructor is not given is an error, never a silent default.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from otel_errcompact._frozen import fast_constructor
from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import DedupKey, Digest, Location, new_digest
from otel_errcompact.parsers._base import Parsed
from otel_errcompact.parsers.python import parse_plain
from tests.realerrors import python_error

APP = """
    def read_port(settings):
        return int(settings["port"])

    read_port({"host": "db"})
"""


@pytest.fixture(scope="module")
def traceback_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    return python_error(tmp_path_factory.mktemp("frozen"), APP, name="settings.py")


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass instance's fields by name, not converted (``dataclasses.asdict`` would recurse)."""
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


def _rebuilt(value: Any) -> Any:
    """``value`` built again by its dataclass's own ``__init__``, from its fields."""
    return type(value)(**_fields(value))


def test_a_compacted_digest_is_the_dataclasses_own(traceback_text: str) -> None:
    digest = compact_text(traceback_text)
    assert digest.line == "[KeyError] at settings.py:2 in read_port: 'port'"
    parts = [(digest, Digest), (digest.location, Location), (digest.key_parts, DedupKey)]
    for value, cls in parts:
        assert type(value) is cls
        again = _rebuilt(value)
        assert again == value and hash(again) == hash(value) and repr(again) == repr(value)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, dataclasses.fields(value)[0].name, "changed")
        assert not hasattr(value, "__dict__")  # slotted: nothing but its fields


def test_the_plain_traceback_parse_is_the_dataclasses_own(traceback_text: str) -> None:
    parsed = parse_plain(traceback_text)
    assert parsed is not None and type(parsed) is Parsed
    assert (parsed.type, parsed.cause, parsed.format) == ("KeyError", "'port'", "python")
    assert _rebuilt(parsed) == parsed
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.cause = "changed"  # type: ignore[misc]


def test_a_field_left_out_is_an_error_not_a_default(traceback_text: str) -> None:
    digest = compact_text(traceback_text)
    fields = _fields(digest)
    assert new_digest(**fields) == digest
    del fields["retry_after_s"]  # a field with a default in the dataclass
    with pytest.raises(TypeError, match="retry_after_s"):
        new_digest(**fields)


def test_only_slotted_dataclasses_without_post_init_are_accepted() -> None:
    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        name: str

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        name: str

        def __post_init__(self) -> None:
            if not self.name:
                raise ValueError("a name is required")

    with pytest.raises(TypeError, match="slotted"):
        fast_constructor(Unslotted)
    with pytest.raises(TypeError, match="__post_init__"):
        fast_constructor(Checked)
