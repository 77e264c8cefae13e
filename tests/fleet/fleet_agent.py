"""One agent worker process, instrumented with init(redis_url=…); its tool really fails on a missing table.

Usage: python fleet_agent.py REDIS_URL CALLS RUN_LOG [CONSECUTIVE [SERVICE_NAME]]
Prints the result of each call, one line each, or ``halted: …`` when the agent is halted (after CONSECUTIVE
identical failures in a row, 100 by default); every time the tool body really runs it appends to RUN_LOG.
SERVICE_NAME (``fleet-worker`` by default) is the service the worker belongs to.
"""

from __future__ import annotations

import sqlite3
import sys

import otel_errcompact


def main() -> None:
    url, calls, run_log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    consecutive = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    service = sys.argv[5] if len(sys.argv) > 5 else "fleet-worker"
    ec = otel_errcompact.init(service_name=service, redis_url=url, sqlite_path="", consecutive=consecutive)

    @ec.tool
    def count_orders(customer: str) -> int:
        with open(run_log, "a", encoding="utf-8") as fh:
            fh.write("ran\n")
        row = sqlite3.connect(":memory:").execute("SELECT COUNT(*) FROM orders WHERE c = ?", (customer,)).fetchone()
        return int(row[0])

    with ec.conversation("conv-shared"):
        for _ in range(calls):
            try:
                print(str(count_orders("acme")).replace("\n", " "), flush=True)
            except otel_errcompact.ErrorBudgetExceeded as exc:
                print(f"halted: {exc}".replace("\n", " "), flush=True)
                break
    ec.shutdown()


if __name__ == "__main__":
    main()
