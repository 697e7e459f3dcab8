"""The checks and encodings of punctual's layout that the producer and the
schedules share: the limits, :class:`InvalidInput`, the checks the Rust
library makes before anything reaches Redis, with its messages
(crates/punctual/src/keys.rs, job.rs, queue.rs), the due time and per-job
options as the scripts take them (docs/PROTOCOL.md), and partitions (PHP's
Validate.php, Node's lib/validate.js). Imports nothing of the package:
``producer`` and ``schedules`` import it, so neither imports the other's
pieces (``producer`` imports ``schedules``, never the reverse).
"""

from __future__ import annotations

import math
import re
import unicodedata
import zlib
from datetime import datetime, timedelta, timezone
from typing import Any, Optional, Union

MAX_TOPIC_LEN = 100
MAX_ID_LEN = 200
MAX_BATCH = 1000
MAX_DELAY_MS = 10 * 365 * 24 * 3600 * 1000
MAX_ATTEMPTS = 10_000
MAX_GROUP_LEN = 64

Duration = Union[int, float, timedelta]
Time = Union[int, float, datetime]


class InvalidInput(ValueError):
    """Bad input (topic, id, payload, delay, option): nothing was written."""


def _unescape_tracestate(v: str) -> str:
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), v)


def parse_options(text: str) -> dict:
    """The options part of a record's first field as ``get`` returns it
    (``;e<deadline base 36>;t<ms>;g<group>;p<traceparent>;s<tracestate>``,
    or ``""``): a dict of ``expires_at_ms``, ``timeout_ms``, ``group``,
    ``traceparent``, ``tracestate`` (only those present)."""
    out: dict = {}
    for part in text.split(";")[1:]:
        letter, value = part[:1], part[1:]
        if letter == "e" and value.isalnum():
            out["expires_at_ms"] = int(value, 36)
        elif letter == "t" and value.isdigit():
            out["timeout_ms"] = int(value)
        elif letter == "g" and value:
            out["group"] = value
        elif letter == "p" and value:
            out["traceparent"] = value
        elif letter == "s" and value:
            out["tracestate"] = _unescape_tracestate(value)
    return out


def debug_quote(s: str) -> str:
    """A string quoted as Rust's ``{:?}`` does, so messages match the CLI's."""
    out = ['"']
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif c == "\0":
            out.append("\\0")
        elif c != " " and unicodedata.category(c) in _UNPRINTABLE:
            out.append("\\u{%x}" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


# What Rust's {:?} writes as \u{...}: control, format, separator (but the
# space), private-use, surrogate and unassigned characters.
_UNPRINTABLE = {"Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cs", "Cn"}

# Characters that show nothing or reorder text (bidi controls and isolates,
# zero-width characters, the byte order mark, ...): the library's
# is_invisible in crates/punctual/src/keys.rs, which the enqueue script
# refuses too.
_INVISIBLE = (
    (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD), (0x70F, 0x70F),
    (0x115F, 0x1160), (0x180E, 0x180E), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x1D173, 0x1D17A),
    (0xE0000, 0xE007F),
)


def _is_invisible(c: str) -> bool:
    o = ord(c)
    return any(lo <= o <= hi for lo, hi in _INVISIBLE)


def _is_control(c: str) -> bool:
    return unicodedata.category(c) == "Cc"


def validate_topic(topic: str) -> None:
    """1 to 100 bytes, no braces, no '#', no whitespace or control
    characters, no invisible or bidirectional formatting characters."""
    if not isinstance(topic, str):
        raise InvalidInput(f"invalid topic {topic!r}: give a string")

    def bad(why: str) -> InvalidInput:
        return InvalidInput(f"invalid topic {debug_quote(topic)}: {why}")

    if topic == "":
        raise bad("topic names may not be empty")
    if not _is_utf8(topic):
        raise bad("topic names must be valid UTF-8")
    if len(topic.encode()) > MAX_TOPIC_LEN:
        raise bad(f"topic names are at most {MAX_TOPIC_LEN} bytes")
    if "{" in topic or "}" in topic:
        raise bad("topic names may not contain braces")
    if "#" in topic:
        raise bad("'#' is reserved for partitions")
    if any(c.isspace() or _is_control(c) for c in topic):
        raise bad("topic names may not contain spaces or control characters")
    for c in topic:
        if _is_invisible(c):
            raise bad(f"topic names may not contain invisible or bidirectional formatting characters (U+{ord(c):04X})")


