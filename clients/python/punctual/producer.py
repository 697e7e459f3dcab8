"""Producer: enqueue, get, cancel and reschedule punctual jobs from Python.

Every change goes through punctual's own Lua scripts (copies in ``lua/``,
identical to ``punctual script NAME``), called by EVALSHA; on NOSCRIPT the
script is sent once with EVAL, which also caches it on that node (this works
on Redis Cluster too). Input is checked before anything reaches Redis, with
the messages of the Rust library and the CLI.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterable, Optional, Union

import redis

from .ops import _Cmd, _Pipe, _Sleep
from .schedules import Schedules
from .validate import (
    MAX_BATCH,
    MAX_DELAY_MS,
    Duration,
    InvalidInput,
    Time,
    _int,
    _ms,
    _text,
    debug_quote,
    encode_options,
    encode_when,
    parse_options,
    partition_name,
    partition_of,
    validate_id,
    validate_topic,
    validate_traceparent,
    validate_tracestate,
)

DEFAULT_PREFIX = "punctual"
DEFAULT_MAX_PAYLOAD = 64 * 1024
MAX_PARTITIONS = 1024
# Rounds of routing anew after the script refuses a stale partition count.
STALE_ROUNDS = 5
_KEYS = ("pool", "ready", "running", "dead", "jobs", "meta", "stats", "seq", "attempts")
# Status 4 ("fired before") comes only with the fired key, which only
# punctual's schedule firer passes: here it is unknown, hence an error.
_STATUS = {0: "duplicate", 1: "created", 2: "replaced", 3: "dead"}


def _status(code) -> str:
    """The name of an enqueue status; an unknown one is an error, never
    taken for "created"."""
    try:
        return _STATUS[int(code)]
    except (KeyError, ValueError) as e:
        raise RuntimeError(f"enqueue returned an unknown status {code!r}") from e
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _following_ids(first: str, n: int) -> list:
    """The ids the enqueue script generated for ``n`` jobs from ``first``
    on, when it skipped none: each the one before with its last four
    base-36 digits counted up by one, modulo 36^4 (docs/PROTOCOL.md
    "enqueue")."""
    last = first[-4:]
    if len(first) < 4 or any(c not in _DIGITS for c in last):
        raise redis.exceptions.ResponseError(f"unexpected reply from Redis to enqueue: {first!r} is not a generated id")
    stamp, v = first[:-4], int(last, 36)
    out = []
    for j in range(n):
        x = (v + j) % 36 ** 4
        out.append(stamp + "".join(_DIGITS[(x // 36 ** e) % 36] for e in (3, 2, 1, 0)))
    return out

Payload = Union[bytes, str]


class PartialBatch(Exception):
    """A batch of more than one script call failed part way.

    ``written`` maps batch indexes to their :class:`Enqueued`; ``failed``
    lists the indexes not written; ``__cause__`` is why."""

    def __init__(self, total: int, written: dict, failed: list, source: Exception):
        super().__init__(
            f"{source} (the batch of {total} jobs went in calls of up to 1,000: "
            f"{len(written)} written, {len(failed)} not; enqueue those again, ids make that safe)"
        )
        self.total, self.written, self.failed = total, written, failed
        self.__cause__ = source


@dataclass(frozen=True)
class NewJob:
    """A job to enqueue (for :meth:`Producer.enqueue_batch`)."""

    payload: Payload
    id: Optional[str] = None
    delay_ms: Optional[Duration] = None
    at_ms: Optional[Time] = None
    max_attempts: Optional[int] = None
    backoff_ms: Optional[Iterable[Duration]] = None
    expire_ms: Optional[Duration] = None
    timeout_ms: Optional[Duration] = None
    group: Optional[str] = None
    # The producer's W3C trace context (docs/PROTOCOL.md, "Trace context");
    # without one, the active OpenTelemetry span's, when the SDK is in use.
    traceparent: Optional[str] = None
    tracestate: Optional[str] = None


@dataclass(frozen=True)
class Enqueued:
    """What enqueue did with one job: its id (given or generated) and
    ``status``: ``"created"``, ``"duplicate"`` (the id was live, nothing
    changed), ``"replaced"`` or ``"dead"`` (the id is in the dead-letter set:
    nothing changed, so this job will not run; replay the dead one, e.g.
    ``punctual dead replay TOPIC ID``, or enqueue with ``replace=True``)."""

    id: str
    status: str

    @property
    def is_duplicate(self) -> bool:
        """Nothing was enqueued: the id was live (or dead)."""
        return self.status in ("duplicate", "dead")

    @property
    def is_dead(self) -> bool:
        """The id is in the dead-letter set; this job will not run."""
        return self.status == "dead"


@dataclass(frozen=True)
class JobInfo:
    """A job as stored (:meth:`Producer.get`). Times are epoch ms, Redis clock."""

    id: str
    state: str  # pool, ready, running, dead (orphan: a broken invariant)
    attempts: int
    max_attempts: int
    due_ms: int
    created_ms: int
    state_since_ms: Optional[int]  # lease deadline (running) or time of death (dead)
    last_error: Optional[str]
    payload: bytes
    now_ms: int
    # Per-job options (docs/PROTOCOL.md, "Per-job options"); None when the
    # job has none, or the get script is older than options.
    expires_at_ms: Optional[int] = None  # the expiry deadline: may start only until then
    timeout_ms: Optional[int] = None
    group: Optional[str] = None
    traceparent: Optional[str] = None
    tracestate: Optional[str] = None


_otel_propagate: Any = None


def current_trace_context() -> tuple:
    """The active OpenTelemetry span's traceparent and tracestate (each
    ``None`` when absent), when the ``opentelemetry`` package is installed;
    ``(None, None)`` otherwise. Not a dependency: looked up once."""
    global _otel_propagate
    if _otel_propagate is None:
        try:
            from opentelemetry import propagate  # type: ignore
            _otel_propagate = propagate
        except Exception:  # not installed, or broken: no context
            _otel_propagate = False
    if not _otel_propagate:
        return None, None
    carrier: dict = {}
    try:
        _otel_propagate.inject(carrier)
    except Exception:
        return None, None
    tp, ts = carrier.get("traceparent"), carrier.get("tracestate") or None
    try:
        validate_traceparent(tp)
        if ts is not None:
            validate_tracestate(ts)
    except InvalidInput:
        return None, None
    return tp, ts


def _encode_job(job: NewJob, max_payload: int) -> tuple:
    """Checks one job; returns (payload bytes, when, max attempts and
    options, backoff)."""
    if job.id is not None:
        validate_id(job.id)
    traceparent, tracestate = job.traceparent, job.tracestate
    if traceparent is None and tracestate is None:
        traceparent, tracestate = current_trace_context()
    max_attempts = encode_options(job.max_attempts, job.expire_ms, job.timeout_ms, job.group,
                                  traceparent, tracestate)
    backoff = ""
    if job.backoff_ms is not None:
        if isinstance(job.backoff_ms, (str, bytes)) or not hasattr(job.backoff_ms, "__iter__"):
            raise InvalidInput("backoff must be a list of delays (milliseconds or timedeltas)")
        steps = []
        for given in job.backoff_ms:
            step = _ms(given)
            if step is None:
                raise InvalidInput(f"invalid backoff step {given!r}: give milliseconds as numbers or timedeltas")
            steps.append(step)
            if step < 0:
                raise InvalidInput(f"invalid backoff step {step}ms: steps may not be negative")
            if step > MAX_DELAY_MS:
                raise InvalidInput(f"invalid backoff step {step // 1000}s: steps are at most ten years")
        backoff = ",".join(str(s) for s in steps)
    when = encode_when(job.delay_ms, job.at_ms)
    payload = job.payload
    if isinstance(payload, str):
        payload = payload.encode()
    elif isinstance(payload, (bytearray, memoryview)):
        payload = bytes(payload)
    elif not isinstance(payload, bytes):
        raise InvalidInput(
            f"payload must be bytes or str, not {type(payload).__name__} (use json.dumps for JSON)"
        )
    if len(payload) > max_payload:
        raise InvalidInput(
            f"payload is {len(payload)} bytes, over the {max_payload}-byte limit "
            "(raise max_payload or store the data elsewhere and enqueue a reference)"
        )
    return payload, when, max_attempts, backoff


def generate_id() -> str:
    """An id made by the client for a partitioned topic (the id picks the
    partition): 9 base-36 digits of the time in ms, then 12 random ones."""
    ms, head = int(time.time() * 1000), ""
    for _ in range(9):
        ms, r = divmod(ms, 36)
        head = _DIGITS[r] + head
    return head + "".join(secrets.choice(_DIGITS) for _ in range(12))


def _is_stale(e: Exception) -> bool:
    """The enqueue script's refusal of a call routed with a stale partition count."""
    return isinstance(e, redis.exceptions.ResponseError) and str(e).startswith("PUNCTUAL_STALE")


