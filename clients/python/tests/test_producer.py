import json
import os
import socket
import subprocess
import time
import unittest
import zlib

from common import BIN, REDIS_URL, TESTDATA, client, fresh_prefix

import punctual


class ProducerTest(unittest.TestCase):
    def setUp(self):
        self.r = client()
        self.prefix = fresh_prefix()
        self.p = punctual.Producer(self.r, prefix=self.prefix)

    def keys_written(self):
        return self.r.keys(self.prefix + ":*")

    def cli(self, *args):
        """The punctual binary on the same Redis and prefix, --json."""
        if not BIN:
            self.skipTest("PUNCTUAL_BIN not set")
        out = subprocess.run([BIN, "--redis", REDIS_URL, "--prefix", self.prefix, "--json", *args],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    def test_a_call_the_script_refuses_does_not_list_the_topic(self):
        # The script fails on a key of the wrong type: nothing is written,
        # not even the topic's name in P:topics.
        self.r.set(self.prefix + ":{broken}:jobs", "not a hash")
        with self.assertRaises(Exception):
            self.p.enqueue("broken", b"x", id="a")
        self.assertFalse(self.r.sismember(self.prefix + ":topics", "broken"))
        self.p.enqueue("fine", b"x", id="a")
        self.assertTrue(self.r.sismember(self.prefix + ":topics", "fine"))

    def test_enqueue_created_duplicate_replaced_and_get(self):
        payload = b'\xff\x00:colons:{"x":1}'  # not UTF-8, with colons: must round-trip
        e = self.p.enqueue("orders", payload, id="order:1", delay_ms=60_000, max_attempts=3,
                           backoff_ms=[1000, 2000])
        self.assertEqual(e, punctual.Enqueued("order:1", "created"))
        self.assertEqual(self.p.enqueue("orders", b"other", id="order:1").status, "duplicate")
        info = self.p.get("orders", "order:1")
        self.assertEqual(info.state, "pool")
        self.assertEqual(info.payload, payload)
        self.assertEqual(info.max_attempts, 3)
        # Redis's clock rounded up to the ms: the delay, or 1 ms more.
        self.assertIn(info.due_ms - info.created_ms, (60_000, 60_001))
        self.assertEqual(info.attempts, 0)
        self.assertIsNone(info.last_error)
        self.assertTrue(self.r.sismember(self.prefix + ":topics", "orders"))
        # The Rust library reads what the client wrote.
        if BIN:
            got = self.cli("get", "orders", "order:1")
            self.assertEqual(got["state"], "pool")
            self.assertEqual(got["max_attempts"], 3)
            self.assertEqual(got["due_ms"], info.due_ms)
        e = self.p.enqueue("orders", "now", id="order:1", replace=True)
        self.assertEqual(e.status, "replaced")
        info = self.p.get("orders", "order:1")
        self.assertEqual((info.state, info.payload, info.max_attempts), ("ready", b"now", 6))

    def test_re_enqueue_of_a_dead_id_says_dead(self):
        self.p.enqueue("orders", b"a", id="order:9", delay_ms=60_000)
        # Moved to dead as fail would (record kept, in the dead set only). A
        # minute ahead is within cold_after (10 min): the job is in the pool ZSET.
        self.assertEqual(self.r.zrem(self.prefix + ":{orders}:pool", "order:9"), 1)
        self.r.zadd(self.prefix + ":{orders}:dead", {"order:9": 1000})
        e = self.p.enqueue("orders", b"b", id="order:9")
        self.assertEqual(e.status, "dead")
        self.assertTrue(e.is_dead)
        self.assertTrue(e.is_duplicate)
        out = self.p.enqueue_batch("orders", [punctual.NewJob("c", id="order:9"), punctual.NewJob("d", id="new")])
        self.assertEqual([o.status for o in out], ["dead", "created"])
        info = self.p.get("orders", "order:9")
        self.assertEqual((info.state, info.payload), ("dead", b"a"))
        self.assertEqual(self.p.enqueue("orders", b"e", id="order:9", replace=True).status, "replaced")

    def test_generated_id_and_absolute_time(self):
        now_ms = int(self.r.time()[0]) * 1000
        e = self.p.enqueue("t", "x", at_ms=now_ms + 3_600_000)
        self.assertEqual(e.status, "created")
        self.assertRegex(e.id, r"^[0-9a-z]{12}$")
        self.assertEqual(self.p.get("t", e.id).due_ms, now_ms + 3_600_000)
        # A time in the past means due now.
        self.assertEqual(self.p.get("t", self.p.enqueue("t", "y", at_ms=1000).id).state, "ready")

    def test_batch_dedups_in_order_and_splits_calls_of_1000(self):
        out = self.p.enqueue_batch("t", [
            punctual.NewJob("a", id="a"), {"payload": "b", "id": "a"}, punctual.NewJob("c", delay_ms=5000),
        ])
        self.assertEqual([o.status for o in out], ["created", "duplicate", "created"])
        self.assertEqual(out[1].id, "a")
        self.assertEqual(self.p.get("t", "a").payload, b"a")
        big = self.p.enqueue_batch("big", [punctual.NewJob(str(i)) for i in range(2500)])
        self.assertEqual(len({b.id for b in big}), 2500)
        self.assertEqual(self.r.hlen(f"{self.prefix}:{{big}}:jobs"), 2500)

    def test_batch_shared_forms_ids_and_statuses_as_the_script_wrote_them(self):
        # The form each call sent (ARGV[3]), as the Rust library picks it.
        sent, call = [], self.p._g_call

        def spy(name, physical, *argv, **kw):
            if name == "enqueue":
                sent.append(str(argv[2]))
            return (yield from call(name, physical, *argv, **kw))

        self.p._g_call = spy
        p, k = self.p, lambda key: f"{self.prefix}:{{s}}:{key}"
        # =*n: every id generated, jobs alike (the reply: -1 and the first id).
        out = p.enqueue_batch("s", [punctual.NewJob(f"g{i}") for i in range(100)])
        self.assertEqual(sent.pop(), "=*100")
        self.assertEqual(len({e.id for e in out}), 100)
        for i, e in enumerate(out):
            info = p.get("s", e.id)
            self.assertEqual((e.status, info.payload, info.state), ("created", f"g{i}".encode(), "ready"))
        # ~*n: generated, a delay each.
        out = p.enqueue_batch("s", [punctual.NewJob(f"d{i}", delay_ms=60_000 * (i + 1)) for i in range(10)])
        self.assertEqual(sent.pop(), "~*10")
        due = []
        for i, e in enumerate(out):
            info = p.get("s", e.id)
            self.assertEqual((e.status, info.payload, info.state), ("created", f"d{i}".encode(), "pool"))
            due.append(info.due_ms)
        self.assertEqual(due, sorted(set(due)))
        self.assertGreaterEqual(due[9] - due[0], 9 * 60_000)
        # =*n with a per-job option (the reply lists every id).
        out = p.enqueue_batch("s", [punctual.NewJob("o1", group="g1"), punctual.NewJob("o2", group="g1")])
        self.assertEqual(sent.pop(), "=*2")
        self.assertEqual([(p.get("s", e.id).payload, p.get("s", e.id).group) for e in out],
                         [(b"o1", "g1"), (b"o2", "g1")])
        # =n, ids given and one generated: statuses of the jobs not created.
        p.enqueue("s", "x", id="live")
        p.enqueue("s", "y", id="gone")
        self.assertEqual(self.r.zrem(k("ready"), "gone"), 1)
        self.r.zadd(k("dead"), {"gone": 1000})
        sent.clear()
        out = p.enqueue_batch("s", [punctual.NewJob("1", id="live"), punctual.NewJob("2", id="fresh"),
                                    punctual.NewJob("3", id="gone"), punctual.NewJob("4")])
        self.assertEqual(sent.pop(), "=4")
        self.assertEqual([e.status for e in out], ["duplicate", "created", "dead", "created"])
        self.assertEqual([e.id for e in out[:3]], ["live", "fresh", "gone"])
        self.assertEqual([p.get("s", e.id).payload for e in out], [b"x", b"2", b"y", b"4"])
        # =n, all ids given (the reply lists none), with replace.
        out = p.enqueue_batch("s", [punctual.NewJob("r1", id="live"), punctual.NewJob("r2", id="fresh")], replace=True)
        self.assertEqual(sent.pop(), "=2")
        self.assertEqual(out, [punctual.Enqueued("live", "replaced"), punctual.Enqueued("fresh", "replaced")])
        self.assertEqual(p.get("s", "live").payload, b"r1")
        # ~n: ids given, a time each.
        out = p.enqueue_batch("s", [punctual.NewJob("t1", id="t1", delay_ms=60_000), punctual.NewJob("t2", id="t2")])
        self.assertEqual(sent.pop(), "~2")
        self.assertEqual(out, [punctual.Enqueued("t1", "created"), punctual.Enqueued("t2", "created")])
        self.assertEqual([p.get("s", "t1").state, p.get("s", "t2").state], ["pool", "ready"])
        # Jobs that differ in max attempts, and one job: the five-argument form.
        out = p.enqueue_batch("s", [punctual.NewJob("m1", max_attempts=2), punctual.NewJob("m2", max_attempts=3)])
        self.assertEqual(sent.pop(), "2")
        self.assertEqual([p.get("s", e.id).max_attempts for e in out], [2, 3])
        self.assertEqual(p.enqueue("s", "one").status, "created")
        self.assertEqual(sent.pop(), "1")

    def test_invalid_input_is_refused_before_redis_with_the_library_messages(self):
        with open(os.path.join(TESTDATA, "invalid.json")) as f:
            cases = json.load(f)
        for case in cases:
            with self.subTest(case=case["message"][:40]):
                kw = {"id": case["id"]} if "id" in case else {}
                if "id_hex" in case:
                    # Bytes that are not UTF-8, as Python hands them over
                    # (os.fsdecode, sys.argv): lone surrogates.
                    kw["id"] = bytes.fromhex(case["id_hex"]).decode("utf-8", "surrogateescape")
                if "max_attempts" in case:
                    kw["max_attempts"] = case["max_attempts"]
                payload = b"x" * case.get("payload_bytes", 1)
                with self.assertRaises(punctual.InvalidInput) as cm:
                    self.p.enqueue(case["topic"], payload, **kw)
                self.assertEqual(str(cm.exception), case["message"])
        with self.assertRaises(punctual.InvalidInput) as cm:
            self.p.enqueue_batch("t", [punctual.NewJob("ok"), punctual.NewJob("x", max_attempts=0)])
        self.assertEqual(str(cm.exception),
                         "job 2: invalid max attempts 0: max attempts must be at least 1 and at most 10000")
        refused = [
            (dict(delay_ms=-5), "invalid delay -5ms: delays may not be negative"),
            (dict(delay_ms=315_360_000_001), "invalid delay 315360000s: delays are at most ten years"),
            (dict(at_ms=-1), "invalid due time: before 1970; give a time after the epoch"),
            (dict(backoff_ms=[1000, 315_360_001_000]), "invalid backoff step 315360001s: steps are at most ten years"),
            (dict(delay_ms=1, at_ms=1), "give a delay or a due time, not both"),
            (dict(backoff_ms=5000), "backoff must be a list of delays (milliseconds or timedeltas)"),
            (dict(delay_ms=float("nan")), "invalid delay nan: give milliseconds as a number or a timedelta"),
            (dict(delay_ms="60000"), "invalid delay '60000': give milliseconds as a number or a timedelta"),
            (dict(max_attempts=3.0), "invalid max attempts 3.0: give an integer from 1 to 10000"),
        ]
        for kw, msg in refused:
            with self.assertRaises(punctual.InvalidInput) as cm:
                self.p.enqueue("t", "x", **kw)
            self.assertEqual(str(cm.exception), msg)
        for bad in ("", "a{b"):
            with self.assertRaises(punctual.InvalidInput):
                punctual.Producer(self.r, prefix=bad)
        self.assertEqual(self.keys_written(), [], "nothing may reach Redis")
        # What only the script can check comes back as InvalidInput too.
        now_ms = int(self.r.time()[0]) * 1000
        with self.assertRaises(punctual.InvalidInput) as cm:
            self.p.enqueue("t", "x", at_ms=now_ms + 20 * 365 * 86400 * 1000)
        self.assertEqual(str(cm.exception), "job 1: due time more than ten years ahead")

    def test_float_times_are_sent_as_whole_ms_rounded_up(self):
        # The scripts take plain decimal digits only; a float is rounded up
        # (never early), so 1.5e3 ms and 60000.0 ms reach Redis as integers.
        self.p.enqueue("t", "x", id="f1", delay_ms=60_000.0, backoff_ms=[1000.0, 1.5e3, 0.25])
        self.p.enqueue("t", "x", id="f2", delay_ms=59_999.2)
        for job_id in ("f1", "f2"):
            info = self.p.get("t", job_id)
            self.assertIn(info.due_ms - info.created_ms, (60_000, 60_001))
        record = self.r.hget(f"{self.prefix}:{{t}}:jobs", "f1")
        self.assertIn(b":1000,1500,1:0:x", record)
        now_ms = int(self.r.time()[0]) * 1000
        self.p.enqueue("t", "x", id="f3", at_ms=now_ms + 3_600_000.4)
        self.assertEqual(self.p.get("t", "f3").due_ms, now_ms + 3_600_001)
        # Time passes between the reschedule and the get: bound the due time
        # by Redis's clock before the reschedule (floored) and at the get.
        sec, usec = self.r.time()
        t0 = int(sec) * 1000 + int(usec) // 1000
        self.assertEqual(self.p.reschedule("t", "f3", delay_ms=120_000.5), "pool")
        info = self.p.get("t", "f3")
        self.assertGreaterEqual(info.due_ms, t0 + 120_001)
        self.assertLessEqual(info.due_ms, info.now_ms + 120_002)
        with self.assertRaises(punctual.InvalidInput):
            punctual.Producer(self.r, prefix=self.prefix, max_payload=65536.0)

    def test_a_stale_cached_partition_count_never_strands_a_job(self):
        # The producer reads the count (1) and caches it...
        self.assertEqual(self.p.enqueue("hot", "x", id="first").status, "created")
        self.assertEqual(self.p.cancel("hot", "first"), "ready")
        # ...then the topic (empty) is split into 3 by the Rust library.
        if not BIN:
            self.skipTest("PUNCTUAL_BIN not set")
        subprocess.run([BIN, "--redis", REDIS_URL, "--prefix", self.prefix, "partitions", "hot", "3"],
                       check=True, capture_output=True)
        # A producer that read the count just before the change: its cache
        # still says 1 (kept fresh here, so the test does not race the 1 s).
        self.p._partitions["hot"] = (1, time.monotonic())
        ids = [i for i in (f"order:{n}" for n in range(40)) if zlib.crc32(i.encode()) % 3 != 0][:6]
        out = self.p.enqueue_batch("hot", [punctual.NewJob("p", id=i) for i in ids])
        self.assertEqual([o.status for o in out], ["created"] * len(ids))
        for i in ids:
            part = zlib.crc32(i.encode()) % 3
            self.assertTrue(self.r.hexists(f"{self.prefix}:{{hot#{part}}}:jobs", i), i)
        self.assertEqual(self.r.hlen(f"{self.prefix}:{{hot}}:jobs"), 0, "nothing in the old layout")
        self.assertEqual(self.p.partitions("hot"), 3)
        # One job alone, routed the same way.
        self.p._partitions["hot"] = (1, time.monotonic())
        single = next(i for i in (f"single:{n}" for n in range(40)) if zlib.crc32(i.encode()) % 3 != 0)
        self.assertEqual(self.p.enqueue("hot", "q", id=single).status, "created")
        part = zlib.crc32(single.encode()) % 3
        self.assertTrue(self.r.hexists(f"{self.prefix}:{{hot#{part}}}:jobs", single))
        subprocess.run([BIN, "--redis", REDIS_URL, "--prefix", self.prefix, "check", "hot"], check=True,
                       capture_output=True)

    def test_noscript_is_handled(self):
        self.r.script_flush()
        self.assertEqual(self.p.enqueue("t", "x", id="1").status, "created")
        self.r.script_flush()
        self.assertEqual(self.p.get("t", "1").state, "ready")

    def test_cancel_and_reschedule(self):
        self.p.enqueue("t", "x", id="j", delay_ms=3_600_000)
        self.assertEqual(self.p.reschedule("t", "j"), "pool")
        self.assertEqual(self.p.get("t", "j").state, "ready")
        self.assertEqual(self.p.reschedule("t", "j", delay_ms=60_000), "ready")
        info = self.p.get("t", "j")
        self.assertEqual(info.state, "pool")
        self.assertEqual(self.p.cancel("t", "j"), "pool")
        self.assertIsNone(self.p.cancel("t", "j"))
        self.assertIsNone(self.p.get("t", "j"))
        self.assertIsNone(self.p.reschedule("t", "j"))

    def test_a_cancel_is_in_the_audit_trail_as_the_clis(self):
        self.p.enqueue("t", "x", id="a")
        self.p.enqueue("t", "x", id="b")
        self.assertEqual(self.p.cancel("t", "a"), "ready")
        self.assertEqual(self.p.cancel("t", "b", by="billing"), "ready")
        self.assertIsNone(self.p.cancel("t", "a"))  # found nothing: changed nothing, not recorded
        trail = [json.loads(e) for e in self.r.lrange(f"{self.prefix}:audit", 0, -1)]
        for e in trail:
            self.assertAlmostEqual(e.pop("at_ms") / 1000, time.time(), delta=60)
        me = f"{socket.gethostname()}/{os.getpid()}"
        self.assertEqual(trail, [
            {"who": "billing", "from": me, "action": "cancel", "topic": "t", "detail": {"id": "b", "was": "ready"}},
            {"who": "python", "from": me, "action": "cancel", "topic": "t", "detail": {"id": "a", "was": "ready"}},
        ])
        with self.assertRaises(punctual.InvalidInput):
            self.p.cancel("t", "b", by=7)
        if BIN:
            out = subprocess.run([BIN, "--redis", REDIS_URL, "--prefix", self.prefix, "--json", "audit"],
                                 check=True, capture_output=True).stdout
            self.assertEqual([(e["who"], e["detail"]["id"]) for e in json.loads(out)],
                             [("billing", "b"), ("python", "a")])

    def test_a_job_due_far_ahead_waits_cold_in_its_minutes_bucket(self):
        # docs/PROTOCOL.md "The cold pool": due at least cold_after (10 min
        # by default) ahead, a job waits in P:{T}:c:<minute>, not in the
        # pool ZSET; get, reschedule and cancel still call it pool.
        def k(name):
            return f"{self.prefix}:{{t}}:{name}"

        def cold_n():
            return int(self.r.hget(k("meta"), "cold_n") or 0)

        # A topic gets cold jobs once a scheduler ticked on it (its first
        # tick writes cold_at): one tick, as `punctual serve` runs at start.
        if not BIN:
            self.skipTest("PUNCTUAL_BIN not set")
        tick = subprocess.run([BIN, "script", "tick"], capture_output=True, text=True, check=True).stdout
        names = ("pool", "ready", "running", "dead", "jobs", "meta", "stats", "seq", "attempts")
        self.r.eval(tick, 9, *[k(n) for n in names], 1000, 1000000, 1000)
        self.p.enqueue("t", "x", id="far", delay_ms=3_600_000)
        self.p.enqueue("t", "x", id="near", delay_ms=60_000)
        far = self.p.get("t", "far")
        self.assertEqual(far.state, "pool")
        start = far.due_ms - far.due_ms % 60_000
        self.assertIsNone(self.r.zscore(k("pool"), "far"))
        self.assertEqual(self.r.lrange(k(f"c:{start}"), 0, -1), [b"far"])
        self.assertEqual(self.r.zrange(k("cold"), 0, -1), [str(start).encode()])
        self.assertEqual(cold_n(), 1)
        near = self.p.get("t", "near")
        self.assertEqual(self.r.zscore(k("pool"), "near"), near.due_ms)
        if BIN:
            got = self.cli("get", "t", "far")
            self.assertEqual((got["state"], got["due_ms"]), ("pool", far.due_ms))
            self.cli("check", "t")  # exits non-zero on a problem
        # Rescheduled within W: in the pool ZSET, no longer cold.
        self.assertEqual(self.p.reschedule("t", "far", delay_ms=120_000), "pool")
        self.assertEqual(self.r.zscore(k("pool"), "far"), self.p.get("t", "far").due_ms)
        self.assertEqual(cold_n(), 0)
        # Far again, then cancelled.
        self.assertEqual(self.p.reschedule("t", "far", delay_ms=7_200_000), "pool")
        again = self.p.get("t", "far")
        self.assertEqual(again.state, "pool")
        self.assertIsNone(self.r.zscore(k("pool"), "far"))
        self.assertIn(b"far", self.r.lrange(k(f"c:{again.due_ms - again.due_ms % 60_000}"), 0, -1))
        self.assertEqual(cold_n(), 1)
        self.assertEqual(self.p.cancel("t", "far"), "pool")
        self.assertIsNone(self.p.get("t", "far"))
        self.assertEqual(cold_n(), 0)

    def test_partitioned_topic_routes_by_crc32_and_makes_ids(self):
        self.r.hset(self.prefix + ":partitions", "hot", 3)
        out = self.p.enqueue_batch("hot", [punctual.NewJob(str(i)) for i in range(60)])
        for e in out:
            self.assertRegex(e.id, r"^[0-9a-z]{21}$")
            part = zlib.crc32(e.id.encode()) % 3
            self.assertTrue(self.r.hexists(f"{self.prefix}:{{hot#{part}}}:jobs", e.id))
        self.assertEqual(len({zlib.crc32(e.id.encode()) % 3 for e in out}), 3)
        self.p.enqueue("hot", "given", id="order:10086", delay_ms=60_000)
        self.assertEqual(self.p.get("hot", "order:10086").payload, b"given")
        self.assertEqual(self.p.reschedule("hot", "order:10086"), "pool")
        self.assertEqual(self.p.cancel("hot", "order:10086"), "ready")
        self.assertEqual(self.r.smembers(self.prefix + ":topics"), {b"hot"})
        if BIN:
            # punctual check finds every id in the partition it maps to.
            subprocess.run([BIN, "--redis", REDIS_URL, "--prefix", self.prefix, "check", "hot"], check=True,
                           capture_output=True)


if __name__ == "__main__":
    unittest.main()