def _is_utf8(s: str) -> bool:
    """False for a str with lone surrogates (e.g. bytes decoded with
    surrogateescape), which has no UTF-8 form."""
    try:
        s.encode()
        return True
    except UnicodeEncodeError:
        return False


def validate_id(job_id: str) -> None:
    """1 to 200 bytes, no control characters."""
    if not isinstance(job_id, str):
        raise InvalidInput(f"invalid id {job_id!r}: give a string")
    if job_id == "":
        raise InvalidInput(
            'invalid id "": ids may not be empty (leave the id out to have one generated)'
        )
    if not _is_utf8(job_id):
        raise InvalidInput("invalid id: ids must be valid UTF-8")
    n = len(job_id.encode())
    if n > MAX_ID_LEN:
        raise InvalidInput(f"invalid id: {n} bytes, ids are at most {MAX_ID_LEN} bytes")
    if any(_is_control(c) for c in job_id):
        raise InvalidInput(f"invalid id {debug_quote(job_id)}: ids may not contain control characters")


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ms(v: Any) -> Optional[int]:
    """Milliseconds as a whole number: an int as it is, a finite float or a
    ``timedelta`` rounded up (1.5 -> 2, so a job is never due early), else
    None. The scripts take plain decimal digits only ("1.5e3" or "60000.0"
    are refused), so a float never reaches Redis as it is."""
    if _int(v):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return math.ceil(v)
    if isinstance(v, timedelta):
        return -(-v // timedelta(milliseconds=1))
    return None


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _epoch_ms(v: Any) -> Optional[int]:
    """A point in time as epoch ms: a number as :func:`_ms`, or an aware
    ``datetime`` (rounded up to the ms). A naive datetime is refused: its
    zone is a guess (``datetime.now()`` is local time, ``utcnow()`` UTC)."""
    if isinstance(v, datetime):
        if v.tzinfo is None or v.tzinfo.utcoffset(v) is None:
            raise InvalidInput(
                f"invalid due time {v.isoformat()}: a datetime without a time zone is ambiguous; "
                "give an aware one (datetime.now(timezone.utc), django.utils.timezone.now())"
            )
        return -(-(v - _EPOCH) // timedelta(milliseconds=1))
    if isinstance(v, timedelta):
        return None
    return _ms(v)


def encode_when(delay_ms: Optional[Duration], at_ms: Optional[Time]) -> str:
    """The script's encoding of a due time: ``d<ms>`` or ``a<epoch ms>``."""
    if delay_ms is not None and at_ms is not None:
        raise InvalidInput("give a delay or a due time, not both")
    if at_ms is not None:
        ms = _epoch_ms(at_ms)
        if ms is None:
            raise InvalidInput(
                f"invalid due time {at_ms!r}: give epoch milliseconds as a number or a datetime"
            )
        at_ms = ms
        if at_ms < 0:
            raise InvalidInput("invalid due time: before 1970; give a time after the epoch")
        return f"a{at_ms}"
    if delay_ms is None:
        return "d0"
    ms = _ms(delay_ms)
    if ms is None:
        raise InvalidInput(f"invalid delay {delay_ms!r}: give milliseconds as a number or a timedelta")
    delay_ms = ms
    if delay_ms < 0:
        raise InvalidInput(f"invalid delay {delay_ms}ms: delays may not be negative")
    if delay_ms > MAX_DELAY_MS:
        raise InvalidInput(f"invalid delay {delay_ms // 1000}s: delays are at most ten years")
    return f"d{delay_ms}"


def _duration_ms(what: str, v: Any) -> int:
    """A duration as whole ms: ms as a number (a float rounded up) or a
    ``timedelta`` (rounded up to the ms)."""
    ms = _ms(v)
    if ms is None:
        raise InvalidInput(f"invalid {what} {v!r}: give milliseconds as a number or a timedelta")
    return ms


def _window_ms(what: str, article: str, v: Any) -> int:
    """An expiry or timeout: 1 ms to ten years."""
    ms = _duration_ms(what, v)
    if ms < 1 or ms > MAX_DELAY_MS:
        raise InvalidInput(f"invalid {what} {ms}ms: {article} {what} is at least 1 ms and at most ten years")
    return ms


_GROUP_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@-")


def validate_group(group: str) -> None:
    """1 to 64 bytes of ``[A-Za-z0-9_.@-]``."""
    if not isinstance(group, str):
        raise InvalidInput(f"invalid group {group!r}: give a string")
    if not (1 <= len(group) <= MAX_GROUP_LEN) or not set(group) <= _GROUP_CHARS:
        raise InvalidInput(
            f"invalid group {debug_quote(group)}: a group is 1 to {MAX_GROUP_LEN} bytes of ASCII "
            "letters, digits, _ . @ -"
        )


_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
MAX_TRACESTATE_LEN = 512


def validate_traceparent(tp: str) -> None:
    """A W3C traceparent: ``version-traceid-spanid-flags``, 2, 32, 16 and 2
    lowercase hex digits, the version not ``ff``, neither id all zeros."""
    if not isinstance(tp, str):
        raise InvalidInput(f"invalid traceparent {tp!r}: give a string")
    why = None
    if not _TRACEPARENT.fullmatch(tp):
        why = "not four dash-separated fields of lowercase hex"
    elif tp.startswith("ff"):
        why = "version ff is invalid"
    elif set(tp[3:35]) == {"0"}:
        why = "the trace id is all zeros"
    elif set(tp[36:52]) == {"0"}:
        why = "the parent span id is all zeros"
    if why:
        raise InvalidInput(
            f"invalid traceparent {debug_quote(tp)}: {why}; a W3C traceparent is version-traceid-spanid-flags, "
            "2, 32, 16 and 2 lowercase hex digits, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        )


def validate_tracestate(ts: str) -> None:
    """A W3C tracestate: at most 512 bytes of printable ASCII."""
    raw = ts.encode("utf-8", "surrogateescape") if isinstance(ts, str) else b""
    if not isinstance(ts, str) or len(raw) > MAX_TRACESTATE_LEN or any(b < 0x20 or b > 0x7E for b in raw):
        raise InvalidInput(
            f"invalid tracestate: a W3C tracestate is at most {MAX_TRACESTATE_LEN} bytes of printable ASCII "
            f"(got {len(raw)} bytes)"
        )


def _escape_tracestate(ts: str) -> str:
    return ts.replace("%", "%25").replace(";", "%3B").replace(":", "%3A")


def encode_options(max_attempts: Optional[int] = None, expire_ms: Optional[Duration] = None,
                   timeout_ms: Optional[Duration] = None, group: Optional[str] = None,
                   traceparent: Optional[str] = None, tracestate: Optional[str] = None) -> str:
    """The enqueue script's "max attempts" argument with the per-job options
    (docs/PROTOCOL.md, "Per-job options"):
    ``<max>;x<ms>;t<ms>;g<group>;p<traceparent>;s<tracestate, escaped>``,
    each part only when given; ``""`` for none."""
    out = ""
    if max_attempts is not None:
        m = max_attempts
        if not _int(m):
            raise InvalidInput(f"invalid max attempts {m!r}: give an integer from 1 to {MAX_ATTEMPTS}")
        if m < 1 or m > MAX_ATTEMPTS:
            raise InvalidInput(
                f"invalid max attempts {m}: max attempts must be at least 1 and at most {MAX_ATTEMPTS}"
            )
        out = str(m)
    if expire_ms is not None:
        out += f";x{_window_ms('expiry', 'an', expire_ms)}"
    if timeout_ms is not None:
        out += f";t{_window_ms('timeout', 'a', timeout_ms)}"
    if group is not None:
        validate_group(group)
        out += f";g{group}"
    if traceparent is not None:
        validate_traceparent(traceparent)
    if tracestate is not None:
        if traceparent is None:
            raise InvalidInput("a tracestate needs a traceparent: give both, or neither")
        validate_tracestate(tracestate)
    if traceparent is not None:
        out += f";p{traceparent}"
        if tracestate:
            out += f";s{_escape_tracestate(tracestate)}"
    return out


def partition_of(job_id: str, k: int) -> int:
    """The partition of ``job_id`` among ``k``: IEEE CRC-32 of its bytes mod k."""
    return 0 if k <= 1 else zlib.crc32(job_id.encode()) % k


def partition_name(topic: str, i: int, k: int) -> str:
    return topic if k <= 1 else f"{topic}#{i}"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
