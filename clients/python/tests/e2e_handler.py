"""The resident handler used by the tests (the fake driver of test_worker.py
and the end-to-end tests of crates/punctual-cli/tests/clients.rs).

What it does depends on the payload, a JSON object {"do": ...}:
ok (default), print (junk on stdout and stderr), retry (Retry with
"delay_ms"), dead, raise (ValueError), hang (first attempt: sleeps until
killed), slow (sleeps "ms"), once (a side effect through job.once, then a
retry on the first attempt). Every delivery is recorded with RPUSH on
$E2E_KEY:seen (default e2e:TOPIC:seen): id, attempt, due_ms, Redis TIME in ms, pid, the payload in hex.
"""

import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import redis  # noqa: E402

import punctual  # noqa: E402

r = redis.Redis.from_url(os.environ["PUNCTUAL_TEST_REDIS_URL"])
print("e2e_handler: booting", os.getpid())  # stdout is free for the program


def handle(job: punctual.Job) -> None:
    try:
        spec = job.json()
    except ValueError:
        spec = {}
    if not isinstance(spec, dict):
        spec = {}
    do = spec.get("do", "ok")
    sec, usec = r.time()
    seen = {
        "id": job.id, "topic": job.topic, "attempt": job.attempt,
        "max_attempts": job.max_attempts, "due_ms": job.due_ms,
        "created_ms": job.created_ms, "timeout_ms": job.timeout_ms,
        "now_ms": int(sec) * 1000 + int(usec) // 1000, "pid": os.getpid(),
        "payload_hex": job.payload.hex(), "do": do,
        "traceparent": job.traceparent, "tracestate": job.tracestate,
    }
    key = os.environ.get("E2E_KEY") or f"e2e:{job.topic}"
    if do == "print":
        print('{"type":"done","id":"not-a-reply"}')
        print("junk on stdout", flush=True)
        print("junk on stderr", file=sys.stderr, flush=True)
    elif do == "hang" and job.attempt == 1:
        r.rpush(key + ":hung", json.dumps(seen))
        time.sleep(3600)
    elif do == "slow":
        r.rpush(key + ":started", json.dumps(seen))
        time.sleep(spec.get("ms", 1000) / 1000)
    elif do == "once":
        job.once(r, "count", 600, lambda: r.incr(key + ":once:" + job.id))
        if job.attempt == 1:
            r.rpush(key + ":seen", json.dumps(seen))
            raise punctual.Retry("after the step", 0)
    r.rpush(key + ":seen", json.dumps(seen))
    if do == "retry":
        raise punctual.Retry("asked to retry", spec.get("delay_ms"))
    if do == "dead":
        raise punctual.Dead("asked to die")
    if do == "raise":
        raise ValueError("boom")


async def handle_async(job: punctual.Job) -> None:
    """The same, in a thread, so that run_async runs several at once."""
    await asyncio.to_thread(handle, job)


if __name__ == "__main__":
    if os.environ.get("E2E_ASYNC"):  # the asyncio loop, E2E_INFLIGHT jobs at once
        asyncio.run(punctual.run_async(handle_async, inflight=int(os.environ.get("E2E_INFLIGHT", "4"))))
    else:
        punctual.run(handle)
    print("e2e_handler: EOF, exiting", os.getpid())
