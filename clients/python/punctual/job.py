"""A job as a resident handler gets it, and the outcomes a handler may
raise (docs/RESIDENT.md). Shared by the loop (``worker``) and the task
dispatcher (``tasks``), which imports nothing of the loop."""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, Optional


class Retry(Exception):
    """Raise to have the job retried, after ``delay_ms`` (default: the
    topic's backoff ladder). The attempt is counted."""

    def __init__(self, message: str = "", delay_ms: Optional[int] = None):
        super().__init__(message)
        self.message = message
        self.delay_ms = delay_ms


class Dead(Exception):
    """Raise to send the job straight to the dead set (a permanent failure)."""

    def __init__(self, reason: str = ""):
        super().__init__(reason)
        self.reason = reason


class Job:
    """One delivery of a job."""

    __slots__ = ("id", "topic", "attempt", "max_attempts", "due_ms", "created_ms",
                 "timeout_ms", "payload", "traceparent", "tracestate", "start_by_us", "_cancelled", "_poll")

    def __init__(self, msg: dict):
        self.id: str = msg["id"]
        self.topic: str = msg.get("topic", "")
        self.attempt: int = int(msg.get("attempt", 1))
        self.max_attempts: int = int(msg.get("max_attempts", 0))
        self.due_ms: int = int(msg.get("due_ms", 0))
        self.created_ms: int = int(msg.get("created_ms", 0))
        self.timeout_ms: int = int(msg.get("timeout_ms", 0))
        # The producer's W3C trace context (the parent span when serve
        # exports spans), or None.
        self.traceparent: Optional[str] = msg.get("traceparent")
        self.tracestate: Optional[str] = msg.get("tracestate")
        # On every job to a program that declared a look-ahead (docs/RESIDENT.md,
        # "Look-ahead"): the host's CLOCK_MONOTONIC in microseconds
        # (time.monotonic_ns() // 1000) past which the loop does not start
        # it (it replies skip); None otherwise.
        start_by = msg.get("start_by_us")
        self.start_by_us: Optional[int] = None if start_by is None else int(start_by)
        if "payload_b64" in msg:
            self.payload: bytes = base64.b64decode(msg["payload_b64"])
        else:
            self.payload = msg.get("payload", "").encode()
        # ``payload`` holds exactly the bytes the producer enqueued.
        self._cancelled = False
        # Set by the loop running the job: reads what fd 3 holds now.
        self._poll: Optional[Callable[[], None]] = None

    def cancelled(self) -> bool:
        """Whether an operator cancelled this job while it runs
        (docs/RESIDENT.md, "Cancel"): the job is already ended as cancelled,
        and whatever this run replies is not recorded, so a handler that
        sees it may stop (return, or raise) and the program keeps its
        place. Under :func:`run`, each call reads the cancels waiting on
        fd 3 without blocking (job lines read meanwhile are kept for
        later): cheap enough to call between the steps of a long job.
        Under :func:`run_async`, the handler's task is also cancelled.
        False for a job not run by either."""
        if not self._cancelled and self._poll is not None:
            self._poll()
        return self._cancelled

    @property
    def text(self) -> str:
        """The payload as text (UTF-8; invalid bytes replaced)."""
        return self.payload.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The payload parsed as JSON."""
        return json.loads(self.payload)

    def once(self, client, step: str, ttl_s: int, fn: Callable[[], Any],
             prefix: str = "punctual") -> bool:
        """Runs ``fn`` unless step ``step`` of this job already succeeded
        within ``ttl_s`` seconds; returns whether it ran.

        The marker is ``SET prefix:once:TOPIC:ID:STEP 1 NX EX ttl_s``, written
        after ``fn`` returns. At least once, not exactly once: if the process
        dies between the side effect and the marker, or two deliveries of
        the job run at the same time (a lost lease), the step runs again.
        Where the other side supports it, also pass it an idempotency key
        (e.g. ``f"{job.id}:{step}"``).
        """
        key = once_key(prefix, self.topic, self.id, step)
        if client.exists(key):
            return False
        fn()
        client.set(key, "1", nx=True, ex=int(ttl_s))
        return True

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, topic={self.topic!r}, attempt={self.attempt})"


def once_key(prefix: str, topic: str, job_id: str, step: str) -> str:
    """The key of :meth:`Job.once`'s marker."""
    return f"{prefix}:once:{topic}:{job_id}:{step}"
