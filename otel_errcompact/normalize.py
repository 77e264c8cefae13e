"""Mask the variable parts of an error message so two occurrences of one failure share a dedup key.

**The rule: value versus identifier.** A *value* is data that changes from one call to the next while the
failure stays the same; an *identifier* names the cause. Values are masked, identifiers never are:

- A run of digits standing on its own is a value, whatever separates it from its neighbours: ``42``,
  ``u-2``, ``u_44239``, ``s.3``, ``item:7``, ``#12``, ``part-00001.parquet``, ``output_3.csv`` all mask the number
  (``u-<n>``, ``u_<n>``). Digits glued to letters are part of a name and stay: ``v2``, ``int64``,
  ``t3_orders``, ``python3``, ``utf8``; except at the end of a file name's stem (``report3.csv`` →
  ``report<n>.csv``), where a number counts files.
- A number the message labels as a *code* names the outcome and stays: ``exit code 7``, ``exit status
  144``, ``returned non-zero exit status 2``, ``signal 9``, ``status code 404``.
- A model's name the message labels as one names what was asked for and stays whole: ``The model
  `gpt-4` does not exist`` and ``gpt-5``, ``model: claude-3-opus``, ``models/gemini-1.5-pro``; so does a
  name of a known model family after "for" (OpenAI's ``Rate limit reached for gpt-4 in organization …``),
  while an id of the same shape there (``for s-17``) keeps its number a value.
- Quoted text is an identifier (a key, table, module, field, file) unless the message labels it as
  input data: ``invalid literal for int() with base 10: 'abc'``, Java's ``For input string: "x1"``,
  ``could not convert string to float: 'n/a'``, ``time data '…' does not match``, the arguments of Redis's
  ``unknown command 'X', with args beginning with: 'k1' '42'``. Those become ``<v>``.
- Machine-made noise is masked wherever it appears: the rules in the table below.

==================  =========================================================  =============
what                example                                                    becomes
==================  =========================================================  =============
PEM / secrets       already ``[REDACTED]`` by :mod:`otel_errcompact.redact`    (unchanged)
key tails           ``sk-abc1**************wxyz`` (a server echoing a key)      ``<key>``
timestamps          ``2026-11-22T06:02:19.123Z``, ``Sun Nov 22 06:02:19 2026``  ``<ts>``
UUIDs               ``3f2c…-…``                                                ``<uuid>``
memory addresses    ``0x7f3a2c1b9e80``                                         ``<addr>``
bytes               ``can't decode byte 0xff in position 3``                   ``byte <b> …``
characters          ``can't encode character '\xe9' in position 1``            ``character <c> …``
temp paths          ``/tmp/tmpa1b2/users.json``, ``/var/folders/…/T/x``        ``<tmp>/users.json``
gcc's temp objects  ``/tmp/cc9mQisY.o`` (new on every run)                     ``<tmp>/<obj>.o``
URLs                ``http://127.0.0.1:54321/v1/items/42?page=3&sig=…``        ``http://<ip>:<port>/v1/items/<n>?page=<v>&sig=<v>``
IPv4/IPv6 + port    ``10.0.0.7:5432``                                          ``<ip>:<port>``
request/trace ids   ``request id: req_011CX…``, ``trace_id=4bf9…``             ``request id: <id>``
hashes, long ids    ``9f86d081884c7d65``, ``a1B2c3D4e5F6g7H8i9``                ``<hex>`` / ``<id>``
durations           ``30.5s``, ``1500 ms``, ``2 minutes``                       ``<dur>``
numbers             ``pid 4242``, ``line 7 column 3``, ``user_42``              ``pid <n>`` …
==================  =========================================================  =============

File names survive temp-path masking (only the directory is masked). HTTP status codes are carried by the
error *type* (``HTTP 429``) as well as kept as codes. :func:`value_signature` masks only the noise and
keeps the values, so a history can tell how many different values one class was seen with.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["MAX_NORMALIZED_CHARS", "normalize_message", "value_signature"]

MAX_NORMALIZED_CHARS = 240

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
# A code's digits are shielded from the number rule by this private-use mark, removed at the end.
_SHIELD = "\ue000"
# "Not a letter or digit": the boundary of a value. ``_`` and ``-`` separate like any other punctuation,
# so ``u-2`` and ``u_44239`` are read the same way (``\b`` would treat ``_`` as part of a word).
_NB = r"(?<![A-Za-z0-9])"
_NA = r"(?![A-Za-z0-9])"
# Each rule: (pattern, placeholder, guard, whether it masks a *value* the caller chose rather than machine
# noise, whether its guard needs an ASCII digit). The guard ``guard(text, has_digit)`` says whether the rule
# runs on ``text``: part of it is the rule's meaning (characters or substrings of which at least one must
# occur; the exit code rule runs only where one of its exact needles occurs, so ``eXit 7`` keeps its
# digits; the uuid rule only where an ASCII digit does); the rest are conditions the pattern cannot match
# without, which only spare a regex pass. A guard is one call of plain ``in`` tests (C-level scans, the
# cheapest first) and shape tests: no loop over clauses. ``has_digit`` is computed once per version of
# the text, since most rules need a digit.
_Test = Callable[[str], bool]
_Guard = Callable[[str, bool], bool]
_Placeholder = str | Callable[[re.Match[str]], str]
_Rule = tuple[re.Pattern[str], _Placeholder, _Guard, bool, bool]
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _run_of(chars: str, length: int) -> _Test:
    """A clause: ``length`` characters of ``chars`` (ASCII) in a row, found by mapping the text onto two
    symbols and one substring test: far cheaper than a regex scan."""
    table = str.maketrans({chr(c): ("x" if chr(c) in chars else " ") for c in range(128)})
    run = "x" * length

    def test(text: str) -> bool:
        return run in text.translate(table)  # characters outside ASCII stay as they are: never "x"

    return test
_ID_WORD = re.compile(r"(?i)id")
_ANY_DIGIT = re.compile(r"\d").search  # any Unicode digit, as the code rule's ``\d`` reads one
_ASCII_DIGIT = re.compile("[0-9]").search
_DIGITS = re.compile(r"\d+")
_DIGIT_DOT_DIGIT = re.compile(r"\d\.\d")
_BRACKETED_COLON = re.compile(r"\[[0-9a-fA-F:]*:")
_HEX_COLON_HEX = re.compile(r"[0-9a-fA-F]:[0-9a-fA-F]")
_DIGIT_COLON_DIGIT = re.compile(r"\d:\d")
_COLON_DIGIT = re.compile(r":\d")


def _shield_digits(match: re.Match[str]) -> str:
    """The matched text with each digit run shielded, as a code's digits are: a name that must stay whole."""
    return _DIGITS.sub(_SHIELD + r"\g<0>", match.group())


