"""Tasks used by compare.py's worker phases (run by punctual serve as
``python -m punctual bench_tasks``)."""

import os
import time

import redis

import punctual

r = redis.Redis(port=int(os.environ["PORT"]))
TOTAL = int(os.environ["N3"])


@punctual.task(topic="bench")
def close(n, action="close", pad=""):
    r.set("bench:start", str(int(time.time() * 1000)), nx=True)
    if r.incr("bench:done") == TOTAL:
        r.set("bench:end", str(int(time.time() * 1000)))


@punctual.task(topic="bench")
async def close_async(n, action="close", pad=""):
    close(n, action, pad)
