"""Enqueues N jobs one Producer.enqueue call each (payloads payload-<n>, no
options), as a web app enqueues one job per request; prints the loop's
seconds. The Python side of clients/php/bench/single-enqueue.sh and of the
bench's client-enqueue phase. Usage:

    PUNCTUAL_REDIS_URL=redis://host:port [PUNCTUAL_PREFIX=punctual] PYTHONPATH=clients/python python3 enqueue_each.py TOPIC N
"""
import os
import sys
import time

import redis

import punctual

client = redis.Redis.from_url(os.environ.get("PUNCTUAL_REDIS_URL", "redis://127.0.0.1:6379"))
producer = punctual.Producer(client, prefix=os.environ.get("PUNCTUAL_PREFIX") or "punctual")
topic = sys.argv[1] if len(sys.argv) > 1 else "enqueue-each"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
t0 = time.perf_counter()
for i in range(n):
    producer.enqueue(topic, "payload-%08d" % i)
print("%.6f" % (time.perf_counter() - t0))
