"""timedelta and datetime wherever a duration or a time is taken; the
asyncio producer; LOADING retried."""

import asyncio
import json
import socket
import threading
import unittest
from datetime import datetime, timedelta, timezone
from urllib.parse import urlparse

import redis
import redis.asyncio

from common import REDIS_URL, client, fresh_prefix

import punctual


class TimesTest(unittest.TestCase):
    def setUp(self):
        self.r = client()
        self.prefix = fresh_prefix()
        self.p = punctual.Producer(self.r, prefix=self.prefix)

    def test_timedelta_and_aware_datetime_are_taken_everywhere(self):
        self.p.enqueue("t", "x", id="td", delay_ms=timedelta(minutes=30),
                       backoff_ms=[timedelta(seconds=1), timedelta(milliseconds=1.5), 250])
        info = self.p.get("t", "td")
        self.assertIn(info.due_ms - info.created_ms, (1_800_000, 1_800_001))
        self.assertIn(b":1000,2,250:0:x", self.r.hget(f"{self.prefix}:{{t}}:jobs", "td"))
        now_ms = int(self.r.time()[0]) * 1000
        at = datetime.fromtimestamp((now_ms + 3_600_000) / 1000, tz=timezone(timedelta(hours=8)))
        self.p.enqueue("t", "x", id="dt", at_ms=at)
        self.assertEqual(self.p.get("t", "dt").due_ms, now_ms + 3_600_000)
        self.assertEqual(self.p.reschedule("t", "dt", delay_ms=timedelta(hours=2)), "pool")
        later = self.p.get("t", "dt")
        self.assertGreaterEqual(later.due_ms, later.now_ms + 7_200_000 - 5)
        self.assertEqual(self.p.reschedule("t", "dt", at_ms=at + timedelta(minutes=1)), "pool")
        self.assertEqual(self.p.get("t", "dt").due_ms, now_ms + 3_660_000)

    def test_a_naive_datetime_or_a_timedelta_as_a_time_is_refused(self):
        for at, msg in (
            (datetime(2030, 1, 1, 12, 0), "invalid due time 2030-01-01T12:00:00: a datetime without a time zone "
             "is ambiguous; give an aware one (datetime.now(timezone.utc), django.utils.timezone.now())"),
            (timedelta(minutes=1), "invalid due time datetime.timedelta(seconds=60): give epoch milliseconds "
             "as a number or a datetime"),
        ):
            with self.assertRaises(punctual.InvalidInput) as cm:
                self.p.enqueue("t", "x", at_ms=at)
            self.assertEqual(str(cm.exception), msg)
        self.assertEqual(self.r.keys(self.prefix + ":*"), [])


class AsyncProducerTest(unittest.TestCase):
    def test_the_same_methods_awaited_on_redis_asyncio(self):
        prefix = fresh_prefix()

        async def main():
            ar = redis.asyncio.Redis.from_url(REDIS_URL)
            p = punctual.Producer(ar, prefix=prefix)  # an asyncio client: an AsyncProducer
            self.assertIsInstance(p, punctual.AsyncProducer)
            e = await p.enqueue("t", '{"n": 1}', id="a1", delay_ms=timedelta(minutes=5), max_attempts=3)
            self.assertEqual((e.id, e.status), ("a1", "created"))
            self.assertEqual((await p.enqueue("t", "again", id="a1")).status, "duplicate")
            batch = await p.enqueue_batch("t", [{"payload": "b", "id": "a2"}, punctual.NewJob("c")])
            self.assertEqual([b.status for b in batch], ["created", "created"])
            info = await p.get("t", "a1")
            self.assertEqual((info.state, info.max_attempts, info.payload), ("pool", 3, b'{"n": 1}'))
            self.assertEqual(await p.reschedule("t", "a1", delay_ms=0), "pool")
            self.assertEqual(await p.cancel("t", "a2", by="async"), "ready")
            entry = json.loads(await ar.lindex(f"{prefix}:audit", 0))
            self.assertEqual((entry["who"], entry["detail"]), ("async", {"id": "a2", "was": "ready"}))
            self.assertIsNone(await p.get("t", "a2"))
            self.assertEqual(await p.partitions("t"), 1)
            added = await p.schedule_add("t", "tick", every_ms=timedelta(minutes=1), payload="p")
            self.assertEqual(added["every_ms"], 60_000)
            self.assertEqual([s["name"] for s in await p.schedule_list("t")], ["tick"])
            self.assertTrue(await p.schedule_pause("t", "tick"))
            self.assertTrue(await p.schedule_remove("t", "tick"))
            await ar.aclose()

        asyncio.run(main())
        # What the async producer wrote is what the sync one reads.
        sync = punctual.Producer(client(), prefix=prefix)
        self.assertEqual(sync.get("t", "a1").state, "ready")


class LoadingProxy:
    """A TCP proxy to the test Redis that answers the first ``n`` commands
    with ``-LOADING`` (as Redis does while it reads its dataset), then
    forwards everything."""

    def __init__(self, n: int):
        self.left = n
        self.refused = 0
        u = urlparse(REDIS_URL)
        self.target = (u.hostname, u.port or 6379)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"redis://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        up = socket.create_connection(self.target)
        threading.Thread(target=self._pipe, args=(up, c), daemon=True).start()
        while True:
            data = c.recv(65536)
            if not data:
                up.close()
                return
            # One command per read here (the client waits for each reply).
            if self.left > 0 and not data.startswith(b"*1\r\n$4\r\nPING") and b"HELLO" not in data \
                    and b"CLIENT" not in data:
                self.left -= 1
                self.refused += 1
                c.sendall(b"-LOADING Redis is loading the dataset in memory\r\n")
                continue
            up.sendall(data)

    @staticmethod
    def _pipe(src, dst):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                dst.close()
                return
            dst.sendall(data)


class LoadingTest(unittest.TestCase):
    def test_loading_is_waited_out_and_retried(self):
        prefix = fresh_prefix()
        proxy = LoadingProxy(4)
        p = punctual.Producer(redis.Redis.from_url(proxy.url), prefix=prefix)
        e = p.enqueue("t", "x", id="l1")
        self.assertEqual((e.id, e.status), ("l1", "created"))
        self.assertEqual(proxy.refused, 4)
        self.assertEqual(punctual.Producer(client(), prefix=prefix).get("t", "l1").state, "ready")

        proxy = LoadingProxy(3)

        async def main():
            ap = punctual.AsyncProducer(redis.asyncio.Redis.from_url(proxy.url), prefix=prefix)
            return await ap.enqueue("t", "y", id="l2")

        self.assertEqual(asyncio.run(main()).status, "created")
        self.assertEqual(proxy.refused, 3)

    def test_loading_past_the_bound_is_an_error_that_says_so(self):
        from punctual import producer as mod
        proxy = LoadingProxy(10**9)
        p = punctual.Producer(redis.Redis.from_url(proxy.url), prefix=fresh_prefix())
        saved, mod.LOADING_WAIT_S = mod.LOADING_WAIT_S, 0.3
        try:
            with self.assertRaises(redis.exceptions.BusyLoadingError) as cm:
                p.enqueue("t", "x", id="never")
        finally:
            mod.LOADING_WAIT_S = saved
        self.assertIn("Redis was still loading its dataset after", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
