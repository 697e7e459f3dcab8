"""RQ's enqueueing surface on punctual, so an RQ app changes one import line:

    from punctual.rq import Queue, Retry      # was: from rq import Queue, Retry

    q = Queue("orders", connection=redis.Redis())
    q.enqueue_in(timedelta(minutes=30), close_order, 10086)
    q.enqueue_at(datetime(2030, 1, 1, tzinfo=timezone.utc), close_order, 10086)
    q.enqueue(close_order, 10086, job_id="order:10086", retry=Retry(max=3, interval=[10, 60]))

The function is a module-level function of the app (RQ's rule too) or a
:func:`punctual.task`; the job's payload is the same JSON as a task's
(``{"task": "module.function", "args": [...], "kwargs": {...}}``), and the
worker is ``python -m punctual MODULE`` (or ``punctual.run(app="MODULE")``),
which runs only functions of the modules it was given.

Differences from RQ, said plainly: the queue name is the punctual topic; there
are no results (``job.result``, ``depends_on``, ``at_front``, ``ttl``/
``result_ttl``/``failure_ttl``, ``on_success``/``on_failure`` callbacks are
refused, not ignored); a job that fails every attempt is in punctual's dead set
(``punctual dead list TOPIC``), not RQ's FailedJobRegistry; ``Retry.interval``
is in seconds as in RQ.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence, Union

from .producer import Enqueued, InvalidInput, Producer, _ms
from .tasks import Task, _encode, current_job


def get_current_job():
    """RQ's ``get_current_job()``: the :class:`punctual.Job` being run (its
    ``id``, ``attempt``, ``due_ms``, ...), or None outside a job."""
    return current_job()

_REFUSED = ("depends_on", "at_front", "ttl", "result_ttl", "failure_ttl", "on_success", "on_failure",
            "on_stopped", "meta", "pipeline", "job_timeout_seconds")


class Retry:
    """RQ's ``Retry(max=3, interval=[10, 30, 60])``: up to ``max`` retries
    (``max + 1`` attempts), waiting ``interval`` seconds (one number, or one
    per retry, the last repeated)."""

    def __init__(self, max: int, interval: Union[int, float, Sequence[Union[int, float]]] = 0):
        if not isinstance(max, int) or isinstance(max, bool) or max < 0:
            raise InvalidInput(f"Retry(max={max!r}): give a number of retries (an integer, at least 0)")
        self.max = max
        self.intervals = list(interval) if isinstance(interval, (list, tuple)) else [interval]


def _name(func: Union[Callable, str, Task]) -> str:
    if isinstance(func, Task):
        return func.name
    if isinstance(func, str):
        return func
    if not callable(func) or not hasattr(func, "__module__") or "<" in getattr(func, "__qualname__", "<"):
        raise InvalidInput(f"{func!r}: enqueue a module-level function (or its dotted name), as with RQ")
    return f"{func.__module__}.{func.__qualname__}"


class Queue:
    """RQ's ``Queue(name, connection=...)`` for enqueueing; ``name`` is the
    punctual topic (default ``"default"``, as RQ's)."""

    def __init__(self, name: str = "default", connection=None, *, producer: Optional[Producer] = None,
                 default_timeout: Any = None, **refused):
        if refused:
            raise InvalidInput(f"Queue: {', '.join(sorted(refused))} not supported by punctual")
        if (connection is None) == (producer is None):
            raise InvalidInput("Queue takes connection= (a redis.Redis) or producer=, one of them")
        self.name = name
        self.producer = producer or Producer(connection)
        self.default_timeout = default_timeout

    def _send(self, func, args, kwargs, delay_ms=None, at_ms=None) -> Enqueued:
        opts: dict = {}
        for key in _REFUSED:
            if key in kwargs:
                raise InvalidInput(f"enqueue: {key} is an RQ feature punctual does not have (see punctual.rq)")
        job_id = kwargs.pop("job_id", None)
        retry = kwargs.pop("retry", None)
        timeout = kwargs.pop("job_timeout", self.default_timeout)
        call_args = kwargs.pop("args", None)
        call_kwargs = kwargs.pop("kwargs", None)
        if call_args is not None or call_kwargs is not None:
            args, kwargs = tuple(call_args or ()), dict(call_kwargs or {})
        if job_id is not None:
            opts["id"] = job_id
        if isinstance(func, Task):
            opts = {**func.opts, **opts}
        if retry is not None:
            if not isinstance(retry, Retry):
                raise InvalidInput("retry: give punctual.rq.Retry(max=..., interval=...)")
            opts["max_attempts"] = retry.max + 1
            steps = []
            for s in retry.intervals:
                ms = _ms(s * 1000.0 if isinstance(s, (int, float)) and not isinstance(s, bool) else s)
                if ms is None:
                    raise InvalidInput(f"Retry interval {s!r}: give seconds as numbers")
                steps.append(ms)
            opts["backoff_ms"] = steps
        if timeout is not None:
            opts["timeout_ms"] = timeout * 1000.0 if isinstance(timeout, (int, float)) else timeout
        payload = _encode(_name(func), args, kwargs)
        return self.producer.enqueue(self.name, payload, delay_ms=delay_ms, at_ms=at_ms, **opts)

    def enqueue(self, func, *args, **kwargs) -> Enqueued:
        """Enqueues ``func(*args, **kwargs)`` due now. RQ's ``job_id``,
        ``retry``, ``job_timeout`` (seconds), ``args``/``kwargs`` are taken."""
        return self._send(func, args, kwargs)

    def enqueue_in(self, time_delta, func, *args, **kwargs) -> Enqueued:
        """Enqueues a call due ``time_delta`` (a ``timedelta``) from now, by Redis's clock."""
        return self._send(func, args, kwargs, delay_ms=time_delta)

    def enqueue_at(self, datetime, func, *args, **kwargs) -> Enqueued:
        """Enqueues a call due at ``datetime`` (aware)."""
        return self._send(func, args, kwargs, at_ms=datetime)

    def enqueue_call(self, func, args: Sequence = (), kwargs: Optional[dict] = None, **options) -> Enqueued:
        """RQ's older spelling."""
        return self._send(func, tuple(args), {**options, "kwargs": dict(kwargs or {}), "args": tuple(args)})

    def fetch_job(self, job_id: str):
        """The job as stored (:class:`punctual.JobInfo`), or None."""
        return self.producer.get(self.name, job_id)

    def __len__(self) -> int:
        raise NotImplementedError("len(queue): use `punctual stats TOPIC` (punctual counts per state)")


