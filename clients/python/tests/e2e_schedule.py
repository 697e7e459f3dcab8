"""Schedule operations through the Python producer, for
crates/punctual-cli/tests/clients.rs.

Usage: e2e_schedule.py TOPIC < ops, one JSON object per line:
{"op": "add", "name": ..., "spec": {cron, every_ms, tz, payload, ...}},
{"op": "pause"|"resume"|"remove", "name": ...} or {"op": "list"}.
Prints one JSON line per op: {"result": ...}. With
PUNCTUAL_TEST_CLUSTER_URLS (comma-separated), it talks to a Redis Cluster.
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
    if seeds:
        from redis.cluster import RedisCluster

        client = RedisCluster.from_url(seeds.split(",")[0])
    else:
        client = redis.Redis.from_url(os.environ["PUNCTUAL_TEST_REDIS_URL"])
    p = punctual.Producer(client)
    for line in sys.stdin:
        op = json.loads(line)
        kind = op["op"]
        if kind == "add":
            result = p.schedule_add(topic, op["name"], **op.get("spec", {}))
        elif kind == "list":
            result = p.schedule_list(topic)
        else:
            result = getattr(p, "schedule_" + kind)(topic, op["name"])
        print(json.dumps({"result": result}), flush=True)


if __name__ == "__main__":
    main()
