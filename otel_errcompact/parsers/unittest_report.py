"""Parser for unittest's report, which Django's test runner prints too.

Each failure is a section: a ``====`` rule, ``ERROR: setUpClass (shop.tests.UserApiTests)`` or ``FAIL:
test_total (test_calc.TestCalc.test_total)``, a ``----`` rule and a Python traceback. The traceback is
read with the Python parser (type, message, in-app frame); the digest adds the test or fixture the
section names, so an error in ``setUpClass`` of one class is not merged with the same error in another
(``KeyError: 'api_token' [setUpClass (shop.tests.UserApiTests)]``). The count of other failures is shown
but not keyed.
"""

from __future__ import annotations

import dataclasses
import re

from otel_errcompact.parsers import python
from otel_errcompact.parsers._base import Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("\nRan ",)
_SECTION = re.compile(
    r"^={20,}\n(?P<kind>ERROR|FAIL|UNEXPECTED SUCCESS): (?P<test>.+?)\n-{20,}\n(?P<body>.*?)(?=^={20,}$|^-{20,}$|\Z)",
    re.M | re.S,
)
_RESULT = re.compile(r"^FAILED \((?P<counts>[^)]*)\)$", re.M)
_COUNT = re.compile(r"(?:failures|errors|unexpected successes)=(?P<n>\d+)")


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest the first failure of a unittest/Django run; ``None`` for other text."""
    if "\nRan " not in text or "=" * 20 not in text:
        return None
    sections = list(_SECTION.finditer(text))
    if not sections:
        return None
    first = sections[0]
    test = " ".join(first["test"].split())
    body = first["body"].strip()
    inner = python.parse(body, hints) if body else None
    if inner is None:
        lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
        inner = Parsed(first["kind"].title(), lines[-1] if lines else "test failed", "unittest")
    result = _RESULT.search(text)
    total = sum(int(m["n"]) for m in _COUNT.finditer(result["counts"])) if result else len(sections)
    where = f"[{test}]"
    key = f"{inner.key_text or inner.cause} {where}"
    cause = f"{inner.cause} {where}"
    if total > 1:
        cause += f" (+{total - 1} more)"
    return dataclasses.replace(inner, cause=cause, format="unittest", key_text=key,
                               status=inner.status if inner.status is not None else hints.exit_code)
