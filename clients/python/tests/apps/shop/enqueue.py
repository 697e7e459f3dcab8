"""Enqueues the shop's jobs the RQ way (and one the Celery way); prints one
JSON line per job: {"id", "status", "what", "delay_ms"}."""

import json
import os
import sys
from datetime import datetime, timedelta, timezone

import redis

import punctual
from punctual.rq import Queue, Retry  # was: from rq import Queue, Retry

from shop import native, tasks

conn = redis.Redis.from_url(os.environ["SHOP_REDIS_URL"])
q = Queue("shop", connection=conn)
punctual.configure(conn)  # was: app = Celery("shop", broker=...)
out = []
for i in range(20):
    delay = timedelta(milliseconds=250 * (i % 5))
    out.append((q.enqueue_in(delay, tasks.close_order, 1000 + i), "close_order", delay))
out.append((q.enqueue(tasks.charge, 7, amount=30, job_id="charge:7", retry=Retry(max=3, interval=[0.1, 0.2])),
            "charge", timedelta(0)))
out.append((q.enqueue(tasks.refund, 8, job_id="refund:8", retry=Retry(max=1, interval=0.1)), "refund",
            timedelta(0)))
out.append((q.enqueue(tasks.crash, 9, job_id="crash:9", retry=Retry(max=2, interval=0.1)), "crash",
            timedelta(0)))
at = datetime.now(timezone.utc) + timedelta(milliseconds=600)
out.append((q.enqueue_at(at, tasks.close_order, 2000, job_id="at:2000"), "close_order", None))
# The duplicate: the same job id again changes nothing.
out.append((q.enqueue(tasks.close_order, 2000, job_id="at:2000"), "close_order", None))
out.append((native.remind.delay_in(timedelta(milliseconds=300), "u1", channel="sms"), "remind",
            timedelta(milliseconds=300)))
out.append((native.remind.with_options(id="remind:flaky").delay("flaky"), "remind", timedelta(0)))
for e, what, delay in out:
    print(json.dumps({"id": e.id, "status": e.status, "what": what,
                      "delay_ms": None if delay is None else delay // timedelta(milliseconds=1)}))
sys.stdout.flush()