_log = logging.getLogger("punctual")

# The audit trail keeps this many entries, the newest (docs/PROTOCOL.md,
# "Audit trail").
AUDIT_MAX_ENTRIES = 10_000


def audit_entry(by: Optional[str], action: str, topic: str, detail: dict) -> str:
    """An entry of the audit trail, as the CLI writes one: ``who`` is
    ``by`` (default ``python``, as the CLI's is ``cli``), ``from`` this
    process, ``HOST/PID``."""
    return json.dumps({
        "at_ms": int(time.time() * 1000),
        "who": by or "python",
        "from": f"{socket.gethostname()}/{os.getpid()}",
        "action": action,
        "topic": topic,
        "detail": detail,
    }, ensure_ascii=False, separators=(",", ":"))


def _bytes(v: Any) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode()


class _Script:
    def __init__(self, name: str):
        self.name = name
        self.text = resources.files("punctual").joinpath("lua", f"{name}.lua").read_bytes()
        self.sha = hashlib.sha1(self.text).hexdigest()


# ---- one body, two drivers ---------------------------------------------------
#
# Each operation is written once, as a generator that yields what it needs
# from Redis (a _Cmd, or a _Pipe) or a pause (a _Sleep; all three in ops.py,
# which schedules.py yields too) and gets the reply (or the exception) back.
# Producer drives it with a blocking client, AsyncProducer with redis.asyncio.

