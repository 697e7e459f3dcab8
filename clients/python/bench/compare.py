"""The Python client's figures in the same run as compare-bullmq.js's:
enqueue one at a time (``task.delay_in``), in batches of 1,000
(``Producer.enqueue_batch`` of the same JSON task calls), and a worker
draining due jobs under ``punctual serve`` (``python -m punctual``, one
program) at 1 and 8 in flight.

    python3 bench/compare.py PORT PUNCTUAL_BIN > results.jsonl

PORT: an empty redis-server you do not care about (it is FLUSHALLed).
Env: N1 (3000), N2 (20000), N3 (5000).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import redis  # noqa: E402

import punctual  # noqa: E402
from punctual.tasks import _encode  # noqa: E402

N1, N2, N3 = (int(os.environ.get(k, d)) for k, d in (("N1", 3000), ("N2", 20000), ("N3", 5000)))


def main():
    port, binary = int(sys.argv[1]), sys.argv[2]
    os.environ.update(PORT=str(port), N3=str(N3))
    import bench_tasks

    admin = redis.Redis(port=port)
    producer = punctual.Producer(redis.Redis(port=port))
    punctual.configure(producer=producer)
    emit = lambda o: print(json.dumps({"system": "punctual-python", **o}), flush=True)  # noqa: E731
    data = {"action": "close", "pad": "x" * 60}

    admin.flushall()
    t0 = time.perf_counter()
    for i in range(N1):
        bench_tasks.close.delay_in(timedelta(hours=1), i, **data)
    emit({"phase": "enqueue one at a time", "n": N1, "jobs_per_s": round(N1 / (time.perf_counter() - t0))})

    admin.flushall()
    t0 = time.perf_counter()
    for i in range(0, N2, 1000):
        producer.enqueue_batch("bench", [punctual.NewJob(_encode("bench_tasks.close", [i + j], data),
                                                         delay_ms=3_600_000) for j in range(1000)])
    emit({"phase": "enqueue batch 1000", "n": N2, "jobs_per_s": round(N2 / (time.perf_counter() - t0))})

    for inflight in (1, 8):
        admin.flushall()
        name = "bench_tasks.close" if inflight == 1 else "bench_tasks.close_async"
        for i in range(0, N3, 1000):
            producer.enqueue_batch("bench", [punctual.NewJob(_encode(name, [i + j], data))
                                             for j in range(min(1000, N3 - i))])
        with tempfile.TemporaryDirectory() as d:
            argv = [sys.executable, "-m", "punctual", "bench_tasks"] + (["--inflight", "8"] if inflight > 1 else [])
            with open(os.path.join(d, "punctual.toml"), "w") as f:
                f.write(f'redis = "redis://127.0.0.1:{port}"\nworkers = 1\n\n[topics.bench]\n'
                        f"resident = {json.dumps(argv)}\ncwd = {json.dumps(HERE)}\nprocesses = 1\n"
                        f'env = {{ PORT = "{port}", N3 = "{N3}", PYTHONPATH = {json.dumps(os.path.dirname(HERE))} }}\n')
            serve = subprocess.Popen([binary, "serve", "--config", os.path.join(d, "punctual.toml")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.time() + 300
            while not admin.get("bench:end") and time.time() < deadline:
                time.sleep(0.02)
            start, end = int(admin.get("bench:start") or 0), int(admin.get("bench:end") or 0)
            emit({"phase": f"worker in flight {inflight}", "n": N3, "ok": end > 0,
                  "jobs_per_s": round(N3 / ((end - start) / 1000)) if end else None})
            serve.terminate()
            serve.wait()


if __name__ == "__main__":
    main()
