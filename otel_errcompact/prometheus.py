"""Metrics for a Prometheus server to scrape, chosen with the standard ``OTEL_METRICS_EXPORTER=prometheus``.

When ``init()`` creates the meter provider itself and ``OTEL_METRICS_EXPORTER`` names ``prometheus``, it
serves the metrics on ``OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT`` (default
``localhost:9464``, the SDK's documented defaults) through ``opentelemetry-exporter-prometheus`` (the
``prometheus`` extra).

Why not just the exporter's defaults: scraped directly, the Python exporter puts ``service.name`` only on
``target_info``, so a dashboard or an alert cannot filter or group by service. The reader made here
promotes ``service.name`` to a ``service_name`` label on every series, the same label the collector's
Prometheus exporter writes with ``resource_to_telemetry_conversion``; dashboards and alert rules work
unchanged on either path.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from otel_errcompact.exceptions import ConfigurationError

__all__ = [
    "PROMOTED_RESOURCE_ATTRIBUTES",
    "PrometheusEndpoint",
    "prometheus_address",
    "prometheus_requested",
    "start_prometheus",
]

_log = logging.getLogger("otel_errcompact")

PROMOTED_RESOURCE_ATTRIBUTES = frozenset({"service.name"})
"""Resource attributes written as labels on every series (``service.name`` → ``service_name``)."""


def prometheus_requested() -> bool:
    """True when ``OTEL_METRICS_EXPORTER`` (a comma-separated list) names ``prometheus``."""
    names = os.environ.get("OTEL_METRICS_EXPORTER", "")
    return "prometheus" in {name.strip().lower() for name in names.split(",")}


def prometheus_address() -> tuple[str, int]:
    """``OTEL_EXPORTER_PROMETHEUS_HOST`` and ``_PORT`` (default ``localhost:9464``).

    A port that is not a number from 0 to 65535 is a ``ConfigurationError`` naming the variable, as every bad
    value is: ``init()`` checks it before it creates anything, rather than failing halfway with the
    ``ValueError`` of ``int()`` or the ``OverflowError`` of ``bind()``."""
    host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST") or "localhost"
    text = os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT") or ""
    if not text.strip():
        return host, 9464
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigurationError(f"OTEL_EXPORTER_PROMETHEUS_PORT={text!r}: expected a port number from 0 to 65535")
    return host, port


class PrometheusEndpoint:
    """A metric reader and the HTTP server that exposes it; ``shutdown()`` closes both."""

    def __init__(self, reader: Any, server: Any, address: tuple[str, int]) -> None:
        self.reader = reader
        self.address = address
        self._server = server

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _scraped_only(reader_class: Any) -> Any:
    """``reader_class`` (the exporter's ``PrometheusMetricReader``) collecting only when scraped.

    A pull reader has nothing to push, yet the SDK's ``force_flush`` (which ``ec.flush()`` and
    ``shutdown()`` run on the meter provider) makes it collect, and the exporter queues each collection
    until the next scrape, which then serves every series once per flush since the last scrape: the
    oldest first, so Prometheus kept the stale value and dropped the current one as a duplicate."""

    class ScrapedOnlyReader(reader_class):  # type: ignore[misc]
        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

    return ScrapedOnlyReader


def start_prometheus(host: str | None = None, port: int | None = None) -> PrometheusEndpoint:
    """Start serving metrics for scraping; ``host``/``port`` default to the standard variables.

    Raises ``ImportError`` with the install hint when the ``prometheus`` extra is missing, ``OSError`` when
    the address cannot be bound (another process serves that port).
    """
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "OTEL_METRICS_EXPORTER=prometheus needs opentelemetry-exporter-prometheus: "
            "pip install 'otel-errcompact[prometheus]'"
        ) from exc
    default_host, default_port = prometheus_address()
    host = host or default_host
    port = port if port is not None else default_port
    # A registry of its own: a second reader in the process must not collide in the global one.
    registry = CollectorRegistry(auto_describe=True)
    reader = _scraped_only(PrometheusMetricReader)(
        resource_attribute_filter=PROMOTED_RESOURCE_ATTRIBUTES.__contains__, registry=registry
    )
    server, _thread = start_http_server(port, addr=host, registry=registry)
    address = server.server_address
    _log.info("otel-errcompact: serving metrics for Prometheus on http://%s:%s/metrics", address[0], address[1])
    return PrometheusEndpoint(reader, server, (str(address[0]), int(address[1])))
