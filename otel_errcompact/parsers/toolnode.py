"""Parser for the message LangGraph's ``ToolNode`` gives the model when a tool call's arguments do not
validate: the one failure its default ``handle_tool_errors`` turns into a message itself, from its
``TOOL_INVOCATION_ERROR_TEMPLATE``::

    Error invoking tool 'count_orders' with kwargs {'client': 'acme'} with error:
     customer: Field required
     Please fix the error and try again.

The digest is the tool and the validation errors, ``[ToolInvocationError]: count_orders: customer: Field
required``. The arguments are the model's data: the trajectory record keeps them, the key does not, so a
new wrong value is the same failure once more. The closing request to try again is advice to the model:
left in, it was taken for the cause, and read as a transient failure, which never escalates.
"""

from __future__ import annotations

import re

from otel_errcompact.parsers._base import Hints, Parsed

__all__ = ["MARKERS", "parse"]

MARKERS = ("Error invoking tool '",)

_INVOCATION = re.compile(
    r"\AError invoking tool '(?P<tool>[^'\n]{1,200})' with kwargs .*? with error:\n"
    r"(?P<errors>.*?)(?:\n Please fix the error and try again\.)?\Z",
    re.S,
)
_MAX_ERRORS = 8


def parse(text: str, hints: Hints) -> Parsed | None:
    """Digest ToolNode's invalid-arguments message; ``None`` for anything else."""
    match = _INVOCATION.match(text.strip())
    if match is None:
        return None
    errors = [line.strip() for line in match["errors"].splitlines() if line.strip()]
    if not errors:
        return None
    cause = f"{match['tool']}: " + "; ".join(errors[:_MAX_ERRORS])
    if len(errors) > _MAX_ERRORS:
        cause += f" (+{len(errors) - _MAX_ERRORS} more)"
    return Parsed("ToolInvocationError", cause, "toolnode", retryable=False)
