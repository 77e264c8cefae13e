"""A small agent whose tools really fail, run as a child process by the ops tests.

Every conversation: one successful tool call, a missing key, then the same missing table three times in a
row, which escalates (and halts that conversation). It loops until its standard input closes, so a scraper
sees counters grow. With ``--unique`` every failure is a distinct error (a flood of new classes). Each line
``parse_date`` on its standard input makes one call of a tool that fails once (new series, first count 1).
"""

from __future__ import annotations

import contextlib
import datetime
import queue
import sqlite3
import sys
import threading
import time

import otel_errcompact
from otel_errcompact import ErrorBudgetExceeded


def main() -> None:
    unique = "--unique" in sys.argv
    # breaker_threshold=0: every call reaches its tool (the process-wide circuit breaker would refuse the
    # repeated identical failures after three), so the panels measure real failures.
    ec = otel_errcompact.init(service_name="ops-agent", breaker_threshold=0)

    @ec.tool
    def lookup(city: str) -> str:
        return city.upper()

    @ec.tool
    def load_user(user_id: str) -> dict[str, str]:
        return {"u_1": {"name": "Ada"}}[user_id]

    @ec.tool
    def query_db(table: str) -> list[object]:
        return sqlite3.connect(":memory:").execute(f"SELECT * FROM {table}").fetchall()

    @ec.tool
    def parse_date(text: str) -> datetime.date:
        return datetime.date.fromisoformat(text)

    stop = threading.Event()
    asked: queue.SimpleQueue[str] = queue.SimpleQueue()

    def read_stdin() -> None:
        for line in sys.stdin:
            asked.put(line.strip())
        stop.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    n = 0
    print("ready", flush=True)
    while not stop.is_set():
        n += 1
        with ec.conversation(f"conv-{n}"):
            try:
                lookup("paris")
                load_user(f"user_{n}" if unique else "u_2")
                for _ in range(3):
                    query_db(f"orders_{n}" if unique else "orders")
                query_db("orders")  # halted: raises ErrorBudgetExceeded
            except ErrorBudgetExceeded:
                pass
        while not asked.empty():
            if asked.get() == "parse_date":
                with ec.conversation(f"rare-{n}"), contextlib.suppress(ValueError):
                    parse_date("next tuesday")
        time.sleep(0.05)
    ec.shutdown()


if __name__ == "__main__":
    main()
