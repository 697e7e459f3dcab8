"""Schedules: recurring jobs that ``punctual serve`` fires (docs/PROTOCOL.md,
"Schedules"; docs/ARCHITECTURE.md, "Recurring schedules").

A client only writes and reads the definitions: a JSON object per name in
the HASH ``P:{T}:schedules``, each change followed by ``PUBLISH
P:{T}:schedules <name>`` so the firers look at once. It fires nothing: every
``punctual serve`` (every Scheduler of the topic) runs a firer that enqueues
the occurrences, exactly once across hosts.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from .producer import (
    MAX_DELAY_MS,
    InvalidInput,
    _duration_ms,
    _text,
    debug_quote,
    encode_options,
    validate_topic,
)

MAX_NAME_LEN = 100
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
    ``schedule_*`` methods)."""

    def __init__(self, producer):
        self.p = producer

    def key(self, topic: str, suffix: str = "") -> str:
        return f"{self.p.prefix}:{{{topic}}}:schedules{suffix}"

    def _now_ms(self) -> int:
        sec, usec = self.p.client.time()
        return int(sec) * 1000 + int(usec) // 1000

    def _publish(self, topic: str, name: str) -> None:
        self.p.client.publish(self.key(topic), name)

    def _read(self, topic: str, name: str) -> Optional[dict]:
        raw = self.p.client.hget(self.key(topic), name)
        if raw is None:
            return None
        try:
            s = json.loads(raw)
        except ValueError:
            return {"name": name, "unreadable": _text(raw)}
        return s if isinstance(s, dict) else {"name": name, "unreadable": _text(raw)}

    def add(self, topic: str, name: str, *, cron=None, every_ms=None, tz=None, payload="",
            max_attempts=None, expire_ms=None, timeout_ms=None, group=None, catch_up="latest",
            spread_ms=None, paused=False) -> dict:
        validate_topic(topic)
        validate_name(name)
        options = encode_options(max_attempts, expire_ms, timeout_ms, group)
        s = build(name, cron=cron, every_ms=every_ms, tz=tz, payload=payload, options=options,
                  catch_up=catch_up, spread_ms=spread_ms, paused=paused, created_ms=0,
                  max_payload=self.p.max_payload)
        old = self._read(topic, name)
        created = old.get("created_ms") if old else None
        # A schedule written again keeps its creation time: the phase of an
        # interval, and the start of its watermark.
        s["created_ms"] = created if isinstance(created, int) and not isinstance(created, bool) else self._now_ms()
        self.p.client.hset(self.key(topic), name, json.dumps(s, separators=(",", ":"), ensure_ascii=False))
        self._publish(topic, name)
        return s

    def list(self, topic: str) -> list:
        validate_topic(topic)
        out = []
        for name, raw in self.p.client.hgetall(self.key(topic)).items():
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
        s = self._read(topic, name)
        if s is None:
            return False
        if "unreadable" in s:
            raise InvalidInput(f"schedule {debug_quote(name)} is not readable JSON; add it again")
        s["paused"] = paused
        self.p.client.hset(self.key(topic), name, json.dumps(s, separators=(",", ":"), ensure_ascii=False))
        self._publish(topic, name)
        return True

    def remove(self, topic: str, name: str) -> bool:
        validate_topic(topic)
        validate_name(name)
        if not self.p.client.hdel(self.key(topic), name):
            return False
        self.p.client.hdel(self.key(topic, ":last"), name)
        self._publish(topic, name)
        return True
