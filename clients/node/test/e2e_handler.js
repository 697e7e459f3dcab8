'use strict';
// The resident handler used by the tests (worker.test.js's fake driver and
// crates/punctual-cli/tests/clients.rs), the same as the Python one: what it
// does depends on the payload {"do": ok|print|retry|dead|raise|hang|slow|once|
// exit|uncaught|unhandled} (the last three crash the program on the first
// attempt: process.exit(7), an exception thrown from a timer, a rejected
// promise nobody awaits),
// and every delivery is recorded with RPUSH on $E2E_KEY:seen (default e2e:TOPIC:seen). It takes up to
// E2E_INFLIGHT jobs at once (default 4).

const { connect } = require('./common');
const punctual = require('..');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class BoomError extends Error {}

async function main() {
  const redis = await connect();
  console.log('e2e_handler: booting', process.pid);
  await punctual.run(
    async (job) => {
      let spec = {};
      try {
        spec = job.json();
      } catch {}
      if (spec === null || typeof spec !== 'object') spec = {};
      const d = spec.do ?? 'ok';
      const [sec, usec] = await redis.time().then((t) => (Array.isArray(t) ? t : [Math.floor(t.getTime() / 1000), t.microseconds ?? 0]));
      const seen = JSON.stringify({
        id: job.id, topic: job.topic, attempt: job.attempt, max_attempts: job.maxAttempts,
        due_ms: job.dueMs, created_ms: job.createdMs, timeout_ms: job.timeoutMs,
        now_ms: Number(sec) * 1000 + Math.floor(Number(usec) / 1000), pid: process.pid,
        payload_hex: job.payload.toString('hex'), do: d,
        traceparent: job.traceparent, tracestate: job.tracestate,
      });
      const key = process.env.E2E_KEY || `e2e:${job.topic}`;
      if (job.attempt === 1 && d === 'exit') {
        await redis.rPush(key + ':crashed', seen);
        process.exit(7);
      } else if (job.attempt === 1 && d === 'uncaught') {
        await redis.rPush(key + ':crashed', seen);
        setTimeout(() => {
          throw new BoomError('uncaught in a timer');
        }, 0);
        await sleep(3600 * 1000);
      } else if (job.attempt === 1 && d === 'unhandled') {
        await redis.rPush(key + ':crashed', seen);
        Promise.reject(new BoomError('rejected, nobody awaits'));
        await sleep(3600 * 1000);
      } else if (d === 'print') {
        console.log('{"type":"done","id":"not-a-reply"}');
        console.log('junk on stdout');
        console.error('junk on stderr');
      } else if (d === 'hang' && job.attempt === 1) {
        await redis.rPush(key + ':hung', seen);
        await sleep(3600 * 1000);
      } else if (d === 'slow') {
        await redis.rPush(key + ':started', seen);
        await sleep(spec.ms ?? 1000);
      } else if (d === 'once') {
        await job.once(redis, 'count', 600, () => redis.incr(`${key}:once:${job.id}`));
        if (job.attempt === 1) {
          await redis.rPush(key + ':seen', seen);
          throw new punctual.Retry('after the step', 0);
        }
      }
      await redis.rPush(key + ':seen', seen);
      if (d === 'retry') throw new punctual.Retry('asked to retry', spec.delay_ms ?? null);
      if (d === 'dead') throw new punctual.Dead('asked to die');
      if (d === 'raise') throw new BoomError('boom');
    },
    { inflight: Number(process.env.E2E_INFLIGHT ?? 4) },
  );
  console.log('e2e_handler: EOF, exiting', process.pid);
  await redis.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