# Families of model names, as providers spell them (``gpt-4o``, ``o3-mini``, ``claude-3-opus``,
# ``gemini-1.5-pro``, ``llama-3.1-8b-instant``): a name of one is a model's though no word labels it so.
_MODEL_FAMILY = (
    r"(?:gpt|chatgpt|o[1-9]|claude|gemini|gemma|llama|mistral|mixtral|codestral|deepseek|qwen|text-embedding"
    r"|davinci|babbage|whisper|tts|dall-e)"
)


_ID_OWNERS = ("req", "trace", "span", "correlation", "transaction", "message", "job", "run", "task", "session")


def _may_name_an_id(text: str) -> bool:
    """What the request-id rule needs, in any case as its ``(?i)`` reads it: ``id`` and one of the words
    that own one (``request``, ``trace`` …). Outside ASCII, ``(?i)i`` also matches ``İ`` and ``ı``: there
    only ``id`` is looked for, by a regex, and the rule decides."""
    if not text.isascii():
        return _ID_WORD.search(text) is not None
    lowered = text.lower()
    if "id" not in lowered:
        return False
    for word in _ID_OWNERS:  # noqa: SIM110 - a plain loop: a generator costs more than these short tests
        if word in lowered:
            return True
    return False


def _may_hold_ip(text: str) -> bool:
    """What every alternative of the IP rule needs: ``1.2`` (IPv4), ``[…:`` (bracketed IPv6) or ``a:b``."""
    if "[" in text and _BRACKETED_COLON.search(text):
        return True
    if not text.isascii():
        return bool(("." in text and _DIGIT_DOT_DIGIT.search(text)) or (":" in text and _HEX_COLON_HEX.search(text)))
    shape = _shape(text)
    if "0.0" in shape:
        return True
    return ("a:" in shape or "0:" in shape) and (":a" in shape or ":0" in shape) and bool(_HEX_COLON_HEX.search(text))


