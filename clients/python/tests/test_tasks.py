"""The task API (@punctual.task, punctual.rq) and the dispatcher, without serve."""

import json
import unittest
from datetime import datetime, timedelta, timezone

from common import client, fresh_prefix

import punctual
from punctual import tasks
from punctual.rq import Queue, Retry


@punctual.task(topic="mail", max_attempts=5, backoff=[timedelta(seconds=10), 60_000])
def send_mail(to, *, subject=""):
    return ("sent", to, subject, punctual.current_job().id)


def plain(x):
    return x * 2


class TaskTest(unittest.TestCase):
    def setUp(self):
        self.prefix = fresh_prefix()
        self.r = client()
        self.p = punctual.Producer(self.r, prefix=self.prefix)
        punctual.configure(producer=self.p)

    def payload(self, topic, job_id):
        return json.loads(self.p.get(topic, job_id).payload)

    def test_delay_in_at_and_apply_async_write_a_json_call_with_the_task_options(self):
        e = send_mail.with_options(id="m1").delay_in(timedelta(minutes=30), "a@b.c", subject="hi")
        self.assertEqual((e.id, e.status), ("m1", "created"))
        info = self.p.get("mail", "m1")
        self.assertEqual(json.loads(info.payload),
                         {"task": "test_tasks.send_mail", "args": ["a@b.c"], "kwargs": {"subject": "hi"}})
        self.assertEqual(info.max_attempts, 5)
        self.assertIn(info.due_ms - info.created_ms, (1_800_000, 1_800_001))
        self.assertIn(b":10000,60000:", self.r.hget(f"{self.prefix}:{{mail}}:jobs", "m1"))
        at = datetime.now(timezone.utc) + timedelta(hours=1)
        send_mail.with_options(id="m2").delay_at(at, "x")
        self.assertEqual(self.p.get("mail", "m2").due_ms, -(-int(at.timestamp() * 1_000_000) // 1000))
        send_mail.apply_async(args=["y"], kwargs={"subject": "s"}, countdown=90, task_id="m3")
        info = self.p.get("mail", "m3")
        self.assertIn(info.due_ms - info.created_ms, (90_000, 90_001))
        self.assertEqual(send_mail.with_options(id="m3").delay("again").status, "duplicate")
        # Called directly, it is the function.
        self.assertEqual(send_mail.__name__, "send_mail")

    def test_with_an_asyncio_producer_delay_returns_an_awaitable(self):
        import asyncio
        import redis.asyncio
        from common import REDIS_URL

        async def main():
            ar = redis.asyncio.Redis.from_url(REDIS_URL)
            punctual.configure(ar, prefix=self.prefix)
            e = await send_mail.with_options(id="am1").delay_in(timedelta(seconds=5), "z")
            await ar.aclose()
            return e

        self.assertEqual(asyncio.run(main()).status, "created")
        self.assertEqual(self.payload("mail", "am1")["args"], ["z"])

    def test_what_punctual_does_not_have_is_refused_not_ignored(self):
        with self.assertRaises(punctual.InvalidInput) as cm:
            send_mail.apply_async(args=["y"], queue="high", priority=9)
        self.assertIn("priority, queue not supported by punctual", str(cm.exception))
        with self.assertRaises(punctual.InvalidInput) as cm:
            send_mail.delay(object())
        self.assertIn("its arguments must be JSON", str(cm.exception))
        q = Queue("rq", producer=self.p)
        for kw in ({"depends_on": "x"}, {"result_ttl": 5}, {"at_front": True}):
            with self.assertRaises(punctual.InvalidInput):
                q.enqueue(plain, 1, **kw)
        with self.assertRaises(punctual.InvalidInput):
            q.enqueue(lambda: 1)
        self.assertEqual(self.r.keys(self.prefix + ":*"), [])

    def test_rq_queue_takes_retry_job_id_and_times(self):
        q = Queue("rq", producer=self.p)
        q.enqueue(plain, 21, job_id="p1", retry=Retry(max=3, interval=[1, 2.5]), job_timeout=30)
        info = self.p.get("rq", "p1")
        self.assertEqual((info.max_attempts, info.timeout_ms), (4, 30_000))
        self.assertIn(b":1000,2500:", self.r.hget(f"{self.prefix}:{{rq}}:jobs", "p1"))
        self.assertEqual(self.payload("rq", "p1"), {"task": "test_tasks.plain", "args": [21], "kwargs": {}})
        q.enqueue_in(timedelta(seconds=5), plain, 1, job_id="p2")
        info = self.p.get("rq", "p2")
        self.assertIn(info.due_ms - info.created_ms, (5000, 5001))

    def test_dispatch_runs_registered_tasks_and_app_functions_only(self):
        tasks.load("test_tasks")

        def job(payload, job_id="j"):
            return punctual.Job({"id": job_id, "payload": json.dumps(payload)})

        self.assertEqual(tasks.dispatch(job({"task": "test_tasks.send_mail", "args": ["t"]}, "j9")),
                         ("sent", "t", "", "j9"))
        self.assertEqual(tasks.dispatch(job({"task": "test_tasks.plain", "args": [4]})), 8)
        self.assertIsNone(punctual.current_job())
        # Not an app function: os.system is importable, never runnable by name.
        with self.assertRaises(LookupError) as cm:
            tasks.dispatch(job({"task": "os.system", "args": ["true"]}))
        self.assertIn("unknown task 'os.system'", str(cm.exception))
        with self.assertRaises(punctual.Dead):
            tasks.dispatch(punctual.Job({"id": "j", "payload": "not json"}))
        with self.assertRaises(punctual.Dead):
            tasks.dispatch(job({"args": []}))


if __name__ == "__main__":
    unittest.main()
