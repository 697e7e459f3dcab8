"""Per-job options (expiry, timeout, group) and schedules
(docs/PROTOCOL.md, "Per-job options" and "Schedules")."""

import json
import os
import time
import unittest
from datetime import timedelta

from common import TESTDATA, client, fresh_prefix

import punctual


def b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


class OptionsTest(unittest.TestCase):
    def setUp(self):
        self.r = client()
        self.prefix = fresh_prefix()
        self.p = punctual.Producer(self.r, prefix=self.prefix)

    def redis_now_ms(self) -> int:
        sec, usec = self.r.time()
        return int(sec) * 1000 + int(usec) // 1000

    def test_the_shared_invalid_options_are_refused_before_redis(self):
        with open(os.path.join(TESTDATA, "invalid_options.json")) as f:
            cases = json.load(f)
        self.assertGreaterEqual(len(cases), 20)
        for case in cases:
            args = dict(case["args"])
            with self.subTest(case=case["message"][:50]):
                with self.assertRaises(punctual.InvalidInput) as cm:
                    if case["kind"] == "enqueue":
                        self.p.enqueue("t", b"x", **args)
                    else:
                        name = args.pop("name")
                        size = args.pop("payload_bytes", 1)
                        self.p.schedule_add("t", name, payload="x" * size, **args)
                self.assertEqual(str(cm.exception), case["message"])
        self.assertEqual(self.r.keys(self.prefix + ":*"), [], "nothing reached Redis")

    def test_options_are_passed_in_the_max_attempts_argument(self):
        # What the script gets: <max>;x<ms>;t<ms>;g<group>, in that order.
        from punctual.producer import _encode_job
        enc = lambda **kw: _encode_job(punctual.NewJob(b"x", **kw), 100)[2]  # noqa: E731
        self.assertEqual(enc(max_attempts=3, expire_ms=3_600_000, timeout_ms=5000, group="shop-17"),
                         "3;x3600000;t5000;gshop-17")
        self.assertEqual(enc(expire_ms=3_600_000), ";x3600000")
        self.assertEqual(enc(group="a.b_c@d-9"), ";ga.b_c@d-9")
        self.assertEqual(enc(max_attempts=2), "2")
        self.assertEqual(enc(), "")
        # The natural duration, and floats in whole ms rounded up.
        self.assertEqual(enc(expire_ms=timedelta(hours=1), timeout_ms=timedelta(seconds=1.5)),
                         ";x3600000;t1500")
        self.assertEqual(enc(expire_ms=1.2, timeout_ms=timedelta(microseconds=1)), ";x2;t1")

    def test_options_read_back_from_what_get_returns(self):
        from punctual.producer import parse_options
        self.assertEqual(parse_options(";ezz;t5000;gshop-17"),
                         {"expires_at_ms": 36 * 36 - 1, "timeout_ms": 5000, "group": "shop-17"})
        self.assertEqual(parse_options(";gops"), {"group": "ops"})
        self.assertEqual(parse_options(";p00-ab-cd-01;sk=a%3Bb%3Ac%25"),
                         {"traceparent": "00-ab-cd-01", "tracestate": "k=a;b:c%"})
        self.assertEqual(parse_options(""), {})

    # ---- needs the enqueue script of the `opts` branch ----------------------

    def test_options_round_trip_into_the_record(self):
        at = self.redis_now_ms() + 60_000
        e = self.p.enqueue("orders", b"pay", id="o1", at_ms=at, max_attempts=3,
                           expire_ms=3_600_000, timeout_ms=5000, group="shop-17")
        self.assertEqual(e.status, "created")
        rec = self.r.hget(self.prefix + ":{orders}:jobs", "o1").decode()
        # x is stored as e<deadline in base 36>: the due time plus the window.
        self.assertEqual(rec.split(":")[0], f"3;e{b36(at + 3_600_000)};t5000;gshop-17")
        info = self.p.get("orders", "o1")
        self.assertEqual((info.state, info.max_attempts, info.due_ms, info.payload), ("pool", 3, at, b"pay"))
        self.assertEqual((info.expires_at_ms, info.timeout_ms, info.group), (at + 3_600_000, 5000, "shop-17"))
        # The topic default attempts, an expiry alone.
        self.p.enqueue("orders", b"pay", id="o2", at_ms=at, expire_ms=timedelta(minutes=1))
        rec = self.r.hget(self.prefix + ":{orders}:jobs", "o2").decode()
        self.assertEqual(rec.split(":")[0], f";e{b36(at + 60_000)}")
        # Without options the record is what it always was.
        self.p.enqueue("orders", b"pay", id="o3", at_ms=at, max_attempts=4)
        rec = self.r.hget(self.prefix + ":{orders}:jobs", "o3").decode()
        self.assertEqual(rec.split(":")[0], "4")
        info = self.p.get("orders", "o3")
        self.assertEqual((info.expires_at_ms, info.timeout_ms, info.group), (None, None, None))

    # ---- trace context (docs/PROTOCOL.md, "Trace context") -------------------

    TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    def test_a_trace_context_round_trips_escaped_through_the_record(self):
        state = "rojo=00f067aa0ba902b7,congo=a:b;c%d"
        self.p.enqueue("orders", b"pay", id="t1", max_attempts=3, group="g1",
                       traceparent=self.TP, tracestate=state)
        rec = self.r.hget(self.prefix + ":{orders}:jobs", "t1").decode()
        self.assertEqual(rec.split(":")[0],
                         f"3;gg1;p{self.TP};srojo=00f067aa0ba902b7,congo=a%3Ab%3Bc%25d")
        info = self.p.get("orders", "t1")
        self.assertEqual((info.traceparent, info.tracestate, info.group), (self.TP, state, "g1"))
        # None given and no OpenTelemetry: nothing stored, no byte more.
        self.p.enqueue("orders", b"pay", id="t2", max_attempts=3)
        self.assertEqual(self.r.hget(self.prefix + ":{orders}:jobs", "t2").decode().split(":")[0], "3")
        self.assertEqual(self.p.get("orders", "t2").traceparent, None)

    def test_the_active_opentelemetry_context_is_taken_when_none_is_given(self):
        import sys
        import types
        from punctual import producer
        other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        # A stand-in for opentelemetry.propagate: inject() writes the
        # current context's headers into the carrier.
        fake_pkg = types.ModuleType("opentelemetry")
        fake = types.ModuleType("opentelemetry.propagate")
        fake.inject = lambda carrier: carrier.update({"traceparent": other, "tracestate": "k=v"})
        fake_pkg.propagate = fake
        saved = {k: sys.modules.get(k) for k in ("opentelemetry", "opentelemetry.propagate")}
        sys.modules.update({"opentelemetry": fake_pkg, "opentelemetry.propagate": fake})
        producer._otel_propagate = None
        try:
            self.p.enqueue("orders", b"x", id="o1")
            self.p.enqueue("orders", b"x", id="o2", traceparent=self.TP)
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
            producer._otel_propagate = None
        o1, o2 = self.p.get("orders", "o1"), self.p.get("orders", "o2")
        self.assertEqual((o1.traceparent, o1.tracestate), (other, "k=v"))
        self.assertEqual((o2.traceparent, o2.tracestate), (self.TP, None), "a given one wins")

    def test_a_resident_job_message_carries_the_trace_context(self):
        job = punctual.Job({"id": "j", "traceparent": self.TP, "tracestate": "k=v"})
        self.assertEqual((job.traceparent, job.tracestate), (self.TP, "k=v"))
        self.assertEqual(punctual.Job({"id": "j"}).traceparent, None)

    # ---- schedules -----------------------------------------------------------

    def listen(self, topic):
        ps = self.r.pubsub(ignore_subscribe_messages=True)
        ps.subscribe(f"{self.prefix}:{{{topic}}}:schedules")
        deadline = time.monotonic() + 5
        while ps.get_message(timeout=0.1) is None and time.monotonic() < deadline:
            pass  # the subscribe confirmation is swallowed; nothing else is sent yet
        return ps

    def published(self, ps):
        """The names published on the topic's schedules channel since the last look."""
        names = []
        while True:
            m = ps.get_message(timeout=0.5)
            if m is None:
                return names
            names.append(m["data"].decode())

    def stored(self, topic, name):
        raw = self.r.hget(f"{self.prefix}:{{{topic}}}:schedules", name)
        return None if raw is None else json.loads(raw)

    def test_schedule_add_writes_the_documented_json_and_publishes(self):
        ps = self.listen("orders")
        before = self.redis_now_ms()
        s = self.p.schedule_add("orders", "close-unpaid", cron="0 */5 * * * *", tz="Europe/Berlin",
                                payload='{"kind":"sweep"}', timeout_ms=60_000, catch_up="latest")
        after = self.redis_now_ms()
        self.assertEqual(self.published(ps), ["close-unpaid"])
        got = self.stored("orders", "close-unpaid")
        self.assertEqual(got, s)
        self.assertTrue(before <= got["created_ms"] <= after, got)
        self.assertEqual(got, {
            "name": "close-unpaid", "cron": "0 */5 * * * *", "tz": "Europe/Berlin",
            "payload": '{"kind":"sweep"}', "options": ";t60000", "catch_up": "latest",
            "spread_ms": None, "paused": False, "created_ms": got["created_ms"],
        })
        # The key order of PROTOCOL.md's example.
        raw = self.r.hget(f"{self.prefix}:{{orders}}:schedules", "close-unpaid").decode()
        self.assertEqual(list(json.loads(raw)), ["name", "cron", "tz", "payload", "options", "catch_up",
                                                 "spread_ms", "paused", "created_ms"])
        # An interval, with options and catch-up spread; no time zone.
        self.p.schedule_add("orders", "tick.5s", every_ms=timedelta(seconds=5), payload="t",
                            max_attempts=2, expire_ms=4000, group="ops", catch_up="spread",
                            spread_ms=600_000)
        self.assertEqual(self.published(ps), ["tick.5s"])
        got = self.stored("orders", "tick.5s")
        self.assertEqual({k: v for k, v in got.items() if k != "created_ms"}, {
            "name": "tick.5s", "every_ms": 5000, "payload": "t", "options": "2;x4000;gops",
            "catch_up": "spread", "spread_ms": 600_000, "paused": False,
        })
        # Defaults: UTC, empty payload and options, catch-up latest.
        self.p.schedule_add("orders", "nightly", cron="0 3 * * *")
        got = self.stored("orders", "nightly")
        self.assertEqual((got["tz"], got["payload"], got["options"], got["catch_up"], got["paused"]),
                         ("UTC", "", "", "all", False))
        self.assertEqual(sorted(s["name"] for s in self.p.schedule_list("orders")),
                         ["close-unpaid", "nightly", "tick.5s"])
        # Only the topic's hash: no job was enqueued, the clients fire nothing.
        self.assertEqual(sorted(k.decode() for k in self.r.keys(self.prefix + ":*")),
                         [f"{self.prefix}:{{orders}}:schedules"])

    def test_schedule_add_again_replaces_it_and_keeps_its_creation_time(self):
        first = self.p.schedule_add("t", "s", every_ms=60_000, payload="a")
        time.sleep(0.01)
        second = self.p.schedule_add("t", "s", every_ms=30_000, payload="b", paused=True)
        self.assertEqual(second["created_ms"], first["created_ms"])
        self.assertEqual(self.stored("t", "s"), second)
        self.assertEqual((second["every_ms"], second["payload"], second["paused"]), (30_000, "b", True))

    def test_schedule_list_pause_resume_remove(self):
        ps = self.listen("t")
        self.assertEqual(self.p.schedule_list("t"), [])
        self.p.schedule_add("t", "b", every_ms=1000)
        self.p.schedule_add("t", "a", cron="*/10 * * * * *")
        self.assertEqual(self.published(ps), ["b", "a"])
        listed = self.p.schedule_list("t")
        self.assertEqual([s["name"] for s in listed], ["a", "b"])
        self.assertEqual(listed[0], self.stored("t", "a"))
        self.assertTrue(self.p.schedule_pause("t", "a"))
        self.assertEqual(self.published(ps), ["a"])
        self.assertIs(self.stored("t", "a")["paused"], True)
        self.assertIs(self.stored("t", "b")["paused"], False)
        self.assertTrue(self.p.schedule_resume("t", "a"))
        self.assertEqual(self.published(ps), ["a"])
        self.assertIs(self.stored("t", "a")["paused"], False)
        self.assertTrue(self.p.schedule_remove("t", "a"))
        self.assertEqual(self.published(ps), ["a"])
        self.assertIsNone(self.stored("t", "a"))
        self.assertEqual([s["name"] for s in self.p.schedule_list("t")], ["b"])
        # Unknown names: False, nothing written or published.
        self.assertFalse(self.p.schedule_remove("t", "a"))
        self.assertFalse(self.p.schedule_pause("t", "nope"))
        self.assertFalse(self.p.schedule_resume("t", "nope"))
        self.assertEqual(self.published(ps), [])
        # The watermark of a removed schedule goes with it.
        self.r.hset(f"{self.prefix}:{{t}}:schedules:last", "b", "1000")
        self.assertTrue(self.p.schedule_remove("t", "b"))
        self.assertFalse(self.r.hexists(f"{self.prefix}:{{t}}:schedules:last", "b"))
        with self.assertRaises(punctual.InvalidInput):
            self.p.schedule_pause("t{x}", "a")

    def fire(self, topic, name, occurrences):
        """Enqueues occurrences as punctual's firer does: id ``name@o``, due
        ``a<o>``, through the enqueue script with the fired key; the
        watermark at the last."""
        k = self.p.partitions(topic)
        for o in occurrences:
            job_id = f"{name}@{o}"
            physical = punctual.producer.partition_name(topic, punctual.partition_of(job_id, k), k)
            self.p._call("enqueue", physical, 65536, 0, 1, job_id, "x", f"a{o}", "", "", fired=True)
        self.r.hset(f"{self.prefix}:{{{topic}}}:schedules:last", name, max(occurrences))

    def fired(self, topic):
        k = self.p.partitions(topic)
        return {m.decode() for i in range(k)
                for m in self.r.zrange(f"{self.prefix}:{{{punctual.producer.partition_name(topic, i, k)}}}:fired", 0, -1)}

    def test_pause_and_remove_take_back_the_occurrences_fired_ahead(self):
        self.r.hset(self.prefix + ":partitions", "hot", "3")
        for topic in ("t", "hot"):
            self.p.schedule_add(topic, "s", every_ms=1000)
            self.p.schedule_add(topic, "other", every_ms=1000)
            now = self.redis_now_ms()
            ahead = [now + 30_000 + i * 1000 for i in range(6)]
            self.fire(topic, "s", [now - 5000] + ahead)
            self.fire(topic, "other", ahead)
            self.assertTrue(self.p.schedule_pause(topic, "s"))
            for o in ahead:
                self.assertIsNone(self.p.get(topic, f"s@{o}"), topic)
                self.assertIsNotNone(self.p.get(topic, f"other@{o}"), topic)
            # Already due: left alone (it may be running).
            self.assertIsNotNone(self.p.get(topic, f"s@{now - 5000}"))
            fired = self.fired(topic)
            self.assertFalse([o for o in ahead if f"s@{o}" in fired], "taken back: may fire again")
            self.assertIn(f"s@{now - 5000}", fired)
            wm = int(self.r.hget(f"{self.prefix}:{{{topic}}}:schedules:last", "s"))
            self.assertTrue(now <= wm < ahead[0], (now, wm))
            # Remove takes back too; a resume does not.
            self.assertTrue(self.p.schedule_resume(topic, "s"))
            self.assertTrue(self.p.schedule_remove(topic, "other"))
            for o in ahead:
                self.assertIsNone(self.p.get(topic, f"other@{o}"), topic)
            self.assertFalse(self.r.exists(f"{self.prefix}:{{{topic}}}:schedules:lock"))
            # A new timing takes back what the old one fired ahead.
            self.fire(topic, "s", [o + 500 for o in ahead])
            self.p.schedule_add(topic, "s", every_ms=1000)
            self.assertIsNotNone(self.p.get(topic, f"s@{ahead[0] + 500}"), "same timing: kept")
            self.p.schedule_add(topic, "s", every_ms=2000)
            self.assertIsNone(self.p.get(topic, f"s@{ahead[0] + 500}"), "new timing: taken back")

    def test_a_partitioned_topic_keeps_its_schedules_under_the_topic(self):
        self.r.hset(self.prefix + ":partitions", "hot", "3")
        self.p.schedule_add("hot", "s", every_ms=60_000)
        self.assertIsNotNone(self.stored("hot", "s"))
        self.assertEqual([s["name"] for s in self.p.schedule_list("hot")], ["s"])


if __name__ == "__main__":
    unittest.main()
