"""Schedules: recurring jobs that ``punctual serve`` fires (docs/PROTOCOL.md,
"Schedules"; docs/decisions.md, "Recurring schedules").

A client only writes and reads the definitions: a JSON object per name in
the HASH ``P:{T}:schedules``, each change followed by ``PUBLISH
P:{T}:schedules <name>`` so the firers look at once. It fires nothing: every
``punctual serve`` (every Scheduler of the topic) runs a firer that enqueues
the occurrences, exactly once across hosts, up to a minute ahead.

A change takes the firers' lock (``P:{T}:schedules:lock``) as the Rust
library does, so no firer pass interleaves with it. Pause, remove and a
change of timing take back the occurrences fired ahead and not yet due with
the ``unfire`` script, and lower the watermark to now. The Rust library
lists them from the schedule's timing; a client has no cron parser, so it
reads them from ``P:{T}:fired`` (each partition's) instead: every
occurrence fired ahead was fired within the last minute, and its id
``<name>@<ms>`` names its time.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Optional

import redis

from .ops import _Cmd, _Sleep
from .validate import (
    MAX_BATCH,
    MAX_DELAY_MS,
    InvalidInput,
    _duration_ms,
    _text,
    debug_quote,
    encode_options,
    partition_name,
    validate_topic,
)

MAX_NAME_LEN = 100
# The firers' lock: held this long at most (SET NX PX), as the Rust library.
LOCK_MS = 10_000
# How far back P:{T}:fired is read for occurrences fired ahead: a firer
# enqueues an occurrence at most a minute (punctual::schedule::AHEAD) before
# it, so 5 minutes leave room for clocks of cluster nodes that differ.
FIRED_LOOKBACK_MS = 300_000
# How long fired marks live (7 days): the longest spread window take-back reads.
FIRED_KEEP_MS = 604_800_000
_UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
MIN_EVERY_MS = 1000
CATCH_UP = ("all", "latest", "skip", "spread")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def validate_name(name: str) -> None:
    """1 to 100 bytes of ``[A-Za-z0-9_.-]``."""
    if not isinstance(name, str):
        raise InvalidInput(f"invalid schedule name {name!r}: give a string")
    if not (1 <= len(name) <= MAX_NAME_LEN) or not set(name) <= _NAME_CHARS:
        raise InvalidInput(
            f"invalid schedule name {debug_quote(name)}: schedule names are 1 to {MAX_NAME_LEN} "
            "bytes of letters, digits and _ . -"
        )


def build(name: str, *, cron: Optional[str], every_ms: Any, tz: Optional[str], payload: Any,
          options: str, catch_up: str, spread_ms: Any, paused: bool, created_ms: int,
          max_payload: int) -> dict:
    """Checks a schedule and returns it as stored, in the key order of
    PROTOCOL.md's example. ``options`` is already encoded and checked."""
    if (cron is None) == (every_ms is None):
        raise InvalidInput(f"schedule {debug_quote(name)}: give exactly one of a cron expression and an interval")
    s: dict = {"name": name}
    if cron is not None:
        if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
            raise InvalidInput(
                f"invalid cron {debug_quote(str(cron))}: a cron expression has 5 fields, or 6 with seconds first"
            )
        if tz is None:
            tz = "UTC"
        if not isinstance(tz, str) or tz.strip() == "" or any(c.isspace() for c in tz):
            raise InvalidInput(f"invalid time zone {debug_quote(str(tz))}: give an IANA zone name such as Europe/Berlin")
        s["cron"], s["tz"] = cron, tz
    else:
        every = _duration_ms("interval", every_ms)
        if every < MIN_EVERY_MS or every > MAX_DELAY_MS:
            raise InvalidInput(f"invalid interval {every}ms: an interval is at least {MIN_EVERY_MS} ms and at most ten years")
        if tz is not None:
            raise InvalidInput(f"schedule {debug_quote(name)}: a time zone is only for cron schedules")
        s["every_ms"] = every
    if catch_up not in CATCH_UP:
        raise InvalidInput(f"invalid catch-up {debug_quote(str(catch_up))}: give all, latest, skip or spread")
    if catch_up == "spread":
        if spread_ms is None:
            raise InvalidInput(f"schedule {debug_quote(name)}: catch-up spread needs a spread window (ms)")
        spread = _duration_ms("spread window", spread_ms)
        if spread < 1 or spread > MAX_DELAY_MS:
            raise InvalidInput(
                f"invalid spread window {spread}ms: a spread window is at least 1 ms and at most ten years"
            )
    elif spread_ms is not None:
        raise InvalidInput(f"schedule {debug_quote(name)}: a spread window is only for catch-up spread")
    else:
        spread = None
    if not isinstance(paused, bool):
        raise InvalidInput(f"invalid paused {paused!r}: give True or False")
    if isinstance(payload, (bytes, bytearray, memoryview)):
        try:
            payload = bytes(payload).decode()
        except UnicodeDecodeError:
            raise InvalidInput("a schedule's payload must be UTF-8 text (it is stored in JSON)") from None
    elif not isinstance(payload, str):
        raise InvalidInput(f"payload must be bytes or str, not {type(payload).__name__} (use json.dumps for JSON)")
    size = len(payload.encode())
    if size > max_payload:
        raise InvalidInput(
            f"payload is {size} bytes, over the {max_payload}-byte limit "
            "(raise max_payload or store the data elsewhere and enqueue a reference)"
        )
    s.update(payload=payload, options=options, catch_up=catch_up, spread_ms=spread, paused=paused,
             created_ms=created_ms)
    return s


