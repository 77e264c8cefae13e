"""Lift an exception's HTTP status or exit code into the digest's type, so numbers masked in the key
cannot merge ``exit 1`` with ``exit 2`` or ``500`` with ``503``.

A Python exception's text rarely makes the code part of the type: ``CalledProcessError: Command 'make'
returned non-zero exit status 2.`` and ``HTTPError: HTTP Error 500: Internal Server Error`` carry it in
the message, where the dedup key masks numbers. The exception object knows better. At the tool boundary
the code is read from the well-known attributes and set on the tool span with the OpenTelemetry semantic
convention names; the pipeline then adds it to the type:

==================================================  ======================================================
exception                                           attribute read → span attribute
==================================================  ======================================================
``subprocess.CalledProcessError`` and any exception  ``returncode`` (int) → ``process.exit.code``
``urllib.error.HTTPError``                           ``code`` → ``http.response.status_code``
``requests`` / ``httpx`` HTTP errors                 ``response.status_code`` → ``http.response.status_code``
model SDK errors (``openai``, ``anthropic``)         ``status_code`` → ``http.response.status_code``
==================================================  ======================================================

``[CalledProcessError exit 2] at build.py:8 in run_make: …``, ``[HTTPError 500] at api.py:12 in fetch: …``.
A digest whose type already names the code (the HTTP parser's ``HTTP 429``) is left as it is. Spans from
other instrumentation that carry these attributes get the same treatment.
"""

from __future__ import annotations

import dataclasses
import urllib.error
from collections.abc import Mapping
from typing import Any

from otel_errcompact.classify import RETRYABLE_STATUS
from otel_errcompact.digest import DedupKey, Digest
from otel_errcompact.recovery.classify import classify_text

__all__ = ["EXIT_CODE", "HTTP_STATUS", "code_attributes", "status_label", "with_status"]

HTTP_STATUS = "http.response.status_code"
EXIT_CODE = "process.exit.code"

_MAX_CHAIN = 4


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _codes_of(exc: BaseException) -> dict[str, int]:
    if isinstance(exc, urllib.error.HTTPError) and (code := _int(exc.code)) is not None:
        return {HTTP_STATUS: code}
    response = getattr(exc, "response", None)
    if response is not None and (code := _int(getattr(response, "status_code", None))) is not None:
        return {HTTP_STATUS: code}
    if (code := _int(getattr(exc, "status_code", None))) is not None and 100 <= code <= 599:
        return {HTTP_STATUS: code}
    if (code := _int(getattr(exc, "returncode", None))) is not None:
        return {EXIT_CODE: code}
    return {}


def code_attributes(exc: BaseException) -> dict[str, int]:
    """``{"http.response.status_code": 500}`` or ``{"process.exit.code": 2}`` for an exception (or the
    exception it was raised from, or while handling, as its traceback shows them) that carries one; ``{}``
    otherwise. Never raises."""
    seen: BaseException | None = exc
    try:
        for _ in range(_MAX_CHAIN):
            if seen is None:
                break
            codes = _codes_of(seen)
            if codes:
                return codes
            # the exception it was raised from, or raised while handling, unless the user detached it
            # (``raise … from None``): a detached exception's code is not this failure's
            seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    except Exception:  # a property on a third-party exception that raises: no code, no harm
        return {}
    return {}


def status_label(attributes: Mapping[str, Any]) -> tuple[str, int] | None:
    """``("HTTP", 500)`` or ``("exit", 2)`` from span attributes, else None."""
    http = _int(attributes.get(HTTP_STATUS))
    if http is not None:
        return "HTTP", http
    exit_code = _int(attributes.get(EXIT_CODE))
    if exit_code is not None:
        return "exit", exit_code
    return None


def with_status(digest: Digest, attributes: Mapping[str, Any]) -> Digest:
    """``digest`` with the code from ``attributes`` in its type (and key), when the type lacks it."""
    label = status_label(attributes)
    if label is None:
        return digest
    kind, code = label
    if str(code) in digest.type.split():
        return digest
    suffix = str(code) if kind == "HTTP" and "HTTP" in digest.type.upper() else f"{kind} {code}"
    new_type = f"{digest.type} {suffix}"
    head = f"[{digest.type}]"
    line = f"[{new_type}]{digest.line[len(head):]}" if digest.line.startswith(head) else digest.line
    parts = digest.key_parts
    digest = dataclasses.replace(
        digest,
        type=new_type,
        line=line,
        status=code,
        key_parts=DedupKey.build(new_type, parts.where, parts.message),
    )
    return _classified_by_status(digest, code) if kind == "HTTP" else digest


def _classified_by_status(digest: Digest, code: int) -> Digest:
    """An HTTP failure's class from its status, as the HTTP parser's digests get it: the text the compactor
    read (``HTTP Error 503: Service Unavailable`` in a traceback) does not always say that a 5xx is worth
    repeating, and a digest classed without its status counts a 503 as stuck."""
    klass = classify_text(digest.type, digest.cause, code, "http", code in RETRYABLE_STATUS)
    return dataclasses.replace(
        digest,
        retryable=klass.retryable,
        error_class=klass.error_class,
        retry_after_s=klass.retry_after_s if klass.retry_after_s is not None else digest.retry_after_s,
    )
