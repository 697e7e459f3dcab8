"""The resident handler loop (docs/RESIDENT.md, protocol 1).

``punctual serve`` starts the program, sends jobs on fd 3 and reads replies on
fd 4, one JSON object per line. stdin, stdout and stderr are never used by
the protocol: the handler may print freely.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import math
import os
import select
import time
from collections import deque
from typing import Any, Callable, Optional

from . import tasks
from .job import Dead, Job, Retry, once_key

__all__ = ["Dead", "Job", "NotUnderServe", "PROTOCOL", "Retry", "Worker", "once_key", "reply_for", "run", "run_async"]

PROTOCOL = 1


class NotUnderServe(SystemExit):
    """The program was not started by ``punctual serve`` (run by hand, or by
    another tool): raised by :func:`run`, :func:`run_async` and
    :meth:`Worker.run`. A ``SystemExit``, so uncaught it prints its message
    (no traceback) and exits with status 1."""


def _check_protocol() -> None:
    """serve sets PUNCTUAL_PROTOCOL; only then are fds 3 and 4 its pipes
    (run by hand they may be anything the shell or interpreter left open)."""
    v = os.environ.get("PUNCTUAL_PROTOCOL", "")
    if v == "":
        raise NotUnderServe(
            "punctual: PUNCTUAL_PROTOCOL is not set: this program is a resident handler; run it under "
            "`punctual serve` (a topic with resident = [...]), which sets it and sends jobs on fd 3; "
            "see docs/RESIDENT.md"
        )
    if v != str(PROTOCOL):
        raise NotUnderServe(
            f"punctual: PUNCTUAL_PROTOCOL is {v!r}; this client speaks protocol {PROTOCOL}: "
            "use a client release that matches your punctual serve"
        )


def _fd(env: str, default: int) -> int:
    """The protocol fd named by ``env``, checked open."""
    _check_protocol()
    fd = int(os.environ.get(env, default))
    try:
        os.fstat(fd)
    except OSError:
        raise NotUnderServe(
            f"punctual: fd {fd} is not open: run this program under `punctual serve` "
            "(a topic with resident = [...]); see docs/RESIDENT.md"
        ) from None
    return fd


def _open(env: str, default: int, mode: str):
    return os.fdopen(_fd(env, default), mode, buffering=0 if "w" in mode else -1)


class _Lines:
    """fd 3 split in lines by the loop itself (no buffered file object), so
    that a look for cancels while a job runs (:meth:`Job.cancelled`) and
    before each job starts can read what is there without blocking and lose
    nothing the loop reads next."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = bytearray()
        self.eof = False
        # The look without blocking before a job read ahead: poll(0) on a
        # poll object made once (0.4 us on an empty pipe, half a
        # select.select; an os.read on an O_NONBLOCK fd raising
        # BlockingIOError: 1 us). With something there, it costs a syscall
        # more than that read; over 100k no-op jobs neither loop was
        # measurably faster, and this one keeps fd 3 blocking: the wait
        # for the next job is one plain read.
        self.ready = select.poll()
        self.ready.register(fd, select.POLLIN)

    def line(self) -> Optional[bytes]:
        """The next line, blocking until one comes; None at EOF."""
        while (line := self.buffered()) is None:
            if self.eof:
                return None
            self.fill(block=True)
        return line

    def buffered(self) -> Optional[bytes]:
        """The next whole line read (at EOF, what is left of a last one);
        None if there is none."""
        i = self.buf.find(b"\n")
        if i >= 0:
            line = bytes(self.buf[:i])
            del self.buf[:i + 1]
            return line
        if self.eof and self.buf:
            line, self.buf = bytes(self.buf), bytearray()
            return line
        return None

    def fill(self, block: bool) -> None:
        """Reads what fd 3 holds: without ``block``, all of it and nothing
        more (a short read means it was emptied: one poll and one read when
        something is there, one poll when nothing is); with ``block``, at
        least something, waiting for it, or its end."""
        while not self.eof:
            if not block and not self.ready.poll(0):
                return
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                self.eof = True
                return
            self.buf += chunk
            if len(chunk) < 1 << 16:
                return
            block = False  # something came: only what else is there now


