"""Order jobs, written for RQ: plain functions, enqueued by shop/enqueue.py."""

import json
import os

import redis

from punctual.rq import get_current_job  # was: from rq import get_current_job

r = redis.Redis.from_url(os.environ["SHOP_REDIS_URL"])


def _record(what, arg):
    # The test's instrumentation: every run, with Redis's clock.
    job = get_current_job()
    sec, usec = r.time()
    r.rpush("shop:ran", json.dumps({
        "what": what, "arg": arg, "id": job.id, "attempt": job.attempt, "due_ms": job.due_ms, "created_ms": job.created_ms,
        "now_ms": int(sec) * 1000 + int(usec) // 1000, "pid": os.getpid(),
    }))


def close_order(order_id):
    _record("close_order", order_id)


def charge(order_id, amount=0):
    _record("charge", order_id)
    if get_current_job().attempt < 3:
        raise ConnectionError("payment gateway unreachable")


def refund(order_id):
    _record("refund", order_id)
    raise ValueError("card declined")


def crash(order_id):
    _record("crash", order_id)
    if get_current_job().attempt == 1:
        os._exit(3)  # the interpreter dies mid-job
