"""Say what is wrong with a setting in the words the user typed: the variable or keyword, and the value.

pydantic reports a bad value by model field (``consecutive: Input should be a valid integer``), which
hides the thing to fix: ``OTEL_ERRCOMPACT_CONSECUTIVE='banana': expected an integer ≥ 1``. This module
turns validation errors into such lines, warns about ``OTEL_ERRCOMPACT_*`` variables that match no
setting (a typo is otherwise silently ignored), and names where a setting came from, so that errors
about paths can say ``OTEL_ERRCOMPACT_SQLITE_PATH`` or ``sqlite_path=`` as appropriate.

The known names are derived from the settings model, never listed here: a setting added to
:class:`~otel_errcompact.config.Settings` is known, documented in errors and checked at once.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from otel_errcompact.exceptions import ConfigurationWarning

__all__ = [
    "describe_errors",
    "env_name",
    "expected",
    "origin_of",
    "unknown_setting_message",
    "warn_unknown_variables",
    "wrong_argument",
]

_MAX_VALUE_CHARS = 80


def env_name(prefix: str, field: str) -> str:
    """``OTEL_ERRCOMPACT_`` + ``consecutive`` → ``OTEL_ERRCOMPACT_CONSECUTIVE``."""
    return f"{prefix}{field}".upper()


def env_lookup(name: str, environ: Mapping[str, str]) -> tuple[str, str] | None:
    # pydantic-settings matches variable names case-insensitively; name the one actually set.
    if name in environ:
        return name, environ[name]
    for key, value in environ.items():
        if key.upper() == name:
            return key, value
    return None


def origin_of(field: str, overrides: Mapping[str, object], prefix: str,
              environ: Mapping[str, str] | None = None) -> str:
    """Where ``field``'s value came from, as the user would write it: ``sqlite_path=``, the variable's
    name, or ``the default sqlite_path``."""
    if overrides.get(field) is not None:
        return f"{field}="
    found = env_lookup(env_name(prefix, field), os.environ if environ is None else environ)
    if found is not None:
        return found[0]
    return f"the default {field}"


def _bound_text(metadata: Iterable[object]) -> str:
    parts = []
    for item in metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None:
                parts.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return (" " + " and ".join(parts)) if parts else ""


def _describe_type(annotation: Any, metadata: Iterable[object]) -> str:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = " or ".join(_describe_type(a, metadata) for a in args)
        if len(args) < len(typing.get_args(annotation)):
            return f"{inner}, or empty / none to turn it off"
        return inner
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer" + _bound_text(metadata)
    if annotation is float:
        return "a number" + _bound_text(metadata)
    if annotation is str:
        return "a string"
    name = getattr(annotation, "__name__", str(annotation))
    if name.endswith("Path"):
        return "a file path"
    return f"a value of type {name}"


def expected(field: FieldInfo) -> str:
    """What a field accepts, in words: ``an integer ≥ 1``, ``one of 'halt', 'human'``."""
    return _describe_type(field.annotation, field.metadata)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 1] + "…"


def wrong_argument(name: str, value: object, want: str) -> str:
    """``thresholds=5: expected a Thresholds``: a keyword argument of the wrong kind, in the words the
    settings' own errors use."""
    return f"{name}={_shown(value)}: expected {want}"


def unknown_setting_message(name: str, known: Iterable[str], *, as_keyword: bool, prefix: str) -> str:
    """``unknown setting consecutve= (did you mean consecutive=?)``, or the same for a variable."""
    known = list(known)
    if as_keyword:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]}=?)" if close else ""
        return f"unknown setting {name}={hint}"
    variables = [env_name(prefix, k) for k in known]
    close = difflib.get_close_matches(name.upper(), variables, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown variable {name}{hint}"


def describe_errors(
    exc: ValidationError,
    fields: Mapping[str, FieldInfo],
    overrides: Mapping[str, object],
    prefix: str,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """One line per bad setting, naming the keyword or variable, the value and what was expected."""
    environ = os.environ if environ is None else environ
    lines: list[str] = []
    for err in exc.errors():
        loc = err.get("loc") or ()
        field = str(loc[0]) if loc else ""
        if field not in fields:
            if err.get("type") == "extra_forbidden":
                lines.append(unknown_setting_message(field, fields, as_keyword=True, prefix=prefix))
            else:
                lines.append(f"{field or 'settings'}: {err.get('msg')}")
            continue
        want = expected(fields[field])
        if err.get("type") == "value_error":  # a validator's own message says more than the type does
            want = f"{want}; {str(err.get('msg', '')).removeprefix('Value error, ')}"
        if overrides.get(field) is not None:
            lines.append(f"{field}={_shown(overrides[field])}: expected {want}")
            continue
        found = env_lookup(env_name(prefix, field), environ)
        if found is not None:
            lines.append(f"{found[0]}={_shown(found[1])}: expected {want}")
        else:
            lines.append(f"{field}={_shown(err.get('input'))}: expected {want} ({err.get('msg')})")
    return list(dict.fromkeys(lines))  # a union's members each fail on one bad value: said once


def warn_unknown_variables(fields: Iterable[str], prefix: str,
                           environ: Mapping[str, str] | None = None) -> list[str]:
    """Warn once per ``OTEL_ERRCOMPACT_*`` variable that names no setting; returns the messages."""
    environ = os.environ if environ is None else environ
    known = set(fields)
    upper_prefix = prefix.upper()
    messages: list[str] = []
    for key in sorted(environ):
        upper = key.upper()
        if not upper.startswith(upper_prefix) or upper[len(upper_prefix):].lower() in known:
            continue
        message = "otel-errcompact: " + unknown_setting_message(key, known, as_keyword=False, prefix=prefix)
        message += "; it is ignored"
        messages.append(message)
        warnings.warn(message, ConfigurationWarning, stacklevel=4)  # the caller of init()
    return messages