# How long a command is retried while Redis answers LOADING (it is reading
# its dataset from disk after a restart): ids make the resend safe.
LOADING_WAIT_S = 60.0


def _pipeline(client, op: _Pipe):
    # Not a MULTI: redis-py's cluster pipelines refuse transactions before
    # 6.x, and the commands here touch one key (docs/PROTOCOL.md, "Audit
    # trail": an LTRIM lost with the connection is made by the next append).
    p = client.pipeline(transaction=False)
    for c in op.cmds:
        getattr(p, c.name)(*c.args, **c.kwargs)
    return p.execute()


def _loading_error(started: float, e: Exception) -> Exception:
    return redis.exceptions.BusyLoadingError(
        f"{e} (Redis was still loading its dataset after {time.monotonic() - started:.0f} s of retries; "
        "wait for it to finish, or raise punctual.producer.LOADING_WAIT_S)"
    )


def _drive(client, gen):
    """Runs an operation's generator against a blocking client."""
    value, exc = None, None
    while True:
        try:
            op = gen.throw(exc) if exc is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value, exc = None, None
        if isinstance(op, _Sleep):
            time.sleep(op.seconds)
            continue
        started, pause = time.monotonic(), 0.05
        while True:
            try:
                if isinstance(op, _Pipe):
                    value = _pipeline(client, op)
                else:
                    value = getattr(client, op.name)(*op.args, **op.kwargs)
                break
            except redis.exceptions.BusyLoadingError as e:
                if time.monotonic() - started > LOADING_WAIT_S:
                    exc = _loading_error(started, e)
                    break
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
            except Exception as e:  # noqa: BLE001 - handed to the operation
                exc = e
                break


async def _drive_async(client, gen):
    """Runs an operation's generator against a redis.asyncio client."""
    import asyncio

    value, exc = None, None
    while True:
        try:
            op = gen.throw(exc) if exc is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value, exc = None, None
        if isinstance(op, _Sleep):
            await asyncio.sleep(op.seconds)
            continue
        started, pause = time.monotonic(), 0.05
        while True:
            try:
                if isinstance(op, _Pipe):
                    value = await _pipeline(client, op)
                else:
                    value = await getattr(client, op.name)(*op.args, **op.kwargs)
                break
            except redis.exceptions.BusyLoadingError as e:
                if time.monotonic() - started > LOADING_WAIT_S:
                    exc = _loading_error(started, e)
                    break
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
            except Exception as e:  # noqa: BLE001 - handed to the operation
                exc = e
                break


def _is_async_client(client) -> bool:
    """A redis.asyncio client (its commands are coroutines)."""
    return inspect.iscoroutinefunction(getattr(client, "execute_command", None))