class Schedules:
    """The schedule operations of a :class:`punctual.Producer` (its
    ``schedule_*`` methods), as generators run by its driver (sync or
    asyncio)."""

    def __init__(self, producer):
        self.p = producer

    def key(self, topic: str, suffix: str = "") -> str:
        return f"{self.p.prefix}:{{{topic}}}:schedules{suffix}"

    def _now_ms(self):
        sec, usec = yield _Cmd("time")
        return int(sec) * 1000 + int(usec) // 1000

    def _publish(self, topic: str, name: str):
        yield _Cmd("publish", self.key(topic), name)

    def _lock(self, topic: str):
        """Takes the firers' lock of ``topic``, waiting while a firer's pass
        (or another change) holds it."""
        key, token = self.key(topic, ":lock"), secrets.token_hex(8)
        deadline = time.monotonic() + (LOCK_MS + 2000) / 1000
        while not (yield _Cmd("set", key, token, nx=True, px=LOCK_MS)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the schedules' lock {key} stayed held for over {LOCK_MS // 1000 + 2} s; try again")
            yield _Sleep(0.02)
        return key, token

    def _unlock(self, lock):
        try:
            yield _Cmd("eval", _UNLOCK, 1, *lock)
        except redis.exceptions.RedisError:
            pass  # it expires by itself

    def _take_back(self, topic: str, name: str, s: dict):
        """Under the lock: takes back, with the ``unfire`` script, the
        occurrences of schedule ``name``, ``s`` (as stored: for a new timing, the old
        one) that are not due yet, and lowers its watermark to now when it
        was ahead. Those are the ones fired ahead (now < o <= watermark)
        and, for catch-up ``spread``, also the missed ones whose due time was
        spread ahead of now: every ``<name>@<digits>`` marked in
        ``P:{T}:fired`` within the spread window (at most the 7 days marks
        live) plus 5 minutes for the clocks of nodes that differ (``unfire``
        leaves any already due alone), as PROTOCOL.md's unfire section says.
        Returns how many were taken back."""
        now = yield from self._now_ms()
        wm = yield _Cmd("hget", self.key(topic, ":last"), name)
        try:
            wm = int(wm)
        except (TypeError, ValueError):
            return 0
        spread_ms = s.get("spread_ms")
        spread = s.get("catch_up") == "spread" and isinstance(spread_ms, int) and not isinstance(spread_ms, bool)
        since = now - FIRED_LOOKBACK_MS - (min(spread_ms, FIRED_KEEP_MS) if spread else 0)
        k = yield from self.p._g_partitions(topic)
        head, removed = name + "@", 0
        for physical in [partition_name(topic, i, k) for i in range(k)]:
            fired = f"{self.p.prefix}:{{{physical}}}:fired"
            # Pages by score: each starts at the last page's highest score,
            # past the ids already read at it (an offset is walked entry by entry).
            ids, start, start_score, skip = [], str(since), float(since), 0
            while True:
                page = yield _Cmd("zrangebyscore", fired, start, "+inf",
                                  start=skip, num=MAX_BATCH, withscores=True)
                for raw, _ in page:
                    job_id = _text(raw)
                    at = job_id[len(head):]
                    if job_id.startswith(head) and at.isdigit() and at.isascii() and (spread or now < int(at) <= wm):
                        ids.append(job_id)
                if page:
                    last = float(page[-1][1])
                    at_last = 0
                    for _, score in reversed(page):
                        if float(score) != last:
                            break
                        at_last += 1
                    if last == start_score:
                        skip += at_last
                    else:
                        start, start_score, skip = repr(last), last, at_last
                if len(page) < MAX_BATCH:
                    break
            for i in range(0, len(ids), MAX_BATCH):
                removed += int((yield from self.p._g_call("unfire", physical, *ids[i:i + MAX_BATCH], fired=True)))
        if wm > now:
            yield _Cmd("hset", self.key(topic, ":last"), name, now)
        return removed

    def _read(self, topic: str, name: str):
        raw = yield _Cmd("hget", self.key(topic), name)
        if raw is None:
            return None
        try:
            s = json.loads(raw)
        except ValueError:
            return {"name": name, "unreadable": _text(raw)}
        return s if isinstance(s, dict) else {"name": name, "unreadable": _text(raw)}

    def add(self, topic: str, name: str, *, cron=None, every_ms=None, tz=None, payload="",
            max_attempts=None, expire_ms=None, timeout_ms=None, group=None, catch_up="all",
            spread_ms=None, paused=False) -> dict:
        validate_topic(topic)
        validate_name(name)
        options = encode_options(max_attempts, expire_ms, timeout_ms, group)
        s = build(name, cron=cron, every_ms=every_ms, tz=tz, payload=payload, options=options,
                  catch_up=catch_up, spread_ms=spread_ms, paused=paused, created_ms=0,
                  max_payload=self.p.max_payload)
        lock = yield from self._lock(topic)
        try:
            old = yield from self._read(topic, name)
            created = old.get("created_ms") if old else None
            # A schedule written again keeps its creation time: the phase of
            # an interval, and the start of its watermark. A new timing takes
            # back what the old one fired ahead.
            s["created_ms"] = created if isinstance(created, int) and not isinstance(created, bool) else (yield from self._now_ms())
            if old and any(old.get(f) != s.get(f) for f in ("cron", "every_ms", "tz")):
                yield from self._take_back(topic, name, old)
            yield _Cmd("hset", self.key(topic), name, json.dumps(s, separators=(",", ":"), ensure_ascii=False))
        finally:
            yield from self._unlock(lock)
        yield from self._publish(topic, name)
        return s

    def list(self, topic: str) -> list:
        validate_topic(topic)
        out = []
        for name, raw in (yield _Cmd("hgetall", self.key(topic))).items():
            try:
                s = json.loads(raw)
                if not isinstance(s, dict):
                    raise ValueError
            except ValueError:
                s = {"name": _text(name), "unreadable": _text(raw)}
            out.append(s)
        return sorted(out, key=lambda s: str(s.get("name")))

    def set_paused(self, topic: str, name: str, paused: bool) -> bool:
        validate_topic(topic)
        validate_name(name)
        lock = yield from self._lock(topic)
        try:
            s = yield from self._read(topic, name)
            if s is None:
                return False
            if "unreadable" in s:
                raise InvalidInput(f"schedule {debug_quote(name)} is not readable JSON; add it again")
            if paused:
                yield from self._take_back(topic, name, s)
            s["paused"] = paused
            yield _Cmd("hset", self.key(topic), name, json.dumps(s, separators=(",", ":"), ensure_ascii=False))
        finally:
            yield from self._unlock(lock)
        yield from self._publish(topic, name)
        return True

    def remove(self, topic: str, name: str) -> bool:
        validate_topic(topic)
        validate_name(name)
        lock = yield from self._lock(topic)
        try:
            s = yield from self._read(topic, name)
            if s is None:
                return False
            yield from self._take_back(topic, name, s)  # an unreadable one: as not spread
            yield _Cmd("hdel", self.key(topic), name)
            yield _Cmd("hdel", self.key(topic, ":last"), name)
        finally:
            yield from self._unlock(lock)
        yield from self._publish(topic, name)
        return True
