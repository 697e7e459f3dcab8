#!/usr/bin/env python3
"""An exec handler for `punctual serve`: close an unpaid order.

punctual runs this once per job: the payload on stdin, the job's metadata in
the environment. Exit 0: done. Exit 65: permanent failure (straight to the
dead set). Anything else: retry with backoff; the end of stderr is kept as
the job's last error.
"""
import json
import os
import sys

job = json.loads(sys.stdin.read() or "{}")
order = job.get("order")
if order is None:
    print("payload has no \"order\" field", file=sys.stderr)
    sys.exit(65)

attempt = os.environ["PUNCTUAL_ATTEMPT"]
late = os.environ.get("PUNCTUAL_LATENESS_MS", "?")
print(f"closing unpaid order {order} (job {os.environ['PUNCTUAL_JOB_ID']}, "
      f"attempt {attempt}, {late} ms after its due time)", flush=True)