def _folds_space(text: str) -> bool:
    """Whether ``\\s+`` → one space changes anything: a double space, or white space other than a space
    (every such character is unprintable)."""
    return "  " in text or not text.isprintable()


# ASCII text mapped onto a few symbols, for the tests here: a digit is "0", a letter a unit can start with
# "u", another letter "a", white space " ", a dot "." and a colon ":", anything else "_". Substring tests on
# the shape are far cheaper than regex scans of the text.
_SHAPE = str.maketrans(
    {chr(c): "0" if chr(c).isdigit() else "u" if chr(c) in "nmush" else "a" if chr(c).isalpha()
     else " " if chr(c).isspace() else chr(c) if chr(c) in ".:" else "_" for c in range(128)}
)
_last_shape: tuple[str, str] = ("", "")  # the last text and its shape: several tests ask for the same one


def _shape(text: str) -> str:
    """``text`` (ASCII) mapped by :data:`_SHAPE`, computed once per text (a race only recomputes it)."""
    global _last_shape
    last = _last_shape
    if last[0] is text:
        return last[1]
    shape = text.translate(_SHAPE)
    _last_shape = (text, shape)
    return shape


_HEX_RUN = _run_of("0123456789abcdef", 7)
_ALNUM_RUN = _run_of(_ALNUM, 16)


def _mixes_letters_and_digits(text: str) -> bool:
    """What the hex and long-id rules need: a run holding a letter and a digit holds the two side by side.
    (Outside ASCII, their ``\\d`` reaches further: the regex decides there.)"""
    if not text.isascii():
        return True
    shape = _shape(text)
    return "0a" in shape or "a0" in shape or "0u" in shape or "u0" in shape


def _may_hold_time(text: str) -> bool:
    """What every clock time of the timestamp rule holds: a digit, a colon, a digit."""
    return "0:0" in _shape(text) if text.isascii() else _DIGIT_COLON_DIGIT.search(text) is not None


def _may_hold_port(text: str) -> bool:
    """What the port rule needs: a colon right before a digit."""
    return ":0" in _shape(text) if text.isascii() else _COLON_DIGIT.search(text) is not None


def _may_hold_duration(text: str) -> bool:
    """What the duration rule needs: a digit right before a unit's first letter, or one space between.
    (Outside ASCII, ``\\d``, ``\\s`` and ``µ`` reach further: the regex decides there.)"""
    if not text.isascii():
        return True
    shape = _shape(text)
    return "0u" in shape or "0 u" in shape


def _may_number_a_file(text: str) -> bool:
    """What the numbered-file rule needs: a letter right before a digit, and a digit, a dot, a letter."""
    if not text.isascii():
        return True
    shape = _shape(text)
    return ("a0" in shape or "u0" in shape) and ("0.a" in shape or "0.u" in shape)


