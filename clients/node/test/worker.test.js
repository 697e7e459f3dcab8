'use strict';
// The resident loop against a fake driver: this test plays punctual serve's
// side of docs/RESIDENT.md over fds 3 and 4.
const assert = require('node:assert/strict');
const path = require('node:path');
const readline = require('node:readline');
const { spawn, spawnSync } = require('node:child_process');
const { test, before, after } = require('node:test');
const { connect, freshPrefix } = require('./common');
const punctual = require('..');

let redis;
before(async () => {
  redis = await connect();
});
after(async () => {
  await redis.quit();
});

class FakeServe {
  constructor(argv, env = {}) {
    this.child = spawn(argv[0], argv.slice(1), {
      stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'],
      env: { ...process.env, PUNCTUAL_PROTOCOL: '1', ...env },
    });
    this.out = '';
    this.err = '';
    this.child.stdout.on('data', (d) => (this.out += d));
    this.child.stderr.on('data', (d) => (this.err += d));
    this.lines = readline.createInterface({ input: this.child.stdio[4] })[Symbol.asyncIterator]();
    this.exited = new Promise((resolve) => this.child.on('exit', (code) => resolve(code)));
  }

  async read() {
    const { value, done } = await this.lines.next();
    if (done) throw new Error('fd 4 closed early: ' + this.err);
    return JSON.parse(value);
  }

  send(msg) {
    this.child.stdio[3].write(JSON.stringify(msg) + '\n');
  }

  job(id, payload, { attempt = 1, b64 = false } = {}) {
    const msg = { type: 'job', id, topic: 'faketopic-node', attempt, max_attempts: 5, due_ms: 1000, created_ms: 900, timeout_ms: 30000 };
    if (b64) msg.payload_b64 = payload.toString('base64');
    else msg.payload = typeof payload === 'string' ? payload : JSON.stringify(payload);
    this.send(msg);
  }

  async roundTrip(...args) {
    this.job(...args);
    return this.read();
  }

  async close() {
    this.child.stdio[3].end();
    const code = await this.exited;
    return code;
  }
}

test('replies for each outcome, concurrency, exit on EOF', async () => {
  await redis.del(['e2e:faketopic-node:seen', 'e2e:faketopic-node:once:o']);
  const fake = new FakeServe([process.execPath, path.join(__dirname, 'e2e_handler.js')], { E2E_INFLIGHT: '2' });
  assert.deepEqual(await fake.read(), { type: 'ready', protocol: 1, inflight: 2 });
  assert.deepEqual(await fake.roundTrip('a', { do: 'ok' }), { type: 'done', id: 'a' });
  assert.deepEqual(await fake.roundTrip('p', { do: 'print' }), { type: 'done', id: 'p' });
  assert.deepEqual(await fake.roundTrip('r', { do: 'retry', delay_ms: 1500 }), { type: 'retry', id: 'r', error: 'asked to retry', delay_ms: 1500 });
  assert.deepEqual(await fake.roundTrip('r2', { do: 'retry' }), { type: 'retry', id: 'r2', error: 'asked to retry' });
  assert.deepEqual(await fake.roundTrip('d', { do: 'dead' }), { type: 'dead', id: 'd', error: 'asked to die' });
  assert.deepEqual(await fake.roundTrip('x', { do: 'raise' }), { type: 'retry', id: 'x', error: 'BoomError: boom' });
  fake.send({ type: 'something-later', id: 'zz' });
  const raw = Buffer.from([0xff, 0x00, 0x62]);
  assert.deepEqual(await fake.roundTrip('b', raw, { b64: true }), { type: 'done', id: 'b' });
  assert.deepEqual(await fake.roundTrip('u', 'caf\u00e9 \u2603'), { type: 'done', id: 'u' });
  assert.equal((await fake.roundTrip('o', { do: 'once' })).type, 'retry');
  assert.deepEqual(await fake.roundTrip('o', { do: 'once' }, { attempt: 2 }), { type: 'done', id: 'o' });
  assert.equal(await redis.get('e2e:faketopic-node:once:o'), '1');
  // Two at once: the slow job is still running when the quick one is done.
  fake.job('slow', { do: 'slow', ms: 800 });
  fake.job('quick', { do: 'ok' });
  assert.deepEqual(await fake.read(), { type: 'done', id: 'quick' });
  assert.deepEqual(await fake.read(), { type: 'done', id: 'slow' });
  // EOF while a job runs: it is finished and replied to, then the program exits 0.
  fake.job('last', { do: 'slow', ms: 300 });
  const code = fake.close();
  assert.deepEqual(await fake.read(), { type: 'done', id: 'last' });
  assert.equal(await code, 0, fake.err);
  assert.match(fake.out, /junk on stdout/);
  assert.ok(fake.out.includes('{"type":"done","id":"not-a-reply"}'));
  assert.match(fake.err, /junk on stderr/);
  assert.match(fake.out, /EOF, exiting/);
  const seen = Object.fromEntries((await redis.lRange('e2e:faketopic-node:seen', 0, -1)).map((s) => [JSON.parse(s).id, JSON.parse(s)]));
  assert.deepEqual(Buffer.from(seen.b.payload_hex, 'hex'), raw);
  assert.equal(Buffer.from(seen.u.payload_hex, 'hex').toString(), 'caf\u00e9 \u2603');
  assert.deepEqual(
    [seen.a.attempt, seen.a.max_attempts, seen.a.due_ms, seen.a.created_ms, seen.a.timeout_ms],
    [1, 5, 1000, 900, 30000],
  );
});