class _Core:
    """What Producer and AsyncProducer share: checks, routing and the
    operations' bodies (generators, see _drive)."""

    def __init__(self, client, prefix: str = DEFAULT_PREFIX, max_payload: int = DEFAULT_MAX_PAYLOAD):
        if not isinstance(prefix, str) or prefix == "" or "{" in prefix or "}" in prefix:
            raise InvalidInput(
                f"invalid prefix {debug_quote(str(prefix))}: prefixes must be non-empty and may not contain braces"
            )
        if not _int(max_payload) or max_payload < 1:
            raise InvalidInput(f"invalid max_payload {max_payload!r}: give a number of bytes (an integer, at least 1)")
        self.client = client
        self.prefix = prefix
        self.max_payload = max_payload
        self._scripts = {n: _Script(n) for n in ("enqueue", "get", "cancel", "reschedule", "unfire")}
        self._registered: set = set()
        self._partitions: dict = {}
        self._schedules = Schedules(self)

    # ---- plumbing -------------------------------------------------------

    def keys(self, topic: str) -> list:
        """The nine keys of one topic (or partition ``T#i``), in script order."""
        return [f"{self.prefix}:{{{topic}}}:{n}" for n in _KEYS]

    def _g_call(self, name: str, topic: str, *argv, fired: bool = False):
        """EVALSHA of script ``name`` with the nine keys of ``topic`` (and,
        with ``fired``, its tenth, ``P:{T}:fired``)."""
        script = self._scripts[name]
        keys = self.keys(topic)
        if fired:
            keys.append(f"{self.prefix}:{{{topic}}}:fired")
        try:
            try:
                return (yield _Cmd("evalsha", script.sha, len(keys), *keys, *argv))
            except redis.exceptions.NoScriptError:
                # Empty script cache (restart, failover, SCRIPT FLUSH): EVAL
                # runs the text and caches it on the node that holds the keys.
                return (yield _Cmd("eval", script.text, len(keys), *keys, *argv))
        except redis.exceptions.ResponseError as e:
            msg = str(e)
            if msg.startswith("PUNCTUAL_INVALID"):
                raise InvalidInput(msg[len("PUNCTUAL_INVALID "):]) from None
            raise

    def _g_partitions(self, topic: str):
        validate_topic(topic)
        hit = self._partitions.get(topic)
        if hit and time.monotonic() - hit[1] < 1.0:
            return hit[0]
        v = yield _Cmd("hget", f"{self.prefix}:partitions", topic)
        try:
            k = min(max(int(v), 1), MAX_PARTITIONS) if v is not None else 1
        except ValueError:
            k = 1
        self._partitions[topic] = (k, time.monotonic())
        return k

    def _g_route(self, topic: str, job_id: str):
        k = yield from self._g_partitions(topic)
        return partition_name(topic, partition_of(job_id, k), k)

    @staticmethod
    def _groups(topic: str, k: int, pending: list, ids: list) -> list:
        """The script calls for the jobs ``pending``: per partition (of
        ``k``), at most 1,000 each. A partitioned topic's missing ids are
        made here, since the id picks the partition."""
        if k <= 1:
            return [(topic, pending[s:s + MAX_BATCH]) for s in range(0, len(pending), MAX_BATCH)]
        by_part: dict = {}
        for i in pending:
            if ids[i] is None:
                ids[i] = generate_id()
            by_part.setdefault(partition_of(ids[i], k), []).append(i)
        groups = []
        for p in sorted(by_part):
            idx = by_part[p]
            groups += [(partition_name(topic, p, k), idx[s:s + MAX_BATCH]) for s in range(0, len(idx), MAX_BATCH)]
        return groups

    # ---- operations -----------------------------------------------------

    def _g_enqueue_batch(self, topic: str, jobs: Iterable, replace: bool):
        validate_topic(topic)
        jobs = [j if isinstance(j, NewJob) else NewJob(**j) for j in jobs]
        if not jobs:
            return []
        encoded = []
        for i, job in enumerate(jobs):
            try:
                encoded.append(_encode_job(job, self.max_payload))
            except InvalidInput as e:
                raise (InvalidInput(f"job {i + 1}: {e}") if len(jobs) > 1 else e) from None
        ids = [j.id for j in jobs]
        placed: list = [None] * len(jobs)
        first: dict = {}
        for i, job_id in enumerate(ids):
            if job_id is not None:
                if job_id in first:
                    placed[i] = Enqueued(job_id, "duplicate")
                else:
                    first[job_id] = i
        pending = [i for i in range(len(jobs)) if placed[i] is None]
        failed: list = []
        first_error = None
        rounds = 0
        accepted = False
        while pending:
            rounds += 1
            k = yield from self._g_partitions(topic)
            stale: list = []
            for physical, idx in self._groups(topic, k, pending, ids):
                try:
                    results = yield from self._g_enqueue_call(physical, k, replace, idx, ids, encoded)
                    for i, result in zip(idx, results):
                        placed[i] = result
                    accepted = True
                except Exception as e:  # noqa: BLE001 - reported below, as the library does
                    if _is_stale(e) and rounds < STALE_ROUNDS:
                        stale += idx
                    else:
                        failed += idx
                        first_error = first_error or e
            pending = sorted(stale)
            if pending:
                # The partition count changed since it was read: read it
                # again and route those jobs anew.
                self._partitions.pop(topic, None)
                yield _Sleep(0.02 * rounds)
        if accepted and topic not in self._registered:
            # Listed only once a script took a job: a refused call changes nothing.
            yield _Cmd("sadd", f"{self.prefix}:topics", topic)
            self._registered.add(topic)
        if first_error is not None:
            if all(p is None or p.is_duplicate for p in placed):
                raise first_error
            written = {i: p for i, p in enumerate(placed) if p is not None}
            raise PartialBatch(len(jobs), written, sorted(failed), first_error)
        return placed

    def _g_enqueue_call(self, physical: str, k: int, replace: bool, idx: list, ids: list, encoded: list):
        """One call of the enqueue script for the jobs ``idx``, in the form
        the Rust library sends for the same jobs (docs/PROTOCOL.md
        "enqueue"): one job, or jobs that differ in max attempts or backoff,
        in the five-argument form; jobs alike in all but id and payload in
        the shared form ``=n`` (their when, max attempts and backoff once),
        jobs alike in max attempts and backoff in ``~n``; ``=*n``, ``~*n``
        when every id is to be generated. Returns an :class:`Enqueued` per
        job, in the order of ``idx``."""
        n = len(idx)
        first = encoded[idx[0]]
        same_when = all(str(encoded[i][1]) == str(first[1]) for i in idx)
        same_rest = all(str(encoded[i][2]) == str(first[2]) and str(encoded[i][3]) == str(first[3]) for i in idx)
        gen_all = all(ids[i] is None for i in idx)
        form = ("=" if same_when else "~") if n > 1 and same_rest else None
        argv: list = [self.max_payload, "1" if replace else "0"]
        if form is None:
            argv.append(n)
            for i in idx:
                payload, when, max_attempts, backoff = encoded[i]
                argv += [ids[i] or "", payload, when, max_attempts, backoff]
        else:
            argv.append(f"{form}{'*' if gen_all else ''}{n}")
            if form == "=":
                argv.append(first[1])
            argv += [first[2], first[3]]
            for i in idx:
                if not gen_all:
                    argv.append(ids[i] or "")
                argv.append(encoded[i][0])
                if form == "~":
                    argv.append(encoded[i][1])
        # The count routed with goes last: the script refuses the call
        # (PUNCTUAL_STALE, nothing written) when the topic has another.
        argv.append(k)
        reply = yield from self._g_call("enqueue", physical, *argv)

        def bad(why: str) -> Exception:
            return redis.exceptions.ResponseError(f"unexpected reply from Redis to enqueue: {why}")

        if not isinstance(reply, list):
            raise bad("an array expected")
        if form is None:
            if len(reply) != 2 * n:
                raise bad("one result per job expected")
            return [Enqueued(_text(reply[2 * j]), _status(reply[2 * j + 1])) for j in range(n)]
        # Shared forms: c, c ids (n when one was generated, 0 when all were
        # given), then pairs j, status for the jobs not created; or, all
        # generated, -1 and the first id, the others following it.
        count = int(reply[0]) if reply else 0
        if count == -1 and gen_all:
            if len(reply) != 2:
                raise bad("more after the first id")
            return [Enqueued(job_id, "created") for job_id in _following_ids(_text(reply[1]), n)]
        if count not in (0, n) or len(reply) < 1 + count or (len(reply) - 1 - count) % 2:
            raise bad("one id per job expected")
        if count == 0 and any(ids[i] is None for i in idx):
            raise bad("no ids returned for generated ones")
        out = [Enqueued(ids[i] if count == 0 else _text(reply[1 + j]), "created") for j, i in enumerate(idx)]
        for p in range(1 + count, len(reply), 2):
            j = int(reply[p]) - 1
            if not 0 <= j < n:
                raise bad("a status for no job")
            out[j] = Enqueued(out[j].id, _status(reply[p + 1]))
        return out

    def _g_get(self, topic: str, job_id: str):
        validate_topic(topic)
        validate_id(job_id)
        physical = yield from self._g_route(topic, job_id)
        r = yield from self._g_call("get", physical, job_id)
        if r is None:
            return None
        state = _text(r[0])
        err = _text(r[8]) if r[8] else ""
        return JobInfo(
            id=job_id, state=state, attempts=int(r[2]), max_attempts=int(r[3]),
            due_ms=int(r[5]), created_ms=int(r[6]),
            state_since_ms=int(r[1]) if state in ("running", "dead") else None,
            last_error=err or None, payload=_bytes(r[9]), now_ms=int(r[10]),
            **(parse_options(_text(r[11])) if len(r) > 11 and r[11] else {}),
        )

    def _g_cancel(self, topic: str, job_id: str, by: Optional[str]):
        validate_topic(topic)
        validate_id(job_id)
        if by is not None and not isinstance(by, str):
            raise InvalidInput(f"invalid by {by!r}: give who cancels, as text")
        physical = yield from self._g_route(topic, job_id)
        r = yield from self._g_call("cancel", physical, job_id)
        if r is None:
            return None  # nothing changed: not recorded
        was = _text(r)
        entry = audit_entry(by, "cancel", topic, {"id": job_id, "was": was})
        try:
            yield _Pipe(_Cmd("lpush", f"{self.prefix}:audit", entry),
                        _Cmd("ltrim", f"{self.prefix}:audit", 0, AUDIT_MAX_ENTRIES - 1))
        except Exception as e:  # noqa: BLE001 - the cancel is done and its result stands
            _log.warning("punctual: job %s of %s was cancelled, but the audit trail could not record it: %s",
                         job_id, topic, e)
        return was

    def _g_reschedule(self, topic: str, job_id: str, delay_ms, at_ms):
        validate_topic(topic)
        validate_id(job_id)
        when = encode_when(delay_ms, at_ms)
        physical = yield from self._g_route(topic, job_id)
        r = yield from self._g_call("reschedule", physical, job_id, when)
        return None if r is None else _text(r[0])