# A pattern that must start with one of a few characters says so first, in a lookahead (``(?=[-+\d])``), or
# starts with its literal (the port rule's ``:``, its lookbehind moved after it): the engine then rejects
# most positions with one character test instead of trying lookbehinds and alternations at each. Both are
# implied by the pattern, so what it matches is unchanged.
_RULES: tuple[_Rule, ...] = (
    (re.compile(r"[\w\-]*\*{4,}[\w\-]*"), "<key>", lambda t, d: "****" in t, False, False),
    (
        re.compile(
            r"(?i)(?=[ercs])\b((?:(?:exit|return|error|status)[ _\-]?)?(?:code|status|signal|signum)"
            r"|exit(?:ed)?(?: with)?)"
            r"([ \t]*[:=]?[ \t]*[(\[]?)(-?\d+)"
        ),
        "\\1\\2" + _SHIELD + "\\3",
        lambda t, d: (
            ("xit" in t or "XIT" in t or "ode" in t or "ODE" in t or "tatus" in t or "TATUS" in t or "ignal" in t
             or "ignum" in t)
            and (d or _ANY_DIGIT(t) is not None)
        ),
        False,
        False,
    ),
    # A model's name, as the message labels it (``The model `gpt-5` does not exist``, ``model: claude-3-opus``,
    # ``models/gemini-1.5-pro is not found``), names what was asked for: its digits are shielded like a code's.
    (
        re.compile(r"(?<![\w.])(?:model(?:[ \t]*[:=][ \t]*|[ \t]+)[`'\"]?|models/)(?=[A-Za-z])[\w.:/\-]{1,100}"),
        _shield_digits,
        lambda t, d: d and "model" in t,
        False,
        True,
    ),
    # OpenAI's rate limit names the model without the word (``Rate limit reached for gpt-4 in organization
    # …``): after "for", a name of a known model family is shielded too. The family is what tells it from an
    # id of the same shape (``for s-17``, ``for user-42``), whose number stays a value.
    (
        re.compile(r"(?<![\w.])for[ \t]+[`'\"]?" + _MODEL_FAMILY + r"-[\w.:\-]{1,100}"),
        _shield_digits,
        lambda t, d: d and "for" in t and "-" in t,
        False,
        True,
    ),
    (
        re.compile(
            r"(?i)(?=[ifct])((?:invalid literal for [\w.]+\(\)(?: with base \d+)?|for input string|could not convert "
            r"string to [\w.]+|invalid (?:value|input|number|integer|float)(?: for [\w.\- ]{1,40})?)"
            r"[ \t]*:?[ \t]*|time data[ \t]+)(?:'(?:[^'\\\n]|\\.){0,200}'|\"(?:[^\"\\\n]|\\.){0,200}\")"
        ),
        "\\1<v>",
        lambda t, d: (
            ("literal" in t or "nput string" in t or "NPUT STRING" in t or "convert string" in t or "time data" in t
             or "nvalid" in t or "NVALID" in t)
            and ("'" in t or '"' in t)
        ),
        True,
        False,
    ),
    # Redis quotes the arguments of a command it does not know (``ERR unknown command 'HGETX', with args
    # beginning with: 'user:1' 'name'``): the command names the cause, its arguments are the call's data.
    # Redis does not escape a quote inside an argument, so the whole rest of the line is the arguments.
    (
        re.compile(r"(?<=with args beginning with:)[^\n]*"),
        " <v>",
        lambda t, d: "with args beginning with:" in t,
        True,
        False,
    ),
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}|\s?UTC)?\b"
            rf"|\b(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun),?\s+)?(?:\d{{1,2}}\s+{_MONTH}|{_MONTH}\s+\d{{1,2}})"
            r"(?:,?\s+\d{4})?\s+\d{2}:\d{2}:\d{2}(?:\s+(?:\d{4}|GMT|UTC))*"
            r"|\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b"
        ),
        "<ts>",
        lambda t, d: d and _may_hold_time(t),
        False,
        True,
    ),
    (
        re.compile(_NB + r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}" + _NA),
        "<uuid>",
        lambda t, d: d and "-" in t,
        True,
        True,
    ),
    (re.compile(r"\b0x[0-9a-fA-F]{4,}\b"), "<addr>", lambda t, d: "0x" in t, False, False),
    (
        re.compile(r"(?i)(?=b)\b(bytes?) 0x[0-9a-f]{1,2}(?:[ ,]+0x[0-9a-f]{1,2})*\b"),
        "\\1 <b>",
        lambda t, d: " 0" in t and ("byte" in t or "BYTE" in t),
        True,
        False,
    ),
    # The character a codec cannot encode is the text's, as the byte one cannot decode is the data's: the
    # same failure for every accented letter of the input (``'\xe9'``, ``'\u2192'``).
    (
        re.compile(r"(?<=encode character )'\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})'"),
        "<c>",
        lambda t, d: "encode character '" in t,
        True,
        False,
    ),
    (
        re.compile(
            r"(?=/|[A-Za-z]:\\)(?:(?:/private)?/var/folders/(?:[^/\s'\"]+/)+"
            r"|(?:/tmp|/var/tmp|/dev/shm)/(?:[^/\s'\"]+/)*"
            r"|[A-Za-z]:\\(?:[^\\\s'\"]+\\)*?Temp\\(?:[^\\\s'\"]+\\)*)"
        ),
        "<tmp>/",
        lambda t, d: ("/" in t or "\\" in t)
        and ("/var/folders/" in t or "/tmp/" in t or "/dev/shm/" in t or "Temp\\" in t),
        False,
        False,
    ),
    # gcc's temporary object files, named anew on each run (``/tmp/cc9mQisY.o``, as the linker quotes them)
    (re.compile(r"<tmp>/cc[A-Za-z0-9]{6}\.o\b"), "<tmp>/<obj>.o", lambda t, d: "<tmp>/cc" in t, False, False),
    (re.compile(r"(?<=[?&;])([A-Za-z0-9_.\-\[\]]+)=[^&\s#'\"]*"), r"\1=<v>",
     lambda t, d: "=" in t and ("?" in t or "&" in t or ";" in t), True, False),
    (
        re.compile(
            r"\b(?:\d{1,3}\.){3}\d{1,3}\b"
            r"|\[[0-9a-fA-F:]*:[0-9a-fA-F:]+\]"
            r"|(?<![\w:])(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{1,4}(?![\w:])"
        ),
        "<ip>",
        lambda t, d: (d or ":" in t) and _may_hold_ip(t),
        False,
        False,
    ),
    (re.compile(r":(?<=[\w>\]]:)\d{2,5}\b"), ":<port>", lambda t, d: ":" in t and _may_hold_port(t), False, False),
    (
        re.compile(
            r"(?i)(?=[xrtscmj])\b((?:x-)?(?:request|req|trace|span|correlation|transaction|message|job|run|task|session)"
            r"[\s_\-]?id)([^\w<]{1,3})[A-Za-z0-9_\-:.]{4,}"
        ),
        r"\1\2<id>",
        lambda t, d: ("d" in t or "D" in t) and _may_name_an_id(t),
        False,
        False,
    ),
    (
        re.compile(r"(?=[rmcetj])\b(?:req|msg|run|call|chatcmpl|resp|toolu|evt|job)_[A-Za-z0-9]{8,}\b"),
        "<id>",
        lambda t, d: "_" in t,
        False,
        False,
    ),
    (
        re.compile(r"(?=[0-9a-f]{7})" + _NB + r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,}" + _NA),
        "<hex>",
        lambda t, d: d and _mixes_letters_and_digits(t) and _HEX_RUN(t),
        True,
        True,
    ),
    (
        re.compile(r"(?=[A-Za-z0-9]{16})" + _NB + r"(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{16,}" + _NA),
        "<id>",
        lambda t, d: d and _mixes_letters_and_digits(t) and _ALNUM_RUN(t),
        False,
        True,
    ),
    (
        re.compile(
            r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds?|m|mins?|minutes?|h|hrs?|hours?)\b"
        ),
        "<dur>",
        lambda t, d: d and _may_hold_duration(t),
        False,
        True,
    ),
    # A numbered file: the digits that end a file name's stem (``report3.csv``, ``chunk_0007.parquet``).
    (
        re.compile(r"(?<=[A-Za-z])\d+(?=\.[A-Za-z][A-Za-z0-9]{0,7}" + _NA + ")"),
        "<n>",
        lambda t, d: d and _may_number_a_file(t),
        True,
        True,
    ),
    # After a dot only when a letter precedes it (``s.3``, ``libssl.so.3``): ``1.5`` stays one number.
    (
        re.compile(
            r"(?=[-+\d])(?:(?<![A-Za-z0-9." + _SHIELD + r"])|(?<=[A-Za-z]\.))[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?" + _NA
        ),
        "<n>",
        lambda t, d: d,
        True,
        True,
    ),
    (
        re.compile(r"\s+"),
        " ",
        lambda t, d: (" " in t or "\t" in t or "\n" in t) and _folds_space(t),
        False,
        False,
    ),
)
_Guarded = tuple[Callable[..., str], _Placeholder, _Guard]


