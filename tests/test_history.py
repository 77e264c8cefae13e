"""ErrorHistory: classes and counters per scope, escalation, bounded memory, thread safety.

Every digest here comes from a real error: a script run by the real interpreter, or an exception really
raised in this process and formatted by :mod:`traceback`. No OpenTelemetry is involved.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from otel_errcompact.exceptions import ConfigurationError, ErrorBudgetExceeded
from otel_errcompact.history import ErrorHistory, Limits, Thresholds
from otel_errcompact.render import BLOCK_CLOSE, BLOCK_OPEN
from tests.conftest import run_threads
from tests.realerrors import python_error

_FOLD_LINE = re.compile(r"^  … and (\d+) more distinct error\(s\) \((\d+) failure\(s\)\)$", re.M)


def _raised(action: Callable[[], object]) -> str:
    """Run ``action``, which must raise, and return the real traceback it produced."""
    try:
        action()
    except Exception:
        return traceback.format_exc()
    raise AssertionError("action was expected to raise")


def _missing_key(name: str) -> Digest:
    """The digest of a real ``KeyError`` for the missing key ``name`` (one class per name)."""
    users: dict[str, int] = {}
    return compact_text(_raised(lambda: users[name]))


@pytest.fixture(scope="module")
def digests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Digest]:
    """Three distinct real failures from scripts run by the real interpreter."""
    folder = tmp_path_factory.mktemp("history")
    key = python_error(
        folder,
        """
        users = {"alice": 1}

        def load_user(user_id):
            return users[user_id]

        load_user("user_id")
        """,
        name="app.py",
    )
    div = python_error(
        folder,
        """
        def ratio(a, b):
            return a / b

        ratio(1, 0)
        """,
        name="math_tool.py",
    )
    missing = python_error(
        folder,
        """
        def read_config():
            with open("settings.toml") as fh:
                return fh.read()

        read_config()
        """,
        name="config_tool.py",
    )
    out = {"key": compact_text(key), "div": compact_text(div), "missing": compact_text(missing)}
    assert len({d.key for d in out.values()}) == 3, {k: d.line for k, d in out.items()}
    return out


def test_new_class_is_appended_and_repeat_is_counted(digests: dict[str, Digest]) -> None:
    h = ErrorHistory(Thresholds(consecutive=10, budget=None))
    first = h.observe("c1", digests["key"])
    assert first.is_new and first.count == 1 and first.total == 1 and first.consecutive == 1
    second = h.observe("c1", digests["key"])
    assert not second.is_new and second.count == 2 and second.total == 2 and second.consecutive == 2
    other = h.observe("c1", digests["div"])
    assert other.is_new and other.count == 1 and other.total == 3
    block = h.render("c1")
    assert f"  - {digests['key'].line} (×2)" in block
    assert f"  - {digests['div'].line}\n" in block
    assert "3 tool failure(s), 2 distinct:" in block


def test_consecutive_counter_resets_on_a_different_class(digests: dict[str, Digest]) -> None:
    h = ErrorHistory(Thresholds(consecutive=3, budget=None))
    assert h.observe("c", digests["key"]).consecutive == 1
    assert h.observe("c", digests["key"]).consecutive == 2
    assert h.observe("c", digests["div"]).consecutive == 1
    again = h.observe("c", digests["key"])
    assert again.consecutive == 1 and again.count == 3 and again.escalation is None
    assert h.escalation("c") is None


def test_consecutive_counter_resets_on_success(digests: dict[str, Digest]) -> None:
    h = ErrorHistory(Thresholds(consecutive=3, budget=None))
    h.observe("c", digests["key"])
    h.observe("c", digests["key"])
    h.observe_success("c")
    after = h.observe("c", digests["key"])
    assert after.consecutive == 1 and after.escalation is None and after.count == 3
    h.observe_success("never-seen")  # a success in an unknown scope is not an error
    assert "never-seen" not in h.scopes()


def test_third_consecutive_failure_escalates_with_details(digests: dict[str, Digest]) -> None:
    h = ErrorHistory()  # default Thresholds: 3 consecutive, budget 20, halt
    d = digests["key"]
    assert h.observe("conv", d).escalation is None
    assert h.observe("conv", d).escalation is None
    third = h.observe("conv", d)
    esc = third.escalation
    assert esc is not None
    assert (esc.reason, esc.key, esc.count, esc.threshold, esc.action) == ("consecutive", d.key, 3, 3, "halt")
    assert esc.scope == "conv" and esc.error_type == "KeyError" and esc.digest == d.line and esc.total == 3
    assert "3 times in a row (threshold 3)" in esc.describe()
    attrs = esc.to_attributes()
    assert attrs["errcompact.reason"] == "consecutive" and "errcompact.scope" not in attrs
    # Only the observation that caused the breach carries it.
    assert h.observe("conv", d).escalation is None
    assert h.escalation("conv") == esc


def test_budget_breach_with_distinct_errors() -> None:
    h = ErrorHistory(Thresholds(consecutive=100, budget=5))
    names = ["alpha", "beta", "gamma", "delta", "epsilon"]
    seen = [h.observe("run", _missing_key(n)) for n in names]
    assert all(o.is_new for o in seen)
    assert [o.escalation for o in seen[:4]] == [None] * 4
    esc = seen[4].escalation
    assert esc is not None
    assert (esc.reason, esc.count, esc.threshold, esc.total) == ("budget", 5, 5, 5)
    assert "'epsilon'" in esc.digest and esc.key == seen[4].digest.key
    assert "5 failures in this run (budget 5)" in esc.describe()


def test_breach_is_sticky_and_check_raises_for_halt(digests: dict[str, Digest]) -> None:
    h = ErrorHistory(Thresholds(consecutive=2, budget=None, action="halt"))
    h.check("s")  # nothing failed yet: no raise
    h.observe("s", digests["div"])
    h.observe("s", digests["div"])
    standing = h.escalation("s")
    assert standing is not None
    # A success or a different error does not lift a breach.
    h.observe_success("s")
    h.observe("s", digests["key"])
    assert h.escalation("s") is standing
    with pytest.raises(ErrorBudgetExceeded) as info:
        h.check("s")
    assert info.value.escalation is standing
    assert "2 times in a row" in str(info.value)
    assert "Escalated:" in h.render("s")


def test_check_does_not_raise_for_human_action(digests: dict[str, Digest]) -> None:
    h = ErrorHistory(Thresholds(consecutive=2, budget=None, action="human"))
    h.observe("s", digests["key"])
    esc = h.observe("s", digests["key"]).escalation
    assert esc is not None and esc.action == "human"
    h.check("s")
    assert h.escalation("s") == esc
    assert "human review requested" in esc.describe()


def test_acknowledge_clears_breach_and_budget_counts_afresh() -> None:
    h = ErrorHistory(Thresholds(consecutive=100, budget=3))
    for n in ("one", "two", "three"):
        h.observe("s", _missing_key(n))
    assert h.escalation("s") is not None
    h.acknowledge("s")
    assert h.escalation("s") is None
    h.check("s")
    # Two more failures after acknowledging: below the budget of 3 counted from here.
    h.observe("s", _missing_key("four"))
    assert h.observe("s", _missing_key("five")).escalation is None
    esc = h.observe("s", _missing_key("six")).escalation
    assert esc is not None and esc.reason == "budget" and esc.count == 3 and esc.total == 6
    # The history shown to the agent survives the acknowledgement.
    assert "6 tool failure(s), 6 distinct:" in h.render("s")


def test_scopes_are_isolated(digests: dict[str, Digest]) -> None:
    h = ErrorHistory(Thresholds(consecutive=2, budget=None))
    h.observe("a", digests["key"])
    b = h.observe("b", digests["key"])
    assert b.is_new and b.count == 1 and b.consecutive == 1 and b.escalation is None
    assert h.observe("a", digests["key"]).escalation is not None
    assert h.escalation("b") is None
    h.check("b")
    assert "1 tool failure(s)" in h.render("b")
    h.reset("a")
    assert h.render("a") == "" and h.escalation("a") is None and h.scopes() == ["b"]


def test_render_is_empty_when_nothing_failed(digests: dict[str, Digest]) -> None:
    h = ErrorHistory()
    assert h.render("nobody") == ""
    h.observe_success("nobody")
    assert h.render("nobody") == ""


def test_max_classes_folds_least_recent_with_exact_counts() -> None:
    h = ErrorHistory(Thresholds(consecutive=100, budget=None), Limits(max_classes=3))
    counts = {"alpha": 2, "beta": 1, "gamma": 3, "delta": 1, "epsilon": 2}
    for name, n in counts.items():
        d = _missing_key(name)
        for _ in range(n):
            h.observe("s", d)
    block = h.render("s")
    total = sum(counts.values())
    assert f"{total} tool failure(s), 5 distinct:" in block
    # alpha and beta were seen least recently: folded away, their failures kept in the count.
    assert "'alpha'" not in block and "'beta'" not in block
    assert "'gamma' (×3)" in block and "'delta'" in block and "'epsilon' (×2)" in block
    fold = _FOLD_LINE.findall(block)
    assert fold == [("2", "3")], block


def test_a_folded_class_that_fails_again_resumes_its_count_and_stays_one_distinct_error() -> None:
    h = ErrorHistory(Thresholds(consecutive=100, budget=None), Limits(max_classes=2))
    observed = [h.observe("s", _missing_key(name)) for name in ["a", "b", "c", "a", "b", "c", "a"]]
    block = h.render("s")
    assert "7 tool failure(s), 3 distinct:" in block, block  # three errors, each folded away and back
    assert "'a' (×3)" in block and "'c' (×2)" in block, block
    assert _FOLD_LINE.findall(block) == [("1", "2")], block  # 'b', with both its failures
    assert [o.count for o in observed] == [1, 1, 1, 2, 2, 2, 3]
    assert [o.is_new for o in observed] == [True, True, True, False, False, False, False]


def test_folded_classes_are_remembered_up_to_max_classes() -> None:
    """Past ``max_classes`` folded keys, the oldest is forgotten: memory stays bounded, and that class,
    failing again, is counted afresh."""
    h = ErrorHistory(Thresholds(consecutive=100, budget=None), Limits(max_classes=2))
    for name in ["a", "b", "c", "d", "e", "a"]:  # a, b, c folded in turn: a is forgotten when c is
        h.observe("s", _missing_key(name))
    block = h.render("s")
    assert "6 tool failure(s), 6 distinct:" in block, block
    assert h.observe("s", _missing_key("d")).count == 2  # d is still remembered


def test_max_lines_shows_most_recent_classes() -> None:
    h = ErrorHistory(Thresholds(consecutive=100, budget=None), Limits(max_lines=2))
    names = ["alpha", "beta", "gamma", "delta"]
    for name in names:
        h.observe("s", _missing_key(name))
    h.observe("s", _missing_key("alpha"))  # alpha is now among the two most recent
    block = h.render("s")
    shown = [line for line in block.splitlines() if line.startswith("  - ")]
    assert len(shown) == 2
    assert "'alpha' (×2)" in shown[0] and "'delta'" in shown[1]
    assert _FOLD_LINE.findall(block) == [("2", "2")]
    assert "5 tool failure(s), 4 distinct:" in block


def test_max_scopes_evicts_least_recently_active() -> None:
    h = ErrorHistory(limits=Limits(max_scopes=3))
    d = _missing_key("user_id")
    for scope in ("s1", "s2", "s3"):
        h.observe(scope, d)
    h.observe("s1", d)  # s1 is active again, s2 is now the least recently active
    h.observe("s4", d)
    assert len(h) == 3
    assert h.scopes() == ["s3", "s1", "s4"]
    assert h.render("s2") == ""
    assert "2 tool failure(s)" in h.render("s1")


def test_idle_scopes_are_evicted_with_injected_clock() -> None:
    now = [1000.0]
    h = ErrorHistory(limits=Limits(idle_seconds=60.0), clock=lambda: now[0])
    d = _missing_key("user_id")
    h.observe("old", d)
    now[0] += 30
    h.observe("young", d)
    now[0] += 31  # "old" idle for 61 s, "young" for 31 s
    assert h.scopes() == ["young"]
    assert h.render("old") == ""
    now[0] += 60
    h.observe("new", d)  # a new scope also sweeps idle ones
    assert h.scopes() == ["new"]


def test_an_idle_scope_is_dropped_whether_or_not_another_one_arrived(digests: dict[str, Digest]) -> None:
    """A conversation idle for ``idle_seconds`` is dropped with its counters and its standing breach as
    it comes back, as it is when other conversations arrive meanwhile: it is not halted any more, its
    block is empty, and its next failure starts a streak of its own."""
    now = [1000.0]
    busy, quiet = (
        ErrorHistory(Thresholds(consecutive=2, budget=None), Limits(idle_seconds=60.0), clock=lambda: now[0])
        for _ in range(2)
    )
    for h in (busy, quiet):
        h.observe("c1", digests["key"])
        h.observe("c1", digests["key"])
        with pytest.raises(ErrorBudgetExceeded):
            h.check("c1")
    now[0] += 61
    busy.observe("c2", digests["div"])  # a new conversation sweeps the idle ones
    for h in (busy, quiet):  # the quiet process: "c1" comes back with nobody else arriving meanwhile
        h.check("c1")
        assert h.render("c1") == ""
        first = h.observe("c1", digests["key"])
        assert (first.count, first.consecutive, first.total, first.escalation) == (1, 1, 1, None)
        assert h.escalation("c1") is None


def _long_digest(tmp_path: Path, name: str, filler: str) -> Digest:
    """A real traceback whose message is tens of KB (the compactor bounds it; the block must too)."""
    raw = python_error(
        tmp_path,
        f"""
        def fetch(name):
            raise RuntimeError(name + ": " + {filler!r} * 4000)

        fetch({name!r})
        """,
        name=f"{name}.py",
    )
    assert len(raw) > 10_000
    return compact_text(raw)


def test_max_chars_and_max_lines_hold_for_hostile_long_digests(tmp_path: Path) -> None:
    digests = [_long_digest(tmp_path, f"tool_{c}", f"{c}x ") for c in "abcdefghij"]
    assert len({d.key for d in digests}) == 10
    for max_chars in (200, 500, 2000):
        h = ErrorHistory(Thresholds(consecutive=100, budget=None), Limits(max_lines=4, max_chars=max_chars))
        for d in digests:
            h.observe("s", d)
        block = h.render("s")
        assert len(block) <= max_chars, (max_chars, len(block), block)
        assert block.startswith(BLOCK_OPEN + "\n") and block.endswith(BLOCK_CLOSE)
        shown = [line for line in block.splitlines() if line.startswith("  - ")]
        assert len(shown) <= 4
        fold = _FOLD_LINE.findall(block)
        assert len(fold) == 1 and int(fold[0][0]) == 10 - len(shown) and int(fold[0][1]) == 10 - len(shown)


def test_max_chars_holds_with_a_standing_escalation(tmp_path: Path) -> None:
    d = _long_digest(tmp_path, "tool_z", "zz ")
    h = ErrorHistory(Thresholds(consecutive=2, budget=None), Limits(max_chars=300))
    h.observe("s", d)
    assert h.observe("s", d).escalation is not None
    block = h.render("s")
    assert len(block) <= 300, (len(block), block)
    assert block.endswith(BLOCK_CLOSE) and block.count(BLOCK_CLOSE) == 1


def test_sixteen_threads_give_exact_totals() -> None:
    digests = [_missing_key(n) for n in ("alpha", "beta", "gamma", "delta")]
    h = ErrorHistory(Thresholds(consecutive=10_000, budget=None))
    per_thread = 500

    def worker(i: int) -> None:
        for j in range(per_thread):
            h.observe(f"scope{i % 2}", digests[(i + j) % 4])

    assert run_threads(worker, 16) == []
    # 8 threads per scope × 500 = 4000 failures per scope, spread evenly over 4 classes.
    for scope in ("scope0", "scope1"):
        block = h.render(scope)
        assert "4000 tool failure(s), 4 distinct:" in block, block
        assert block.count("(×1000)") == 4, block
    last = h.observe("scope0", digests[0])
    assert last.total == 4001 and last.count == 1001


def test_invalid_thresholds_and_limits_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="consecutive"):
        Thresholds(consecutive=0)
    with pytest.raises(ConfigurationError, match="budget"):
        Thresholds(budget=0)
    with pytest.raises(ConfigurationError, match="max_chars"):
        Limits(max_chars=10)


@pytest.mark.parametrize(("make", "named"), [
    (lambda: Limits(idle_seconds=float("nan")), "Limits.idle_seconds=nan: expected a finite number > 0"),
    (lambda: Limits(idle_seconds=float("inf")), "Limits.idle_seconds=inf: expected a finite number > 0"),
    (lambda: Limits(idle_seconds=-1.0), "Limits.idle_seconds=-1.0: expected a finite number > 0"),
    (lambda: Limits(max_classes=float("nan")), "Limits.max_classes=nan: expected an integer ≥ 1"),
    (lambda: Limits(max_chars=2.5e3), "Limits.max_chars=2500.0: expected an integer ≥ 200"),
    (lambda: Thresholds(consecutive=float("nan")), "Thresholds.consecutive=nan: expected an integer ≥ 1"),
    (lambda: Thresholds(budget=float("nan")), "Thresholds.budget=nan: expected an integer ≥ 1, or None"),
], ids=["idle-nan", "idle-inf", "idle-negative", "classes-nan", "chars-float", "consecutive-nan", "budget-nan"])
def test_a_limit_that_no_count_or_clock_can_reach_is_refused_as_its_variable_is(make: Callable[[], object],
                                                                                named: str) -> None:
    """NaN compares false with everything: ``Limits(idle_seconds=nan)`` made every conversation idle, so a
    new conversation's first failure dropped the others with their standing breaches, and a NaN count
    bound is never reached. The Python API refuses what ``OTEL_ERRCOMPACT_*`` refuses, and says which."""
    with pytest.raises(ConfigurationError) as refused:
        make()
    assert str(refused.value).startswith(named), refused.value


def test_a_backlog_is_handed_over_once_even_when_two_threads_pass_the_bound_together() -> None:
    """Two agent threads can both append before either reads the queue's length: each then reads past
    the bound. The backlog must still be handed to ``on_backlog`` (the metrics thread), once, rather
    than left to grow until an agent thread has to apply it."""
    from otel_errcompact.history import SUCCESS_QUEUE_BOUND

    history = ErrorHistory()
    asked: list[int] = []

    def take_backlog() -> bool:  # the metrics thread accepts it, and applies it later
        asked.append(len(history.success_queue()))
        return True

    history.on_backlog = take_backlog
    resolved: list[int] = []
    queue = history.success_queue()
    for n in range(SUCCESS_QUEUE_BOUND + 1):  # the second thread's append landed before the first one's check
        queue.append((resolved.append, n))
    history.backlogged()  # the first thread's check
    history.backlogged()  # the second's
    assert asked == [SUCCESS_QUEUE_BOUND + 1]
    assert resolved == [] and len(queue) == SUCCESS_QUEUE_BOUND + 1  # left to on_backlog's thread
    history.apply_successes()  # that thread
    assert resolved == list(range(SUCCESS_QUEUE_BOUND + 1)) and not queue
    for n in range(SUCCESS_QUEUE_BOUND):
        history.defer_success(resolved.append, n)
    assert asked == [SUCCESS_QUEUE_BOUND + 1, SUCCESS_QUEUE_BOUND]  # the next backlog is handed over too
