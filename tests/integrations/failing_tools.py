"""The second tool of the framework scenarios, beside ``orders.count_orders``: it reads an invoice file
that does not exist, so every call fails for real with ``FileNotFoundError``.

The scenario every bridge test drives: the model asks for ``count_orders`` 6 times (the same failure each
time), then for ``read_invoice`` 4 times (another failure), then gives up in prose.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

FIRST_CALLS = 6
SECOND_CALLS = 4
SCRIPT: tuple[str, ...] = ("count_orders",) * FIRST_CALLS + ("read_invoice",) * SECOND_CALLS
"""The tool the scripted model asks for on each turn, in order."""
GIVE_UP = "I could not count the orders."


def make_read_invoice(folder: Path) -> Callable[[str], str]:
    """The tool function, reading invoices from ``folder`` (where none exists)."""

    def read_invoice(invoice_id: str) -> str:
        """Read the text of an invoice."""
        return (folder / f"{invoice_id}.txt").read_text()

    return read_invoice


def arguments_for(tool_name: str) -> dict[str, str]:
    """What the scripted model passes to each tool."""
    return {"customer": "acme"} if tool_name == "count_orders" else {"invoice_id": "inv-7"}