// A program that crashes must exit, whatever it held: punctual serve sees the
// exit at once and retries its jobs (a hang would hold them for the full
// timeout). fd 3 stays open here, as under serve. (Guarded by the test's own
// timeout: a hang fails it.)
for (const how of ['exit', 'uncaught', 'unhandled']) {
  test(`a crash (${how}) in the handler exits the program`, { timeout: 20000 }, async () => {
    const fake = new FakeServe([process.execPath, path.join(__dirname, 'e2e_handler.js')], { E2E_KEY: `e2e:crash-${how}` });
    assert.deepEqual(await fake.read(), { type: 'ready', protocol: 1, inflight: 4 });
    fake.job(`c-${how}`, { do: how });
    const code = await fake.exited;
    assert.notEqual(code, 0, fake.err);
    assert.equal((await redis.lRange(`e2e:crash-${how}:crashed`, 0, -1)).length, 1);
    if (how !== 'exit') assert.match(fake.err, /BoomError/);
    fake.child.stdio[3].destroy();
  });
}

test('run by hand (no PUNCTUAL_PROTOCOL, fds 3 and 4 open) it refuses with what to do', () => {
  const code = `require(${JSON.stringify(path.join(__dirname, '..'))}).run(() => {}).then(() => console.log('ran'))`;
  const env = { ...process.env };
  delete env.PUNCTUAL_PROTOCOL;
  // fds 3 and 4 are open (pipes), as a shell or an interpreter may leave them.
  const r = spawnSync(process.execPath, ['-e', code], { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'], timeout: 20000 });
  assert.notEqual(r.status, 0, r.stdout + r.stderr);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /PUNCTUAL_PROTOCOL is not set: this program is a resident handler; run it under `punctual serve`/);
});

test('outside serve it says what to do', () => {
  const code = `require(${JSON.stringify(path.join(__dirname, '..'))}).run(() => {}).catch((e) => { console.error(e.message); process.exit(3); })`;
  const r = spawnSync(process.execPath, ['-e', code], {
    env: { ...process.env, PUNCTUAL_PROTOCOL: '1', PUNCTUAL_JOBS_FD: '97', PUNCTUAL_REPLIES_FD: '98' },
    encoding: 'utf8',
  });
  assert.equal(r.status, 3);
  assert.match(r.stderr, /fd 97 is not open: run this program under `punctual serve`/);
});

test('once: a step runs once, again after it failed', async () => {
  const prefix = freshPrefix();
  const job = new punctual.Job({ id: 'j1', topic: 't', payload: '{}' });
  const calls = [];
  await assert.rejects(
    job.once(redis, 'charge', 60, async () => {
      calls.push('boom');
      throw new Error('side effect failed');
    }, { prefix }),
    /side effect failed/,
  );
  assert.equal(await job.once(redis, 'charge', 60, () => calls.push('ok'), { prefix }), true);
  assert.equal(await job.once(redis, 'charge', 60, () => calls.push('again'), { prefix }), false);
  assert.deepEqual(calls, ['boom', 'ok']);
  const key = punctual.onceKey(prefix, 't', 'j1', 'charge');
  assert.equal(key, `${prefix}:once:t:j1:charge`);
  const ttl = await redis.ttl(key);
  assert.ok(ttl > 0 && ttl <= 60, `ttl ${ttl}`);
});

test('a Retry delay is whole ms, rounded up; one that is not a number is left to the backoff ladder', () => {
  const { replyFor } = require('../lib/worker');
  assert.equal(replyFor('j', new punctual.Retry('later', 1500.2)).delay_ms, 1501);
  assert.equal(replyFor('j', new punctual.Retry('later', 250)).delay_ms, 250);
  assert.equal(replyFor('j', new punctual.Retry('later', -5)).delay_ms, 0);
  assert.equal('delay_ms' in replyFor('j', new punctual.Retry('later', NaN)), false);
  assert.equal('delay_ms' in replyFor('j', new punctual.Retry('later', 'soon')), false);
});

test('a cancel message aborts the job.signal of that job only', { timeout: 20000 }, async () => {
  const code = `require(${JSON.stringify(path.join(__dirname, '..'))}).run(async (job) => {
    if (job.text !== 'wait') return;
    await new Promise((resolve) => job.signal.addEventListener('abort', resolve));
    throw new Error('stopped: ' + job.signal.reason.message);
  }, { inflight: 2 })`;
  const fake = new FakeServe([process.execPath, '-e', code]);
  // A handler that never hears the cancel would hold the program (and this
  // test run) open: kill it after 10 s, which fails the reads below.
  const guard = setTimeout(() => fake.child.kill('SIGKILL'), 10000);
  assert.deepEqual(await fake.read(), { type: 'ready', protocol: 1, inflight: 2 });
  fake.job('w', 'wait');
  fake.send({ type: 'cancel', id: 'other' }); // not held: ignored
  assert.deepEqual(await fake.roundTrip('q', 'quick'), { type: 'done', id: 'q' });
  fake.send({ type: 'cancel', id: 'w' });
  assert.deepEqual(await fake.read(), { type: 'retry', id: 'w', error: 'Error: stopped: cancelled by an operator' });
  assert.equal(await fake.close(), 0, fake.err);
  clearTimeout(guard);
});
