"""The user's tool both framework tests run: it counts orders in a database that has no ``orders`` table,
so every call fails for real with ``sqlite3.OperationalError: no such table: orders``."""

from __future__ import annotations

import inspect
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOOL_FILE = Path(__file__).name
"""Where the digest of the tool's failure must point."""


def make_count_orders(db: Path) -> Callable[[str], int]:
    """The tool function, bound to the database file ``db``."""

    def count_orders(customer: str) -> int:
        """Count the orders a customer has placed."""
        with sqlite3.connect(db) as con:
            row = con.execute("SELECT COUNT(*) FROM orders WHERE customer = ?", (customer,)).fetchone()
        return int(row[0])

    return count_orders


def failing_line(fn: Callable[..., Any]) -> int:
    """The line of ``fn`` that raises: where the digest must point."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if "FROM orders" in text)