def _message(line: bytes) -> Optional[dict]:
    """A line of fd 3 as a message; None when it is not a JSON object."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


def _stopped() -> RuntimeError:
    """The error of a job cancelled before its handler could start."""
    return RuntimeError("cancelled by an operator")


def reply_for(job_id: str, exc: Optional[BaseException]) -> dict:
    """The reply line for a handler's outcome: done, or the exception's."""
    if exc is None:
        return {"type": "done", "id": job_id}
    if isinstance(exc, Dead):
        return {"type": "dead", "id": job_id, "error": exc.reason}
    if isinstance(exc, Retry):
        msg = {"type": "retry", "id": job_id, "error": exc.message}
        d = exc.delay_ms
        # Whole ms, rounded up; anything but a finite number is left to the
        # topic's backoff ladder.
        if isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d):
            msg["delay_ms"] = max(0, math.ceil(d))
        return msg
    return {"type": "retry", "id": job_id, "error": f"{type(exc).__name__}: {exc}"}


Hook = Optional[Callable[[], Any]]


def _handler(handler: Optional[Callable[[Job], Any]], app, before_job: Hook, after_job: Hook):
    """The handler to run: ``handler``, or with ``app`` (a module name or
    several) the task dispatcher after importing them; wrapped in the
    hooks."""
    if (handler is None) == (app is None):
        raise TypeError("give a handler or app= (the module(s) defining your @punctual.task functions), one of them")
    if app is not None:
        tasks.load(app)
        handler = tasks.dispatch
    if before_job is None and after_job is None:
        return handler

    def hooked(job: Job):
        if before_job is not None:
            before_job()
        try:
            result = handler(job)
            if inspect.isawaitable(result):
                return _after_awaited(result, after_job)
        except BaseException:
            if after_job is not None:
                after_job()
            raise
        if after_job is not None:
            after_job()
        return result

    return hooked


async def _after_awaited(result, after_job: Hook):
    try:
        return await result
    finally:
        if after_job is not None:
            after_job()


def _check_lookahead(lookahead) -> int:
    if isinstance(lookahead, bool) or not isinstance(lookahead, int) or not 0 <= lookahead <= 64:
        raise ValueError(f"lookahead must be an integer from 0 to 64 (the jobs punctual may write ahead of the "
                         f"one that runs; 0 turns look-ahead off), not {lookahead!r}")
    return lookahead


class Worker:
    """Runs ``handler(job)`` for each job ``punctual serve`` sends, one at a
    time: returning is done, :class:`Retry` retries, :class:`Dead` kills,
    any other exception retries with its class and message as the error.

    With ``app`` (a module name, or several) instead of a handler, imports
    them and runs the :func:`punctual.task` a job names. ``before_job`` and
    ``after_job`` are called around each job (Django:
    ``django.db.close_old_connections``, as its request cycle does).

    ``lookahead`` (0 to 64, default 16; 0 turns it off) is how many jobs
    punctual may write to fd 3 ahead of the one that runs, so the next job
    is there when the handler returns (docs/RESIDENT.md, "Look-ahead"). A
    job written ahead is not started if its cancel came meanwhile, nor
    after its ``start_by_us`` (then the loop replies ``skip`` and punctual
    hands it back, or ends it if it expired). Out of range: ``ValueError``,
    before the handshake."""

    def __init__(self, handler: Optional[Callable[[Job], Any]] = None, *, app=None,
                 before_job: Hook = None, after_job: Hook = None, lookahead: int = 16):
        self.lookahead = _check_lookahead(lookahead)
        self.handler = _handler(handler, app, before_job, after_job)

    def run(self) -> None:
        """Says ready, handles jobs until fd 3 ends (EOF: punctual wants the
        program to exit), then returns.

        When an operator cancels the job that runs (docs/RESIDENT.md,
        "Cancel"), :meth:`Job.cancelled` says so from then on (the loop
        cannot interrupt a sequential handler: it should look between
        steps); its reply, whatever it is, is not recorded. A job cancelled
        before its handler started is not started (its reply: retry,
        ``cancelled by an operator``); a cancel for a job already answered
        is ignored. Right before each job starts, the loop reads what fd 3
        holds without blocking, so such a cancel is heard even when it
        arrived after the job was read."""
        lookahead = self.lookahead
        jobs = _Lines(_fd("PUNCTUAL_JOBS_FD", 3))
        replies = _open("PUNCTUAL_REPLIES_FD", 4, "wb")

        def send(msg: dict) -> None:
            data = (json.dumps(msg, ensure_ascii=False) + "\n").encode()
            while data:
                data = data[replies.write(data):]

        # Jobs read and not started yet (read by a look for cancels while
        # the one before ran), and the one running.
        waiting: deque = deque()
        running: list = [None]

        def take(msg: Optional[dict]) -> None:
            if msg is None:
                return
            if msg.get("type") == "job":
                try:
                    job = Job(msg)
                except Exception as e:  # noqa: BLE001 - a bad payload_b64: answered here
                    send(reply_for(str(msg.get("id", "")), e))
                    return
                job._poll = poll
                waiting.append(job)
            elif msg.get("type") == "cancel":
                # For a job already replied to (or not sent): nothing to do.
                for job in (running[0], *waiting):
                    if job is not None and job.id == msg.get("id"):
                        job._cancelled = True
            # later versions may add message types

        def poll() -> None:
            jobs.fill(block=False)
            while (line := jobs.buffered()) is not None:
                take(_message(line))

        ready = {"type": "ready", "protocol": PROTOCOL, "inflight": 1}
        if lookahead:
            ready["lookahead"] = lookahead
        send(ready)
        monotonic_ns = time.monotonic_ns
        while True:
            if not waiting:
                line = jobs.line()
                if line is None:
                    break
                take(_message(line))
                continue
            # The promise of docs/RESIDENT.md, "Look-ahead", kept for every
            # job: what fd 3 holds is read (one poll(0) when it is empty)
            # and every line read is taken (its cancel may have come in the
            # very read that brought it); then its start_by_us.
            jobs.fill(block=False)
            while (line := jobs.buffered()) is not None:
                take(_message(line))
            job = waiting.popleft()
            if job._cancelled:
                send(reply_for(job.id, _stopped()))
                continue
            if job.start_by_us is not None and monotonic_ns() // 1000 > job.start_by_us:
                send({"type": "skip", "id": job.id})
                continue
            running[0] = job
            try:
                self.handler(job)
                exc = None
            except Exception as e:  # noqa: BLE001 - every failure becomes a reply
                exc = e
            finally:
                running[0] = None
            send(reply_for(job.id, exc))
        replies.close()
        os.close(jobs.fd)


def run(handler: Optional[Callable[[Job], Any]] = None, *, app=None, before_job: Hook = None,
        after_job: Hook = None, lookahead: int = 16) -> None:
    """The resident handler loop: ``run(handle)``, or ``run(app="myproject.tasks")``
    to run the :func:`punctual.task` functions that module registers (see
    :class:`Worker`, also for ``lookahead``)."""
    Worker(handler, app=app, before_job=before_job, after_job=after_job, lookahead=lookahead).run()


async def run_async(handler: Optional[Callable[[Job], Any]] = None, *, inflight: int = 1, app=None,
                    before_job: Hook = None, after_job: Hook = None) -> None:
    """The resident loop for asyncio: ``asyncio.run(run_async(handle, inflight=8))``.

    Says ready with ``inflight`` (1 to 1000) and runs up to that many
    handlers at once (``app``, ``before_job``, ``after_job`` as for
    :class:`Worker`) (``async def`` handlers, or plain functions, which then
    block the loop while they run). Outcomes as for :func:`run`. Returns
    when fd 3 ends, once the jobs in hand are answered. When an operator
    cancels a job while it runs (docs/RESIDENT.md, "Cancel"), its handler's
    task is cancelled (``asyncio.CancelledError`` at its ``await``); the
    reply that follows is not recorded, and the program keeps its place.
    """
    if not isinstance(inflight, int) or not 1 <= inflight <= 1000:
        raise ValueError("inflight must be 1 to 1000")
    handler = _handler(handler, app, before_job, after_job)
    jobs = _open("PUNCTUAL_JOBS_FD", 3, "rb")
    replies = _open("PUNCTUAL_REPLIES_FD", 4, "wb")

    def send(msg: dict) -> None:
        # A reply line is small; the write blocks only while punctual is not
        # reading, and then nothing else could progress either.
        data = (json.dumps(msg, ensure_ascii=False) + "\n").encode()
        while data:
            data = data[replies.write(data):]

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**31)  # a line holds a whole payload
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), jobs)

    # Jobs in hand and their tasks, by id; the ids an operator cancelled.
    running: dict = {}
    cancelled: set = set()

    async def one(job: Job) -> None:
        try:
            result = handler(job)
            if inspect.isawaitable(result):
                await result
            exc = None
        except asyncio.CancelledError:
            if job.id not in cancelled:
                raise
            exc = _stopped()
        except Exception as e:  # noqa: BLE001 - every failure becomes a reply
            exc = e
        finally:
            running.pop(job.id, None)
            cancelled.discard(job.id)
        send(reply_for(job.id, exc))

    pending: set = set()

    def done(job_id: str, task: asyncio.Task) -> None:
        pending.discard(task)
        # Cancelled before its handler started: `one` never ran to reply.
        if task.cancelled() and job_id in cancelled:
            cancelled.discard(job_id)
            running.pop(job_id, None)
            send(reply_for(job_id, _stopped()))

    send({"type": "ready", "protocol": PROTOCOL, "inflight": inflight})
    while True:
        line = await reader.readline()
        if not line:
            break
        msg = json.loads(line)
        if isinstance(msg, dict) and msg.get("type") == "cancel":
            held = running.get(msg.get("id"))
            if held is not None:
                cancelled.add(msg["id"])
                held[0]._cancelled = True
                held[1].cancel()
            continue
        if not isinstance(msg, dict) or msg.get("type") != "job":
            continue  # later versions may add message types
        job = Job(msg)
        task = asyncio.ensure_future(one(job))
        running[job.id] = (job, task)
        pending.add(task)
        task.add_done_callback(functools.partial(done, job.id))
    if pending:
        await asyncio.gather(*pending)
    transport.close()
    replies.close()
