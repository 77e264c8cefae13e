"""The user's summariser (typically a small LLM call) for errors no parser recognises, asked safely.

Why each rule:

- **Secrets are masked in the text it is given**, by the redaction digests get. A summariser is usually a
  call to a hosted model, which must not receive the passwords and tokens an error text quotes.
- **It is asked once per error, not once per occurrence.** Texts that differ only in machine noise (a
  temporary folder, a timestamp, a port, a request id: :func:`~otel_errcompact.normalize.value_signature`)
  share one answer. Values a caller chose are kept apart, so a digest never shows another call's value.
- **An answer is waited for at most** ``timeout_s``. The call is I/O, and the compaction waiting for it may
  run on an agent's thread (the tool boundary) or while the history is held. Past the bound the heuristic
  digest stands for this occurrence; the answer, when it comes, serves the later ones. A question whose
  wait ran out is not waited for again while it is still out, and at most :data:`MAX_ASKING` are out at
  once (a model endpoint that hangs holds a thread each).
- **It runs on at most** :data:`MAX_ASKING` **threads**, daemon threads started as questions need them and
  kept for the next ones. A thread per question would start one for every new error (a summariser that is
  slow to answer, asked about a stream of new errors, would have the process start threads without end),
  and a ``ThreadPoolExecutor``'s threads are joined at interpreter exit, where a hung model call would hold
  the process.

What the answer may not change is decided elsewhere: the compactor keys a summarised digest as it keys the
heuristic one (see :meth:`Compactor.from_parsed <otel_errcompact.compactor.Compactor.from_parsed>`), so a
model's wording never splits or merges classes.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import queue
import re
import threading
from collections import OrderedDict
from collections.abc import Callable

from otel_errcompact._forked import new_locks_in_child, rebuild_in_child
from otel_errcompact.normalize import value_signature
from otel_errcompact.parsers import Parsed
from otel_errcompact.redact import redact

__all__ = ["MAX_ASKING", "Summaries", "parsed_summary"]

_log = logging.getLogger("otel_errcompact")

MAX_ASKING = 4
"""Questions out at once; past this a new one gets the heuristic digest at once (and is asked later)."""
_SUMMARY_LINE = re.compile(r"^\s*\[?([A-Za-z_][\w.\- ]{0,79}?)\]?\s*[:\-]\s*(.+)$", re.S)


def parsed_summary(answer: object) -> Parsed | None:
    """A summariser's answer as a :class:`Parsed`: one as it is, a ``"Type: cause"`` text split, any
    other text as the cause of an ``Error``; None for no answer."""
    if answer is None or isinstance(answer, Parsed):
        return answer
    text = str(answer).strip()
    if not text:
        return None
    match = _SUMMARY_LINE.match(text)
    if match:
        return Parsed(match.group(1).strip(), match.group(2).strip(), "summary")
    return Parsed("Error", text, "summary")


class _Question:
    """One call of the summariser: done when it returned (or failed); ``expired`` once a wait for it ran
    out, so later occurrences do not wait for it again."""

    __slots__ = ("answer", "done", "expired")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: Parsed | None = None
        self.expired = False


class _Pool:
    """Up to ``size`` daemon threads running jobs from one queue; a thread is started only when none is
    idle, and then waits for the next job (at no cost while it waits)."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._reset()

    def _reset(self) -> None:
        """Empty: no thread yet (and, in a forked child, none of the parent's, which do not exist there)."""
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._threads = 0
        self._idle = 0

    def run(self, job: Callable[[], None]) -> bool:
        """Queue ``job`` for an idle thread, starting one if none is idle and there are fewer than
        ``size``; False when no thread can run it (none could be started, at interpreter exit)."""
        with self._lock:
            if self._idle:
                self._idle -= 1  # that thread is this job's
            elif self._threads < self._size:
                try:
                    threading.Thread(target=self._serve, name=self._name, daemon=True).start()
                except RuntimeError:  # no new thread at interpreter exit
                    if not self._threads:
                        return False
                else:
                    self._threads += 1
            # Else every thread is busy: one finishing its job (its question just answered) takes this one.
            self._jobs.put(job)
        return True

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # pragma: no cover - the jobs are Summaries._call, which catches everything
                _log.debug("otel-errcompact: a summary job failed", exc_info=True)
            with self._lock:
                self._idle += 1


class Summaries:
    """Answers of ``summarizer`` by error (see the module's text), ``cache_size`` of them kept."""

    def __init__(self, summarizer: Callable[[str], object], *, cache_size: int, timeout_s: float) -> None:
        self._summarizer = summarizer
        self._cache_size = cache_size
        self._timeout_s = timeout_s
        self._answers: OrderedDict[bytes, Parsed | None] = OrderedDict()
        self._asking: dict[bytes, _Question] = {}
        self._lock = threading.Lock()
        self._warned = False
        self._pool = _Pool(MAX_ASKING, "otel-errcompact-summary")
        new_locks_in_child(self, "_lock")
        rebuild_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """The questions out at the fork, and the threads asking them, are the parent's: no thread of this
        process will answer them."""
        self._asking = {}
        self._pool._reset()

    def ask(self, text: str) -> Parsed | None:
        """The answer for ``text`` (sanitised, bounded raw error text), or None: no answer, a failing
        summariser, or none in time."""
        masked = redact(text)
        key = hashlib.blake2b(value_signature(masked).encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
            question = self._asking.get(key)
            if question is None:
                if len(self._asking) >= MAX_ASKING:
                    return None
                question = self._asking[key] = _Question()
                new = True
            else:
                new = False
        if new and not self._start(key, question, masked):
            return None
        if question.expired:
            return None
        if question.done.wait(self._timeout_s):
            return question.answer
        question.expired = True
        self._warn_once()
        return None

    def _start(self, key: bytes, question: _Question, masked: str) -> bool:
        if self._pool.run(functools.partial(self._call, key, question, masked)):
            return True
        with self._lock:  # no thread at interpreter exit: the heuristic answers
            self._asking.pop(key, None)
        return False

    def _call(self, key: bytes, question: _Question, masked: str) -> None:
        """Ask the summariser, keep its answer for the later occurrences, and wake whoever waits."""
        answer: Parsed | None = None
        try:
            answer = parsed_summary(self._summarizer(masked))
        except Exception:
            _log.debug("otel-errcompact: summarizer failed", exc_info=True)
        finally:
            question.answer = answer
            with self._lock:
                if self._asking.get(key) is question:
                    del self._asking[key]
                self._answers[key] = answer
                while len(self._answers) > self._cache_size:
                    self._answers.popitem(last=False)
            question.done.set()

    def _warn_once(self) -> None:
        if not self._warned:
            self._warned = True
            _log.warning(
                "otel-errcompact: the summarizer did not answer within %.3g s; the heuristic digest is used "
                "until it does (Compactor(summary_timeout_s=...))",
                self._timeout_s,
            )