def _guarded(rules: tuple[_Rule, ...], with_digit: bool) -> tuple[_Guarded, ...]:
    """``(sub, placeholder, guard)`` per rule; without a digit, the rules whose guard needs one are left
    out up front (no replacement brings a digit: placeholders hold none, groups copy the text)."""
    return tuple(
        (pattern.sub, placeholder, guard)
        for pattern, placeholder, guard, _value, needs_digit in rules
        if with_digit or not needs_digit
    )


_NOISE_RULES = tuple(rule for rule in _RULES if not rule[3])
_ALL = _guarded(_RULES, True)
_ALL_NO_DIGIT = _guarded(_RULES, False)
_NOISE = _guarded(_NOISE_RULES, True)
_NOISE_NO_DIGIT = _guarded(_NOISE_RULES, False)


def _apply(message: str, rules: tuple[_Guarded, ...], no_digit_rules: tuple[_Guarded, ...]) -> str:
    """Run the rules in order, each where its guard holds on the text as the rules before left it. Whether
    the text holds a digit is asked once, and again only after a rule changed the text (``sub`` returns
    the very same string when nothing matched).

    Which guards hold on a text is remembered (see :data:`_PLANS`) from the rule the walk started at up to
    the rule that changed the text, or to the end: the text is the same from one rule to the next until
    a rule changes it, and then the walk goes on from the next rule on the new text. Guards are asked
    lazily, as the walk reaches them, so a text met for the first time asks each guard once, as a walk
    without the memo would."""
    text = message[: MAX_NORMALIZED_CHARS * 4]
    has_digit = _ASCII_DIGIT(text) is not None
    active = rules if has_digit else no_digit_rules
    count = len(active)
    index = 0
    while index < count:
        key = (id(active), index, text.encode("ascii").translate(_ONES)) if (
            len(text) <= _MAX_PLANNED and text.isascii()
        ) else None
        known = _PLANS.get(key) if key is not None else None
        changed: str | None = None
        if known is not None:  # the guards of rules index .. end - 1 are known to hold at these
            held, end = known
            for at in held:
                sub, placeholder, _ = active[at]
                new = sub(placeholder, text)
                if new is not text and new != text:
                    changed, end = new, at + 1
                    break
        else:
            found: list[int] = []
            end = count
            for at in range(index, count):
                sub, placeholder, guard = active[at]
                if guard(text, has_digit):
                    found.append(at)
                    new = sub(placeholder, text)
                    if new is not text and new != text:
                        changed, end = new, at + 1
                        break
            if key is not None:
                if len(_PLANS) >= _PLANS_SIZE:
                    _PLANS.clear()  # whole: cheaper than bookkeeping; a plan costs a few microseconds
                _PLANS[key] = (tuple(found), end)
        index = end
        if changed is not None:
            text = changed
            if has_digit:
                has_digit = _ASCII_DIGIT(text) is not None
    if _SHIELD in text:
        text = text.replace(_SHIELD, "")
    return text.strip()[:MAX_NORMALIZED_CHARS]


