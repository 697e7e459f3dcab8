"""The resident loop against a fake driver: this test plays punctual serve's
side of docs/RESIDENT.md over fds 3 and 4."""

import base64
import fcntl
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import unittest

from common import HERE, REDIS_URL, client, fresh_prefix

import punctual


class ReplyTest(unittest.TestCase):
    def test_a_retry_delay_is_whole_ms_rounded_up(self):
        from punctual.worker import reply_for
        self.assertEqual(reply_for("j", punctual.Retry("later", 1500.2))["delay_ms"], 1501)
        self.assertEqual(reply_for("j", punctual.Retry("later", 250))["delay_ms"], 250)
        self.assertEqual(reply_for("j", punctual.Retry("later", -5))["delay_ms"], 0)
        # Not a number: left to the topic's backoff ladder, not a crash.
        self.assertNotIn("delay_ms", reply_for("j", punctual.Retry("later", float("nan"))))
        self.assertNotIn("delay_ms", reply_for("j", punctual.Retry("later", "soon")))


class FakeServe:
    """Starts a program with a job pipe on its fd 3 and a reply pipe on fd 4."""

    def __init__(self, argv, env=None):
        jr, jw = os.pipe()
        rr, rw = os.pipe()
        # Above 10, so the dup2 to 3 and 4 in the child cannot clobber them.
        hi_jr, hi_rw = fcntl.fcntl(jr, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(rw, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(jr)
        os.close(rw)

        def child_fds():
            os.dup2(hi_jr, 3)  # inheritable
            os.dup2(hi_rw, 4)

        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            close_fds=False, preexec_fn=child_fds, env={**os.environ, "PUNCTUAL_PROTOCOL": "1", **(env or {})},
        )
        os.close(hi_jr)
        os.close(hi_rw)
        self.jobs = os.fdopen(jw, "w", buffering=1)
        self.replies = os.fdopen(rr, "r")

    def read(self):
        line = self.replies.readline()
        if not line:
            raise AssertionError("fd 4 closed; stderr: " + self.proc.stderr.read().decode())
        return json.loads(line)

    def send(self, msg):
        self.jobs.write(json.dumps(msg) + "\n")

    def send_together(self, *msgs):
        """The lines in one write (under PIPE_BUF: atomic), so the program
        reads them in one read."""
        data = "".join(json.dumps(m) + "\n" for m in msgs).encode()
        assert len(data) <= 4096
        self.jobs.flush()
        os.write(self.jobs.fileno(), data)

    def job(self, job_id, payload=None, payload_b64=None, attempt=1):
        msg = {"type": "job", "id": job_id, "topic": "faketopic", "attempt": attempt, "max_attempts": 5,
               "due_ms": 1000, "created_ms": 900, "timeout_ms": 30000}
        if payload_b64 is not None:
            msg["payload_b64"] = payload_b64
        else:
            msg["payload"] = payload if isinstance(payload, str) else json.dumps(payload)
        self.send(msg)
        return self.read()

    def close(self):
        if not self.jobs.closed:
            self.jobs.close()
        out, err = self.proc.communicate(timeout=30)
        self.replies.close()
        return self.proc.returncode, out.decode(), err.decode()


class WorkerLoopTest(unittest.TestCase):
    def test_replies_for_each_outcome_and_exit_on_eof(self):
        r = client()
        r.delete("e2e:faketopic:seen", "e2e:faketopic:once:o")
        fake = FakeServe([sys.executable, os.path.join(HERE, "e2e_handler.py")],
                         {"PUNCTUAL_TEST_REDIS_URL": REDIS_URL})
        self.assertEqual(fake.read(), {"type": "ready", "protocol": 1, "inflight": 1, "lookahead": 16})
        self.assertEqual(fake.job("a", {"do": "ok"}), {"type": "done", "id": "a"})
        self.assertEqual(fake.job("p", {"do": "print"}), {"type": "done", "id": "p"})
        self.assertEqual(fake.job("r", {"do": "retry", "delay_ms": 1500}),
                         {"type": "retry", "id": "r", "error": "asked to retry", "delay_ms": 1500})
        self.assertEqual(fake.job("r2", {"do": "retry"}),
                         {"type": "retry", "id": "r2", "error": "asked to retry"})
        self.assertEqual(fake.job("d", {"do": "dead"}), {"type": "dead", "id": "d", "error": "asked to die"})
        self.assertEqual(fake.job("x", {"do": "raise"}), {"type": "retry", "id": "x", "error": "ValueError: boom"})
        fake.send({"type": "something-later", "id": "zz"})  # unknown types are ignored
        raw = b"\xff\x00bin"
        self.assertEqual(fake.job("b", payload_b64=base64.b64encode(raw).decode()), {"type": "done", "id": "b"})
        self.assertEqual(fake.job("u", "caf\u00e9 \u2603"), {"type": "done", "id": "u"})
        # once: the side effect runs on the first attempt only.
        self.assertEqual(fake.job("o", {"do": "once"})["type"], "retry")
        self.assertEqual(fake.job("o", {"do": "once"}, attempt=2), {"type": "done", "id": "o"})
        self.assertEqual(r.get("e2e:faketopic:once:o"), b"1")
        code, out, err = fake.close()
        self.assertEqual(code, 0, err)
        self.assertIn("junk on stdout", out)
        self.assertIn('{"type":"done","id":"not-a-reply"}', out)
        self.assertIn("junk on stderr", err)
        self.assertIn("EOF, exiting", out)
        seen = {json.loads(s)["id"]: json.loads(s) for s in r.lrange("e2e:faketopic:seen", 0, -1)}
        self.assertEqual(bytes.fromhex(seen["b"]["payload_hex"]), raw)
        self.assertEqual(bytes.fromhex(seen["u"]["payload_hex"]), "caf\u00e9 \u2603".encode())
        self.assertEqual((seen["a"]["attempt"], seen["a"]["max_attempts"], seen["a"]["due_ms"],
                          seen["a"]["created_ms"], seen["a"]["timeout_ms"]), (1, 5, 1000, 900, 30000))

    def test_outside_serve_it_says_what_to_do(self):
        code = ("import sys; sys.path.insert(0, %r); import punctual; punctual.run(lambda j: None)"
                % os.path.dirname(HERE))
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PUNCTUAL_PROTOCOL": "1", "PUNCTUAL_JOBS_FD": "97",
                                "PUNCTUAL_REPLIES_FD": "98"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("fd 97 is not open: run this program under `punctual serve`", p.stderr)

    def test_run_by_hand_with_fds_3_and_4_open_it_refuses(self):
        # A shell or the interpreter may leave fds 3 and 4 open: only
        # PUNCTUAL_PROTOCOL (set by serve) says they are serve's pipes.
        code = ("import sys, asyncio; sys.path.insert(0, %r); import punctual; %%s; print('ran')"
                % os.path.dirname(HERE))
        env = {k: v for k, v in os.environ.items() if k != "PUNCTUAL_PROTOCOL"}
        for call in ("punctual.run(lambda j: None)",
                     "asyncio.run(punctual.run_async(lambda j: None))"):
            r3, w3 = os.pipe()
            r4, w4 = os.pipe()
            os.close(w3)  # fd 3 reads EOF at once: a silent exit 0 before
            hi3, hi4 = fcntl.fcntl(r3, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(w4, fcntl.F_DUPFD_CLOEXEC, 10)

            def fds():
                os.dup2(hi3, 3)
                os.dup2(hi4, 4)

            try:
                p = subprocess.run([sys.executable, "-c", code % call], capture_output=True, text=True,
                                   env=env, timeout=30, preexec_fn=fds, close_fds=False)
            finally:
                for fd in (r3, r4, w4, hi3, hi4):
                    os.close(fd)
            self.assertNotEqual(p.returncode, 0, call)
            self.assertEqual(p.stdout, "", call)
            self.assertIn("PUNCTUAL_PROTOCOL is not set: this program is a resident handler; "
                          "run it under `punctual serve`", p.stderr)


CANCEL_HANDLER = """
import sys, time
sys.path.insert(0, %r)
import punctual

def handle(job):
    print("start", job.id, flush=True)
    if job.text == "wait":
        # Until cancelled (at most 20 s), looking between steps.
        deadline = time.monotonic() + 20
        while not job.cancelled():
            if time.monotonic() > deadline:
                raise punctual.Dead("never cancelled")
            time.sleep(0.01)
        raise punctual.Retry("stopped: " + job.id)
    if job.text == "block":
        # Long enough for the driver to write what comes next.
        time.sleep(0.5)

punctual.run(handle)
print("EOF, exiting", flush=True)
"""


class CancelTest(unittest.TestCase):
    def test_the_running_job_sees_its_cancel_and_no_line_is_lost(self):
        fake = FakeServe([sys.executable, "-c", CANCEL_HANDLER % os.path.dirname(HERE)])
        self.assertEqual(fake.read(), {"type": "ready", "protocol": 1, "inflight": 1, "lookahead": 16})
        # A cancel for a job already answered, and one for another id, while
        # a job runs: ignored; the job's own cancel ends it.
        self.assertEqual(fake.job("a", "x"), {"type": "done", "id": "a"})
        fake.send({"type": "cancel", "id": "a"})
        fake.send({"type": "job", "id": "w", "payload": "wait"})
        self.assertEqual([fake.proc.stdout.readline() for _ in range(2)], [b"start a\n", b"start w\n"])
        fake.send({"type": "cancel", "id": "other"})
        fake.send({"type": "cancel", "id": "w"})
        self.assertEqual(fake.read(), {"type": "retry", "id": "w", "error": "stopped: w"})
        # Lines read by the handler's look for cancels are kept: the job
        # sent while "wait2" runs is handled after it, and a job cancelled
        # before it started is not started.
        fake.send({"type": "job", "id": "w2", "payload": "wait"})
        self.assertEqual(fake.proc.stdout.readline(), b"start w2\n")
        fake.send({"type": "job", "id": "n", "payload": "x"})
        fake.send({"type": "job", "id": "gone", "payload": "x"})
        fake.send({"type": "cancel", "id": "gone"})
        fake.send({"type": "cancel", "id": "w2"})
        self.assertEqual(fake.read(), {"type": "retry", "id": "w2", "error": "stopped: w2"})
        self.assertEqual(fake.read(), {"type": "done", "id": "n"})
        self.assertEqual(fake.read(), {"type": "retry", "id": "gone",
                                       "error": "RuntimeError: cancelled by an operator"})
        # A job that never looks: its cancel is harmless, its reply as usual.
        fake.send({"type": "job", "id": "b", "payload": "block"})
        self.assertEqual([fake.proc.stdout.readline() for _ in range(2)], [b"start n\n", b"start b\n"])
        fake.send({"type": "cancel", "id": "b"})
        self.assertEqual(fake.read(), {"type": "done", "id": "b"})
        self.assertEqual(fake.job("c", "x"), {"type": "done", "id": "c"})
        # A job line the loop cannot read is answered where it is read.
        self.assertEqual(fake.job("bad", payload_b64="abc")["type"], "retry")
        code, out, err = fake.close()
        self.assertEqual(code, 0, err)
        self.assertEqual([l.split()[1] for l in out.splitlines() if l.startswith("start")],
                         ["c"])
        self.assertIn("EOF, exiting", out)

    def test_a_job_not_run_by_the_loop_is_not_cancelled(self):
        self.assertFalse(punctual.Job({"id": "j", "payload": ""}).cancelled())


LOOKAHEAD_HANDLER = """
import os, sys, time
sys.path.insert(0, %r)
import punctual

def handle(job):
    print("start", job.id, job.start_by_us, flush=True)
    if job.text.startswith("hold:"):
        # Until the driver creates the file; fd 3 is not looked at meanwhile.
        while not os.path.exists(job.text[5:]):
            time.sleep(0.005)

if sys.argv[1] == "default":
    punctual.run(handle)
else:
    punctual.run(handle, lookahead=int(sys.argv[1]))
print("EOF, exiting", flush=True)
"""


def job_msg(job_id, payload="x", **extra):
    return {"type": "job", "id": job_id, "topic": "t", "attempt": 1, "max_attempts": 5, "due_ms": 1,
            "created_ms": 1, "timeout_ms": 30000, "payload": payload, **extra}


def now_us():
    return time.monotonic_ns() // 1000


class LookaheadTest(unittest.TestCase):
    """docs/RESIDENT.md, "Look-ahead": the sequential loop's side."""

    def start(self, lookahead="default"):
        fake = FakeServe([sys.executable, "-c", LOOKAHEAD_HANDLER % os.path.dirname(HERE), str(lookahead)])
        self.addCleanup(lambda: fake.proc.poll() is None and fake.proc.kill())
        return fake

    def started(self, out):
        return [l.split()[1] for l in out.splitlines() if l.startswith("start ")]

    def flag(self):
        """A path that does not exist yet: the driver creates it to let a "hold:" job return."""
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        return os.path.join(d.name, "go")

    def first_stdout_line(self, fake):
        """The program's first line on stdout; fails rather than hangs when
        none comes (the first read of the pipe: nothing is buffered yet)."""
        if not select.select([fake.proc.stdout], [], [], 20)[0]:
            raise AssertionError("no line on stdout within 20 s")
        return fake.proc.stdout.readline()

    def test_the_handshake_says_lookahead_16_by_default_and_none_when_0(self):
        for arg, ready in (("default", {"type": "ready", "protocol": 1, "inflight": 1, "lookahead": 16}),
                           (64, {"type": "ready", "protocol": 1, "inflight": 1, "lookahead": 64}),
                           (0, {"type": "ready", "protocol": 1, "inflight": 1})):
            fake = self.start(arg)
            self.assertEqual(fake.read(), ready, arg)
            self.assertEqual(fake.job("j"), {"type": "done", "id": "j"})
            code, out, err = fake.close()
            self.assertEqual(code, 0, err)

    def test_a_job_past_its_start_by_is_answered_skip_and_not_started(self):
        fake = self.start()
        fake.read()
        t = now_us()
        fake.send_together(job_msg("late", start_by_us=t - 1_000_000), job_msg("soon", start_by_us=t + 60_000_000),
                           job_msg("plain"))
        self.assertEqual([fake.read() for _ in range(3)],
                         [{"type": "skip", "id": "late"}, {"type": "done", "id": "soon"},
                          {"type": "done", "id": "plain"}])
        code, out, err = fake.close()
        self.assertEqual(code, 0, err)
        self.assertIn(f"start soon {t + 60_000_000}\n", out)
        self.assertIn("start plain None\n", out)
        self.assertEqual(self.started(out), ["soon", "plain"])

    def test_start_by_is_checked_when_the_job_would_start_not_when_it_was_read(self):
        fake = self.start()
        fake.read()
        flag = self.flag()
        start_by = now_us() + 200_000
        fake.send_together(job_msg("hold", "hold:" + flag), job_msg("next", start_by_us=start_by), job_msg("after"))
        self.assertEqual(self.first_stdout_line(fake), b"start hold None\n")
        while now_us() <= start_by:
            time.sleep(0.01)  # the job waits (read) behind "hold" past its start_by
        open(flag, "w").close()
        self.assertEqual([fake.read() for _ in range(3)],
                         [{"type": "done", "id": "hold"}, {"type": "skip", "id": "next"},
                          {"type": "done", "id": "after"}])
        code, out, err = fake.close()
        self.assertEqual(code, 0, err)
        self.assertEqual(self.started(out), ["after"])  # after "hold", read above

    def test_a_cancel_read_in_the_same_read_as_its_job_stops_its_start(self):
        fake = self.start()
        fake.read()
        fake.send_together(job_msg("a"), {"type": "cancel", "id": "a"}, job_msg("b"))
        self.assertEqual(fake.read(), {"type": "retry", "id": "a", "error": "RuntimeError: cancelled by an operator"})
        self.assertEqual(fake.read(), {"type": "done", "id": "b"})
        code, out, err = fake.close()
        self.assertEqual(code, 0, err)
        self.assertEqual(self.started(out), ["b"])

    def test_a_cancel_written_while_the_job_before_runs_stops_a_job_already_read(self):
        # "c" is read with "hold" (one write, one read); its cancel comes
        # while "hold" runs without looking at fd 3: the loop must read fd 3
        # before starting "c".
        fake = self.start()
        fake.read()
        flag = self.flag()
        fake.send_together(job_msg("hold", "hold:" + flag), job_msg("c"))
        self.assertEqual(self.first_stdout_line(fake), b"start hold None\n")
        fake.send({"type": "cancel", "id": "c"})
        open(flag, "w").close()
        self.assertEqual(fake.read(), {"type": "done", "id": "hold"})
        self.assertEqual(fake.read(), {"type": "retry", "id": "c", "error": "RuntimeError: cancelled by an operator"})
        self.assertEqual(fake.job("d"), {"type": "done", "id": "d"})
        code, out, err = fake.close()
        self.assertEqual(code, 0, err)
        self.assertEqual(self.started(out), ["d"])  # after "hold", read above

    def test_waiting_for_a_job_blocks_without_spinning(self):
        fake = self.start()
        fake.read()

        def cpu_ticks():
            with open(f"/proc/{fake.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime + stime

        before = cpu_ticks()
        time.sleep(1)
        # A loop that polled fd 3 without blocking would burn about 100 ticks.
        self.assertLess(cpu_ticks() - before, 20)
        self.assertEqual(fake.job("j"), {"type": "done", "id": "j"})
        fake.close()

    def test_an_invalid_lookahead_is_refused_before_the_handshake(self):
        for bad in (-1, 65, True, "16", 1.0):
            with self.assertRaisesRegex(ValueError, "lookahead must be an integer from 0 to 64"):
                punctual.Worker(lambda job: None, lookahead=bad)
        fake = self.start(65)
        self.assertEqual(fake.replies.readline(), "")  # fd 4 closed with no handshake
        code, out, err = fake.close()
        self.assertNotEqual(code, 0)
        self.assertIn("ValueError: lookahead must be an integer from 0 to 64", err)

    def test_python_dash_m_punctual_takes_lookahead(self):
        # The tasks app of tests/apps/shop, run as serve's config names it.
        apps = os.path.join(HERE, "apps")
        env = {"PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), apps]), "SHOP_REDIS_URL": REDIS_URL}
        for args, ready in (([], {"type": "ready", "protocol": 1, "inflight": 1, "lookahead": 16}),
                            (["--lookahead", "0"], {"type": "ready", "protocol": 1, "inflight": 1})):
            fake = FakeServe([sys.executable, "-m", "punctual", *args, "shop.tasks"], env=env)
            self.assertEqual(fake.read(), ready, args)
            fake.jobs.close()
            code, out, err = fake.close()
            self.assertEqual(code, 0, err)

    def test_a_job_keeps_its_start_by(self):
        self.assertEqual(punctual.Job({"id": "j", "payload": "", "start_by_us": 123456789}).start_by_us, 123456789)
        self.assertIsNone(punctual.Job({"id": "j", "payload": ""}).start_by_us)


ASYNC_HANDLER = """
import asyncio, sys
sys.path.insert(0, %r)
import punctual

async def handle(job):
    spec = job.text
    if spec.startswith("slow:"):
        await asyncio.sleep(int(spec[5:]) / 1000)
    elif spec == "raise":
        raise ValueError("boom")
    elif spec == "retry":
        raise punctual.Retry("later", 250)
    print("handled", job.id, flush=True)

asyncio.run(punctual.run_async(handle, inflight=3))
print("EOF, exiting", flush=True)
"""


class AsyncLoopTest(unittest.TestCase):
    def test_handlers_run_concurrently_and_eof_waits_for_them(self):
        code = ASYNC_HANDLER % os.path.dirname(HERE)
        fake = FakeServe([sys.executable, "-c", code])
        self.assertEqual(fake.read(), {"type": "ready", "protocol": 1, "inflight": 3})
        self.assertEqual(fake.job("r", "raise"), {"type": "retry", "id": "r", "error": "ValueError: boom"})
        self.assertEqual(fake.job("l", "retry"), {"type": "retry", "id": "l", "error": "later", "delay_ms": 250})
        # The slow job is still running when the quick one is answered.
        fake.send({"type": "job", "id": "slow", "payload": "slow:800"})
        self.assertEqual(fake.job("quick", "x"), {"type": "done", "id": "quick"})
        self.assertEqual(fake.read(), {"type": "done", "id": "slow"})
        # EOF with a job in flight: it is answered, then the program exits 0.
        fake.send({"type": "job", "id": "last", "payload": "slow:300"})
        fake.jobs.close()
        self.assertEqual(fake.read(), {"type": "done", "id": "last"})
        code, out, err = fake.close()
        self.assertEqual(code, 0, err)
        self.assertIn("EOF, exiting", out)


class OnceTest(unittest.TestCase):
    def test_once_runs_a_step_once_and_again_after_a_failure(self):
        r = client()
        prefix = fresh_prefix()
        job = punctual.Job({"id": "j1", "topic": "t", "payload": "{}"})
        calls = []

        def boom():
            calls.append("boom")
            raise RuntimeError("side effect failed")

        with self.assertRaises(RuntimeError):
            job.once(r, "charge", 60, boom, prefix=prefix)
        self.assertTrue(job.once(r, "charge", 60, lambda: calls.append("ok"), prefix=prefix))
        self.assertFalse(job.once(r, "charge", 60, lambda: calls.append("again"), prefix=prefix))
        self.assertEqual(calls, ["boom", "ok"])
        key = punctual.once_key(prefix, "t", "j1", "charge")
        self.assertEqual(key, f"{prefix}:once:t:j1:charge")
        self.assertTrue(0 < r.ttl(key) <= 60)


if __name__ == "__main__":
    unittest.main()
