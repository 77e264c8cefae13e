"""Fixtures both framework tests use."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A real, empty SQLite database: the ``orders`` table the tool queries is missing."""
    path = tmp_path / "shop.sqlite3"
    sqlite3.connect(path).close()
    return path
