"""The machine a benchmark ran on: every figure is reported with it."""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["cpu_model", "describe"]


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, or ``unknown``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def describe() -> str:
    """``2 cores, AMD EPYC, Python 3.11.7``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} cores, {cpu_model()}, Python {platform.python_version()}"
