"""File-editor refusals, as OpenHands' editors produced them (committed in the agent-error corpus).

The editors need Python 3.12 and are not installed here; ``benchmarks/agent_corpus/gen_harness.py`` ran
them and kept their exact output.
"""

from __future__ import annotations

import pytest

from benchmarks.bench_agent_errors import Entry, digest_all, load
from otel_errcompact.compactor import compact_text


@pytest.fixture(scope="module")
def editor() -> dict[str, Entry]:
    records, _ = load(["harness"])
    return {e.id: e for e in digest_all([r for r in records if r["format"] == "editor"])}


def test_every_editor_refusal_keeps_message_and_file(editor: dict[str, Entry]) -> None:
    assert len(editor) >= 50
    for e in editor.values():
        assert e.kept, (e.id, e.digest.line)
        assert e.digest.type == "EditorError" and e.digest.format == "editor"
        assert "Please" not in e.digest.cause


def test_another_old_str_on_the_same_file_is_the_same_class(editor: dict[str, Entry]) -> None:
    a, b = editor["harness/aci-old-str-missing-app.py-0"], editor["harness/aci-old-str-missing-app.py-2"]
    assert a.text != b.text and a.digest.key == b.digest.key
    assert editor["harness/aci-old-str-missing-models.py-0"].digest.key != a.digest.key


def test_banner_and_tag_forms_share_the_key(editor: dict[str, Entry]) -> None:
    aci = editor["harness/aci-undo-app.py-0"]
    tagged = editor["harness/tool-use-error-undo-app.py-0"]
    assert aci.text.startswith("ERROR:\n") and tagged.text.startswith("<tool_use_error>")
    assert aci.digest.key == tagged.digest.key
    tools = editor["harness/editor-param-old_str-1"]
    assert tools.text.startswith("[An error occurred during execution.]")
    assert tools.digest.key == editor["harness/aci-param-old_str-0"].digest.key


def test_long_old_str_is_cut_in_the_line_but_the_file_stays(editor: dict[str, Entry]) -> None:
    raw = editor["harness/aci-old-str-missing-app.py-0"].text.replace("return rate", "return rate " + "x" * 300)
    d = compact_text(raw)
    assert len(d.line) < 200 and "app.py" in d.line and "did not appear verbatim" in d.line
    assert d.key == editor["harness/aci-old-str-missing-app.py-0"].digest.key


def test_lint_after_an_applied_edit_is_the_linters_digest() -> None:
    """openhands-aci lints an applied edit; its issue list reads like flake8's report of the same file."""
    records, _ = load(["harness", "linter"])
    entries = {e.id: e for e in digest_all(records)}
    after_edit = entries["harness/aci-lint-usr-2"]
    assert "Linting issues found in the changes" in after_edit.text
    assert after_edit.digest.line.startswith("[F821] at app.py:")
    assert after_edit.digest.key == entries["linter/flake8-undefined-usr-0"].digest.key
    assert after_edit.digest.key != entries["harness/aci-lint-cfg-2"].digest.key
