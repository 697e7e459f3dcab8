"""Enqueues jobs through the Python producer for the end-to-end tests.

Usage: e2e_produce.py TOPIC < jobs, one JSON object per line:
{"payload": "...", "payload_hex": "...", "id": ..., "delay_ms": ..., "max_attempts": ..., and
any other field of NewJob (at_ms, expire_ms, timeout_ms, group)}
Prints one JSON line per job: {"id": ..., "status": ...}. With
PUNCTUAL_TEST_CLUSTER_URLS (comma-separated), it talks to a Redis Cluster. The payloads go
in one enqueue_batch call (or enqueue, for a single line).
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import redis  # noqa: E402

import punctual  # noqa: E402


def main() -> None:
    topic = sys.argv[1]
    seeds = os.environ.get("PUNCTUAL_TEST_CLUSTER_URLS")
    if seeds:  # a Redis Cluster: any node's URL finds the others
        from redis.cluster import RedisCluster

        client = RedisCluster.from_url(seeds.split(",")[0])
    else:
        client = redis.Redis.from_url(os.environ["PUNCTUAL_TEST_REDIS_URL"])
    producer = punctual.Producer(client)
    jobs = []
    for line in sys.stdin:
        spec = json.loads(line)
        payload = bytes.fromhex(spec.pop("payload_hex")) if "payload_hex" in spec else spec.pop("payload")
        jobs.append(punctual.NewJob(payload, **spec))
    if len(jobs) == 1:
        j = jobs[0]
        out = [producer.enqueue(topic, j.payload, id=j.id, delay_ms=j.delay_ms, at_ms=j.at_ms,
                                max_attempts=j.max_attempts, backoff_ms=j.backoff_ms,
                                expire_ms=j.expire_ms, timeout_ms=j.timeout_ms, group=j.group)]
    else:
        out = producer.enqueue_batch(topic, jobs)
    for e in out:
        print(json.dumps({"id": e.id, "status": e.status}))


if __name__ == "__main__":
    main()
