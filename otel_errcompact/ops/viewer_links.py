"""A Datasette plugin of the trajectory viewer: its link columns rendered as relative links.

Why relative: the viewer cannot know the address a browser reaches it by. A link built from ``--host`` and
``--port`` points at ``0.0.0.0`` when the viewer binds every interface, at port 0 when it lets the system pick
one, and at ``127.0.0.1`` when the page was opened through a tunnel or a proxy; a link starting with ``/`` opens
on whatever host and port the page came from. Datasette makes a link only of a value starting with ``http://`` or
``https://``, so the viewer's canned queries yield paths and this plugin renders them (``--plugins-dir``, never
installed as an entry point: it changes no other Datasette).
"""

from __future__ import annotations

from typing import Any

from datasette import hookimpl  # type: ignore[import-untyped]
from markupsafe import Markup

LINK_COLUMNS = frozenset({"record_link", "failures_link"})
"""The columns of the viewer's canned queries that hold a path into the viewer itself."""
DATABASE = "trajectories"  # viewer.DATABASE; this file is loaded by Datasette alone, not imported from the package


@hookimpl  # type: ignore[untyped-decorator]
def render_cell(value: Any, column: str, database: str) -> Markup | None:
    """A link for a viewer path in a link column; None leaves every other cell to Datasette."""
    if database != DATABASE or column not in LINK_COLUMNS:
        return None
    if not isinstance(value, str) or not value.startswith(f"/{DATABASE}/"):
        return None
    return Markup('<a href="{0}">{0}</a>').format(value)  # format() escapes the value
