"""Tasks in the shape of RQ and Celery: decorate a function, call it later.

    # myproject/tasks.py
    import punctual

    @punctual.task(topic="orders", max_attempts=5, backoff=[timedelta(seconds=10), timedelta(minutes=1)])
    def close_order(order_id: int) -> None:
        ...

    # anywhere in the app
    punctual.configure(redis.Redis.from_url("redis://127.0.0.1:6379"))
    close_order.delay_in(timedelta(minutes=30), 10086)
    close_order.delay_at(datetime(2030, 1, 1, tzinfo=timezone.utc), 10086)
    close_order.delay(10086)                                   # due now
    close_order.with_options(id="order:10086").delay_in(timedelta(minutes=30), 10086)

    # the resident program (serve's config: resident = ["python3", "-m", "punctual", "myproject.tasks"])
    punctual.run(app="myproject.tasks")

A task's job payload is JSON, readable from any language and safe to decode:
``{"task": "<name>", "args": [...], "kwargs": {...}}``. The name is the
function's ``module.qualname`` unless ``name=`` says otherwise; the worker
finds it in the registry filled when the app's modules are imported.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Union

from .producer import Duration, Enqueued, InvalidInput, Producer, Time
from .job import Dead, Job

_REGISTRY: Dict[str, "Task"] = {}
_CURRENT: ContextVar[Optional[Job]] = ContextVar("punctual_current_job", default=None)


def current_job() -> Optional[Job]:
    """The :class:`punctual.Job` whose task runs now (in a task run by
    :func:`dispatch`), else None: RQ's ``get_current_job()``, Celery's
    ``self.request``."""
    return _CURRENT.get()
_DEFAULT: Dict[str, Any] = {}


def configure(client=None, *, producer=None, prefix: Optional[str] = None) -> None:
    """Sets the producer the tasks enqueue through: a Redis client
    (``redis.Redis``, ``redis.cluster.RedisCluster`` or a ``redis.asyncio``
    one, then ``delay*`` return coroutines) or a ready
    :class:`punctual.Producer`. Call it once at start-up (Django: in
    ``AppConfig.ready``)."""
    if (client is None) == (producer is None):
        raise InvalidInput("configure takes a Redis client or a producer (one of them)")
    if producer is None:
        producer = Producer(client, **({"prefix": prefix} if prefix is not None else {}))
    _DEFAULT["producer"] = producer


def _producer():
    p = _DEFAULT.get("producer")
    if p is None:
        raise RuntimeError(
            "punctual: no producer for tasks: call punctual.configure(redis.Redis.from_url(...)) at start-up, "
            "or pass producer= to the task or to with_options"
        )
    return p


def registry() -> Dict[str, "Task"]:
    """The tasks known in this process, by name (a copy)."""
    return dict(_REGISTRY)


def _encode(name: str, args: Sequence, kwargs: dict) -> str:
    try:
        return json.dumps({"task": name, "args": list(args), "kwargs": kwargs},
                          separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidInput(
            f"task {name}: its arguments must be JSON ({e}); pass ids and plain values, not objects "
            "(load the object in the task)"
        ) from None


class _Sender:
    """A task with enqueue options bound (:meth:`Task.with_options`)."""

    def __init__(self, task: "Task", opts: dict):
        self.task, self.opts = task, opts

    def _send(self, args, kwargs, delay_ms=None, at_ms=None):
        o = dict(self.opts)
        producer = o.pop("producer", None) or self.task.producer or _producer()
        payload = _encode(self.task.name, args, kwargs)
        return producer.enqueue(self.task.topic, payload, delay_ms=delay_ms, at_ms=at_ms, **o)

    def delay(self, *args, **kwargs) -> Enqueued:
        """Enqueues a call due now."""
        return self._send(args, kwargs)

    def delay_in(self, delay: Duration, *args, **kwargs) -> Enqueued:
        """Enqueues a call due ``delay`` (a ``timedelta`` or ms) after Redis
        gets it (RQ's ``enqueue_in``, Celery's ``countdown``)."""
        return self._send(args, kwargs, delay_ms=delay)

    def delay_at(self, when: Time, *args, **kwargs) -> Enqueued:
        """Enqueues a call due at ``when`` (an aware ``datetime`` or epoch ms;
        RQ's ``enqueue_at``, Celery's ``eta``)."""
        return self._send(args, kwargs, at_ms=when)

    def apply_async(self, args: Sequence = (), kwargs: Optional[dict] = None, *,
                    countdown: Optional[Duration] = None, eta: Optional[Time] = None,
                    task_id: Optional[str] = None, **options) -> Enqueued:
        """Celery's spelling: ``countdown`` (seconds as a number, or a
        ``timedelta``), ``eta`` (an aware ``datetime``), ``task_id`` (the
        job id). Other Celery options (queue, priority, link, expires in
        Celery's sense, ...) are refused, not ignored."""
        unknown = set(options) - {"max_attempts", "backoff_ms", "expire_ms", "timeout_ms", "group", "replace"}
        if unknown:
            raise InvalidInput(
                f"apply_async: {', '.join(sorted(unknown))} not supported by punctual; supported: countdown, eta, "
                "task_id, max_attempts, backoff_ms, expire_ms, timeout_ms, group, replace"
            )
        if countdown is not None and eta is not None:
            raise InvalidInput("apply_async: give countdown or eta, not both")
        delay = countdown
        if isinstance(countdown, (int, float)) and not isinstance(countdown, bool):
            delay = countdown * 1000.0  # Celery counts seconds
        sender = self if task_id is None and not options else _Sender(
            self.task, {**self.opts, **options, **({"id": task_id} if task_id is not None else {})})
        return sender._send(tuple(args), dict(kwargs or {}), delay_ms=delay, at_ms=eta)


class Task(_Sender):
    """A function registered as a task (:func:`task`). Calling it runs the
    function here and now; ``delay``, ``delay_in``, ``delay_at`` and
    ``apply_async`` enqueue a call for a resident worker."""

    def __init__(self, fn: Callable, *, topic: str, name: Optional[str], max_attempts: Optional[int],
                 backoff: Optional[Iterable[Duration]], timeout: Optional[Duration],
                 expire: Optional[Duration], group: Optional[str], producer):
        self.fn = fn
        self.topic = topic
        self.name = name or f"{fn.__module__}.{fn.__qualname__}"
        self.producer = producer
        opts: dict = {}
        if max_attempts is not None:
            opts["max_attempts"] = max_attempts
        if backoff is not None:
            opts["backoff_ms"] = list(backoff)
        if timeout is not None:
            opts["timeout_ms"] = timeout
        if expire is not None:
            opts["expire_ms"] = expire
        if group is not None:
            opts["group"] = group
        # Checked now, at import, not at the first enqueue.
        from .producer import NewJob, _encode_job, validate_topic
        validate_topic(topic)
        _encode_job(NewJob("", **opts), 1)
        super().__init__(self, opts)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def with_options(self, *, id: Optional[str] = None, producer=None, **options) -> _Sender:
        """The task with enqueue options for one call: ``id`` (the job id:
        an enqueue of a live id is a duplicate, so ``id=f"order:{order_id}"``
        makes the enqueue idempotent), ``replace``, ``max_attempts``,
        ``backoff_ms``, ``expire_ms``, ``timeout_ms``, ``group``, or another
        ``producer``."""
        opts = {**self.opts, **options}
        if id is not None:
            opts["id"] = id
        if producer is not None:
            opts["producer"] = producer
        return _Sender(self, opts)

    def __repr__(self) -> str:
        return f"<punctual task {self.name} on topic {self.topic}>"


def task(fn: Optional[Callable] = None, *, topic: str = "default", name: Optional[str] = None,
         max_attempts: Optional[int] = None, backoff: Optional[Iterable[Duration]] = None,
         timeout: Optional[Duration] = None, expire: Optional[Duration] = None,
         group: Optional[str] = None, producer=None) -> Union[Task, Callable[[Callable], Task]]:
    """Registers ``fn`` as a task: ``@punctual.task`` or
    ``@punctual.task(topic="orders", max_attempts=5, backoff=[...])``.

    ``max_attempts`` and ``backoff`` (ms or timedeltas, one per retry, the
    last repeated) go with each job and override the topic's; ``timeout``,
    ``expire`` and ``group`` are punctual's per-job options. ``fn`` may be
    ``async def`` (run it with :func:`punctual.run_async`)."""

    def wrap(f: Callable) -> Task:
        t = Task(f, topic=topic, name=name, max_attempts=max_attempts, backoff=backoff,
                 timeout=timeout, expire=expire, group=group, producer=producer)
        old = _REGISTRY.get(t.name)
        if old is not None and old.fn is not f and (old.fn.__module__, old.fn.__qualname__) != (
                f.__module__, f.__qualname__):
            raise InvalidInput(f"task name {t.name!r} is taken by {old.fn.__module__}.{old.fn.__qualname__}; "
                               "give one of them another name=")
        _REGISTRY[t.name] = t
        return t

    return wrap(fn) if fn is not None else wrap


_APP_MODULES: Dict[str, Any] = {}


def load(app: Union[str, Iterable[str]]) -> None:
    """Imports the app's task modules (a module name, or several), which
    registers their tasks; their plain module-level functions may be run by
    name too (what :mod:`punctual.rq` enqueues)."""
    for module in [app] if isinstance(app, str) else list(app):
        _APP_MODULES[module] = importlib.import_module(module)


def _resolve(name: str) -> Optional[Callable]:
    t = _REGISTRY.get(name)
    if t is not None:
        return t.fn
    # A plain function of one of the app's modules (RQ's model), and only
    # those: the payload never picks an arbitrary importable callable.
    module, _, attr = name.rpartition(".")
    mod = _APP_MODULES.get(module)
    fn = getattr(mod, attr, None) if mod is not None else None
    if inspect.isfunction(fn) and fn.__module__ == module:
        return fn
    return None


def dispatch(job: Job) -> Any:
    """Runs the task a job names: the handler :func:`punctual.run` uses with
    ``app=``. A payload that is not a task call goes to dead (no retry can
    fix it); an unknown task name is retried (a worker older than the
    producer: it runs once the worker that knows it is deployed), and dies
    after max attempts."""
    try:
        call = json.loads(job.payload)
    except ValueError as e:
        raise Dead(f"not a task call: the payload is not JSON ({e})") from None
    if (not isinstance(call, dict) or not isinstance(call.get("task"), str)
            or not isinstance(call.get("args", []), list) or not isinstance(call.get("kwargs", {}), dict)):
        raise Dead('not a task call: the payload must be {"task": name, "args": [...], "kwargs": {...}}')
    fn = _resolve(call["task"])
    if fn is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise LookupError(f"unknown task {call['task']!r} (tasks registered here: {known}; app modules: "
                          f"{', '.join(_APP_MODULES) or 'none'}); give its module to punctual.run(app=...)")
    token = _CURRENT.set(job)
    try:
        result = fn(*call.get("args", []), **call.get("kwargs", {}))
    finally:
        _CURRENT.reset(token)
    if inspect.isawaitable(result):
        return _with_job(job, result)
    return result


async def _with_job(job: Job, coro):
    token = _CURRENT.set(job)
    try:
        return await coro
    finally:
        _CURRENT.reset(token)


def is_async(app_tasks: Optional[Iterable["Task"]] = None) -> bool:
    """Whether any registered task is ``async def``."""
    return any(inspect.iscoroutinefunction(t.fn) for t in (app_tasks or _REGISTRY.values()))


__all__ = ["Task", "configure", "current_job", "dispatch", "load", "registry", "task"]