# Every guard gives one answer for two texts that differ only in which ASCII digits 1-9 they hold: the
# guards look for letters, punctuation, white space, "0x", " 0", digit *positions* (the shape, the
# hex and alphanumeric runs, the digit patterns) and whether a digit occurs, never for a digit's value
# other than zero's. So the guards that hold are remembered by the text with every such digit read as
# "1": messages of one failure that differ in their numbers share one entry.
_ONES = bytes.maketrans(b"23456789", b"11111111")
_PLANS: dict[tuple[int, int, bytes], tuple[tuple[int, ...], int]] = {}
"""(rules, first rule, folded text) -> (the rules from the first on whose guard held, the rule after the
last one asked): the walk stopped there because that rule changed the text, or at the end."""
_PLANS_SIZE = 2048
_MAX_PLANNED = 256  # longer texts have their guards asked directly: the entries stay small


def normalize_message(message: str) -> str:
    """Mask variable data in ``message`` (see the module docstring for the rules).

    >>> normalize_message("connect to 127.0.0.1:54321 failed after 3.2s (pid 4242)")
    'connect to <ip>:<port> failed after <dur> (pid <n>)'
    >>> normalize_message("KeyError: 'user_id'")
    "KeyError: 'user_id'"
    >>> normalize_message("KeyError: 'u-2'") == normalize_message("KeyError: 'u_44239'").replace("_", "-")
    True
    >>> normalize_message("Exit code 144") != normalize_message("Exit code 7")
    True
    """
    return _apply(message, _ALL, _ALL_NO_DIGIT)


def value_signature(message: str) -> str:
    """``message`` with machine noise masked (timestamps, addresses, ports, request ids, durations, temp
    folders) but the values a caller chose kept: two occurrences of one class with different signatures
    were called with different data.

    >>> value_signature("KeyError: 'user_42' at 2026-11-22T06:02:19Z")
    "KeyError: 'user_42' at <ts>"
    """
    return _apply(message, _NOISE, _NOISE_NO_DIGIT)
