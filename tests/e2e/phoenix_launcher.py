"""Run ``phoenix serve`` with its OTLP/gRPC listener bound to loopback only.

Phoenix binds uvicorn (UI, REST, OTLP/HTTP) to ``PHOENIX_HOST``, but its gRPC
server hard-codes ``[::]:PORT`` (``phoenix/server/grpc_server.py``), which would
listen on every interface. End-to-end tests must only ever listen on 127.0.0.1,
so this entry point rewrites the wildcard address handed to
``grpc.aio.Server.add_insecure_port`` to ``PHOENIX_HOST`` before handing control
to Phoenix's own CLI (``phoenix.server.main:main``).

Usage: ``python tests/e2e/phoenix_launcher.py serve`` with the PHOENIX_* env set.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_WILDCARD_PREFIXES = ("[::]:", "0.0.0.0:")


def _loopback_address(address: str, host: str) -> str:
    """Replace a wildcard bind address with ``host``, keep any other address as is."""
    for prefix in _WILDCARD_PREFIXES:
        if address.startswith(prefix):
            return f"{host}:{address[len(prefix) :]}"
    return address


def _pin_grpc_to_host(host: str) -> None:
    """Patch grpc's asyncio server so wildcard binds go to ``host`` instead."""
    import grpc.aio._server as aio_server  # type: ignore[import-untyped]

    original = aio_server.Server.add_insecure_port

    def add_insecure_port(self: Any, address: str) -> int:
        port: int = original(self, _loopback_address(address, host))
        return port

    aio_server.Server.add_insecure_port = add_insecure_port


def main() -> None:
    """Pin gRPC to ``PHOENIX_HOST`` (default 127.0.0.1) and run Phoenix's CLI."""
    host = os.environ.get("PHOENIX_HOST") or "127.0.0.1"
    os.environ["PHOENIX_HOST"] = host
    _pin_grpc_to_host(host)
    from phoenix.server.main import main as phoenix_main

    sys.argv = ["phoenix", *sys.argv[1:]]
    phoenix_main()


if __name__ == "__main__":
    main()
