"""punctual for Python: a producer for punctual's Redis layout and the
resident handler loop of ``punctual serve`` (docs/RESIDENT.md).

    import punctual, redis
    producer = punctual.Producer(redis.Redis.from_url("redis://127.0.0.1:6379"))
    producer.enqueue("orders", '{"order": 10086}', id="order:10086", delay_ms=1_800_000)

    def handle(job: punctual.Job) -> None:
        order = job.json()
        ...

    punctual.run(handle)   # under punctual serve: resident = ["python3", "worker.py"]
"""

from .producer import (
    AsyncProducer,
    DEFAULT_MAX_PAYLOAD,
    DEFAULT_PREFIX,
    Enqueued,
    JobInfo,
    NewJob,
    PartialBatch,
    Producer,
    current_trace_context,
    generate_id,
)
from .validate import (
    Duration,
    InvalidInput,
    encode_options,
    partition_of,
    validate_group,
    validate_id,
    validate_topic,
    validate_traceparent,
    validate_tracestate,
)
from .tasks import Task, configure, current_job, task
from .worker import Dead, Job, NotUnderServe, Retry, Worker, once_key, run, run_async

__all__ = [
    "AsyncProducer", "DEFAULT_MAX_PAYLOAD", "DEFAULT_PREFIX", "Dead", "Duration", "Enqueued", "InvalidInput", "Job",
    "JobInfo", "NewJob", "NotUnderServe", "PartialBatch", "Producer", "Retry", "Task", "Worker", "configure", "current_job", "task", "current_trace_context", "encode_options",
    "generate_id", "once_key", "partition_of", "run", "run_async", "validate_group", "validate_id",
    "validate_topic", "validate_traceparent", "validate_tracestate",
]
__version__ = "0.3.0"
