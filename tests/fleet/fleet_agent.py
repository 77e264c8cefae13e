"""One agent worker process, instrumented with init(redis_url=…); its tool really fails on a missing table.

Usage: python fleet_agent.py REDIS_URL CALLS RUN_LOG
Prints the result of each call, one line each; every time the tool body really runs it appends to RUN_LOG.
"""

from __future__ import annotations

import sqlite3
import sys

import otel_errcompact


def main() -> None:
    url, calls, run_log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ec = otel_errcompact.init(service_name="fleet-worker", redis_url=url, sqlite_path="", consecutive=100)

    @ec.tool
    def count_orders(customer: str) -> int:
        with open(run_log, "a", encoding="utf-8") as fh:
            fh.write("ran\n")
        row = sqlite3.connect(":memory:").execute("SELECT COUNT(*) FROM orders WHERE c = ?", (customer,)).fetchone()
        return int(row[0])

    with ec.conversation("conv-shared"):
        for _ in range(calls):
            print(str(count_orders("acme")).replace("\n", " "), flush=True)
    ec.shutdown()


if __name__ == "__main__":
    main()