_ENQUEUE_DOC = """Enqueues one job, due now, ``delay_ms`` after Redis gets it (ms or a
        ``timedelta``), or at ``at_ms`` (epoch ms or an aware ``datetime``; the
        job is due then by Redis's clock). Without ``id`` one is generated.
        ``replace`` replaces a live job of that id instead of reporting a
        duplicate. ``max_attempts`` and ``backoff_ms`` (a list of ms or
        timedeltas, one per retry, the last repeated) override the topic's.

        Per-job options (docs/PROTOCOL.md, "Per-job options"): ``expire_ms``
        (ms or a ``timedelta``, 1 ms to ten years): the job may start only
        until its due time plus this, later it goes to dead unrun;
        ``timeout_ms`` (same range): the handler timeout for this job instead
        of the topic's; ``group`` (1 to 64 bytes of ``[A-Za-z0-9_.@-]``): the
        group the job is served fairly in; ``traceparent`` and ``tracestate``
        (W3C Trace Context): the producer's trace, handed to every attempt's
        handler; without them, the active OpenTelemetry span's when the
        ``opentelemetry`` package is installed and a span is active."""


class Producer(_Core):
    """Enqueues and inspects jobs in one Redis (or Redis Cluster).

    ``client`` is a ``redis.Redis`` or ``redis.cluster.RedisCluster`` made
    with the default ``decode_responses=False`` (payloads are bytes). Given
    a ``redis.asyncio`` client, ``Producer(client)`` makes an
    :class:`AsyncProducer` (the same methods, awaited).

    A command Redis answers with LOADING (reading its dataset after a
    restart) is retried for up to ``LOADING_WAIT_S`` (60 s); ids make the
    resend safe.
    """

    def __new__(cls, client=None, *args, **kwargs):
        if cls is Producer and _is_async_client(client):
            return AsyncProducer(client, *args, **kwargs)
        return super().__new__(cls)

    def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has (1: not partitioned); cached 1 s."""
        return _drive(self.client, self._g_partitions(topic))

    def _call(self, name: str, topic: str, *argv, fired: bool = False):
        return _drive(self.client, self._g_call(name, topic, *argv, fired=fired))

    def _route(self, topic: str, job_id: str) -> str:
        return _drive(self.client, self._g_route(topic, job_id))

    def enqueue(
        self,
        topic: str,
        payload: Payload,
        *,
        id: Optional[str] = None,
        delay_ms: Optional[Duration] = None,
        at_ms: Optional[Time] = None,
        max_attempts: Optional[int] = None,
        backoff_ms: Optional[Iterable[Duration]] = None,
        expire_ms: Optional[Duration] = None,
        timeout_ms: Optional[Duration] = None,
        group: Optional[str] = None,
        traceparent: Optional[str] = None,
        tracestate: Optional[str] = None,
        replace: bool = False,
    ) -> Enqueued:
        job = NewJob(payload, id, delay_ms, at_ms, max_attempts, backoff_ms, expire_ms, timeout_ms, group,
                     traceparent, tracestate)
        return self.enqueue_batch(topic, [job], replace=replace)[0]

    enqueue.__doc__ = _ENQUEUE_DOC

    def enqueue_batch(self, topic: str, jobs: Iterable, *, replace: bool = False) -> list:
        """Enqueues jobs (:class:`NewJob` or dicts of its fields): one atomic
        script call per 1,000 jobs (per partition). Every job is checked
        before anything is written. An id given twice: the first wins, the
        others are reported as duplicates."""
        return _drive(self.client, self._g_enqueue_batch(topic, jobs, replace))

    def get(self, topic: str, job_id: str) -> Optional[JobInfo]:
        """One job by id, or None when no such job is live."""
        return _drive(self.client, self._g_get(topic, job_id))

    def cancel(self, topic: str, job_id: str, *, by: Optional[str] = None) -> Optional[str]:
        """Cancels a job in any state; returns the state it was in, or None
        when no such job was live. A running job is stopped in flight: the
        worker holding it, on any host, is told at once (docs/RESIDENT.md,
        "Cancel"). A cancel that found the job is recorded in the audit
        trail (``punctual audit``) as the CLI's is: who is ``by`` (default
        ``python``), from this host and pid; a failed record is a warning
        on the ``punctual`` logger, and the cancel stands."""
        return _drive(self.client, self._g_cancel(topic, job_id, by))

    def reschedule(self, topic: str, job_id: str, *, delay_ms: Optional[Duration] = None,
                   at_ms: Optional[Time] = None) -> Optional[str]:
        """Gives a waiting job (pool or ready) a new due time (now when
        neither is given; ``delay_ms`` and ``at_ms`` as for :meth:`enqueue`).
        Returns the state it was in; a running or dead job is left alone and
        its state returned; None when not live."""
        return _drive(self.client, self._g_reschedule(topic, job_id, delay_ms, at_ms))

    # ---- schedules (docs/PROTOCOL.md, "Schedules") ------------------------

    def schedule_add(self, topic: str, name: str, *, cron: Optional[str] = None,
                     every_ms: Optional[Duration] = None, tz: Optional[str] = None,
                     payload: Payload = "", max_attempts: Optional[int] = None,
                     expire_ms: Optional[Duration] = None, timeout_ms: Optional[Duration] = None,
                     group: Optional[str] = None, catch_up: str = "all",
                     spread_ms: Optional[Duration] = None, paused: bool = False) -> dict:
        """Adds or replaces the schedule ``name`` of ``topic`` (not a
        partition) and returns it as stored. Exactly one of ``cron`` (5
        fields, or 6 with seconds first; its syntax is checked by ``punctual
        serve``, which fires it) in ``tz`` (an IANA zone, default UTC) and
        ``every_ms`` (ms or a ``timedelta``, at least 1 s). Each occurrence
        is a job with id ``<name>@<occurrence ms>``, ``payload`` (text) and
        the per-job options of :meth:`enqueue`. ``catch_up`` says what
        happens to occurrences missed while no firer ran: ``all`` (default),
        ``latest``, ``skip`` or ``spread`` (over ``spread_ms``).
        A schedule added again keeps its creation time. This client fires
        nothing: ``punctual serve`` does."""
        return _drive(self.client, self._schedules.add(
            topic, name, cron=cron, every_ms=every_ms, tz=tz, payload=payload,
            max_attempts=max_attempts, expire_ms=expire_ms, timeout_ms=timeout_ms, group=group,
            catch_up=catch_up, spread_ms=spread_ms, paused=paused))

    def schedule_list(self, topic: str) -> list:
        """The schedules of ``topic`` as stored (dicts), by name. An entry
        that is not a JSON object comes as ``{"name", "unreadable"}``."""
        return _drive(self.client, self._schedules.list(topic))

    def schedule_remove(self, topic: str, name: str) -> bool:
        """Removes a schedule (and its watermark); False when there was none.
        Occurrences already enqueued stay: cancel them by id
        (``<name>@<ms>``) if they must not run."""
        return _drive(self.client, self._schedules.remove(topic, name))

    def schedule_pause(self, topic: str, name: str) -> bool:
        """Pauses a schedule: it fires nothing until resumed. False when there is none."""
        return _drive(self.client, self._schedules.set_paused(topic, name, True))

    def schedule_resume(self, topic: str, name: str) -> bool:
        """Resumes a schedule; the firer applies its catch-up policy to the
        occurrences missed while paused. False when there is none."""
        return _drive(self.client, self._schedules.set_paused(topic, name, False))


class AsyncProducer(_Core):
    """:class:`Producer` for asyncio: the same methods, awaited, on a
    ``redis.asyncio.Redis`` (or ``redis.asyncio.RedisCluster``) made with
    ``decode_responses=False``::

        producer = punctual.AsyncProducer(redis.asyncio.Redis.from_url(url))
        await producer.enqueue("orders", payload, delay_ms=timedelta(minutes=30))
    """

    async def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has (1: not partitioned); cached 1 s."""
        return await _drive_async(self.client, self._g_partitions(topic))

    async def enqueue(self, topic: str, payload: Payload, *, id: Optional[str] = None,
                      delay_ms: Optional[Duration] = None, at_ms: Optional[Time] = None,
                      max_attempts: Optional[int] = None, backoff_ms: Optional[Iterable[Duration]] = None,
                      expire_ms: Optional[Duration] = None, timeout_ms: Optional[Duration] = None,
                      group: Optional[str] = None, traceparent: Optional[str] = None,
                      tracestate: Optional[str] = None, replace: bool = False) -> Enqueued:
        job = NewJob(payload, id, delay_ms, at_ms, max_attempts, backoff_ms, expire_ms, timeout_ms, group,
                     traceparent, tracestate)
        return (await self.enqueue_batch(topic, [job], replace=replace))[0]

    enqueue.__doc__ = _ENQUEUE_DOC

    async def enqueue_batch(self, topic: str, jobs: Iterable, *, replace: bool = False) -> list:
        """As :meth:`Producer.enqueue_batch`."""
        return await _drive_async(self.client, self._g_enqueue_batch(topic, jobs, replace))

    async def get(self, topic: str, job_id: str) -> Optional[JobInfo]:
        """As :meth:`Producer.get`."""
        return await _drive_async(self.client, self._g_get(topic, job_id))

    async def cancel(self, topic: str, job_id: str, *, by: Optional[str] = None) -> Optional[str]:
        """As :meth:`Producer.cancel`."""
        return await _drive_async(self.client, self._g_cancel(topic, job_id, by))

    async def reschedule(self, topic: str, job_id: str, *, delay_ms: Optional[Duration] = None,
                         at_ms: Optional[Time] = None) -> Optional[str]:
        """As :meth:`Producer.reschedule`."""
        return await _drive_async(self.client, self._g_reschedule(topic, job_id, delay_ms, at_ms))

    async def schedule_add(self, topic: str, name: str, **spec) -> dict:
        """As :meth:`Producer.schedule_add`."""
        return await _drive_async(self.client, self._schedules.add(topic, name, **spec))

    async def schedule_list(self, topic: str) -> list:
        """As :meth:`Producer.schedule_list`."""
        return await _drive_async(self.client, self._schedules.list(topic))

    async def schedule_remove(self, topic: str, name: str) -> bool:
        """As :meth:`Producer.schedule_remove`."""
        return await _drive_async(self.client, self._schedules.remove(topic, name))

    async def schedule_pause(self, topic: str, name: str) -> bool:
        """As :meth:`Producer.schedule_pause`."""
        return await _drive_async(self.client, self._schedules.set_paused(topic, name, True))

    async def schedule_resume(self, topic: str, name: str) -> bool:
        """As :meth:`Producer.schedule_resume`."""
        return await _drive_async(self.client, self._schedules.set_paused(topic, name, False))
