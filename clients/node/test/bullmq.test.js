'use strict';
// punctual/bullmq's Queue (the enqueue side) on node-redis and on ioredis,
// what it refuses, and the producer's LOADING retry. Its Worker runs under
// serve in crates/punctual-cli/tests/client_apps.rs.
const assert = require('node:assert/strict');
const net = require('node:net');
const { test, before, after } = require('node:test');
const IORedis = require('ioredis');
const { connect, freshPrefix, REDIS_URL } = require('./common');
const punctual = require('..');
const { Queue, Worker, NotSupported, jobOptions } = require('../bullmq');

let redis;
let io;
before(async () => {
  redis = await connect();
  io = new IORedis(REDIS_URL);
});
after(async () => {
  await redis.quit();
  io.disconnect();
});

for (const kind of ['node-redis', 'ioredis']) {
  test(`Queue add, addBulk, getJob, changeDelay, remove (${kind})`, async () => {
    const prefix = freshPrefix();
    const q = new Queue('shop', { connection: kind === 'ioredis' ? io : redis, prefix });
    const job = await q.add('close-order', { order: 10086 }, { delay: 30 * 60 * 1000, jobId: 'order:10086', attempts: 3, backoff: { type: 'exponential', delay: 1000 } });
    assert.equal(job.id, 'order:10086');
    assert.equal(job.name, 'close-order');
    const got = await q.getJob('order:10086');
    assert.equal(got.name, 'close-order');
    assert.deepEqual(got.data, { order: 10086 });
    assert.equal(got.opts.attempts, 3);
    assert.ok([1_800_000, 1_800_001].includes(got.delay), String(got.delay));
    assert.equal(await got.getState(), 'delayed');
    const raw = await redis.hGet(`${prefix}:{shop}:jobs`, 'order:10086');
    assert.ok(raw.includes(':1000,2000:'), raw);
    assert.equal((await q.add('close-order', { order: 1 }, { jobId: 'order:10086' })).status, 'duplicate');
    await got.changeDelay(5000);
    const moved = await q.getJob('order:10086');
    // due - created: now 5 s from the reschedule, no longer 30 min.
    assert.ok(moved.delay >= 5000 && moved.delay < 60_000, String(moved.delay));
    const bulk = await q.addBulk([
      { name: 'a', data: [1, 'x'] },
      { name: 'b', data: null, opts: { jobId: 'b1', delay: 1000 } },
    ]);
    assert.deepEqual(bulk.map((j) => j.status), ['created', 'created']);
    assert.deepEqual((await q.getJob(bulk[0].id)).data, [1, 'x']);
    assert.equal(await q.remove('b1'), 1);
    assert.equal(await q.remove('b1'), 0);
    assert.equal(await q.getJob('b1'), undefined);
    await (await q.getJob('order:10086')).remove();
    assert.equal(await q.getJob('order:10086'), undefined);
  });
}

test('a plain Producer takes an ioredis client too', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(io, { prefix });
  const e = await p.enqueue('t', Buffer.from([0xff, 0, 1]), { id: 'x', delayMs: 1000 });
  assert.deepEqual(e, { id: 'x', status: 'created' });
  const j = await p.get('t', 'x');
  assert.deepEqual(j.payload, Buffer.from([0xff, 0, 1]));
  await io.script('FLUSH');
  assert.equal(await p.cancel('t', 'x'), 'pool'); // NOSCRIPT handled on ioredis
  assert.deepEqual(JSON.parse(await io.lindex(`${prefix}:audit`, 0)).detail, { id: 'x', was: 'pool' });
  await p.scheduleAdd('t', 'tick', { everyMs: 60000 });
  assert.deepEqual((await p.scheduleList('t')).map((s) => s.name), ['tick']);
  assert.equal(await p.scheduleRemove('t', 'tick'), true);
  const job = new punctual.Job({ id: 'j1', topic: 't', payload: '{}' });
  let ran = 0;
  assert.equal(await job.once(io, 'step', 60, () => ran++, { prefix }), true);
  assert.equal(await job.once(io, 'step', 60, () => ran++, { prefix }), false);
  assert.equal(ran, 1);
  assert.ok((await io.ttl(punctual.onceKey(prefix, 't', 'j1', 'step'))) > 0);
  assert.throws(() => new punctual.Producer({}), /give a connected client of the `redis` package .* or an ioredis/);
});

test('what punctual does not have is refused, not ignored', async () => {
  const q = new Queue('shop', { connection: redis, prefix: freshPrefix() });
  for (const opts of [{ priority: 1 }, { repeat: { every: 1000 } }, { lifo: true }, { parent: { id: 'p', queue: 'q' } }, { removeOnFail: true }, { removeOnComplete: false }, { backoff: { type: 'custom' } }]) {
    await assert.rejects(q.add('x', {}, opts), NotSupported, JSON.stringify(opts));
  }
  assert.throws(() => q.on('completed', () => {}), /Queue events \('completed'\) is not supported/);
  assert.throws(() => q.getJobCounts(), NotSupported);
  assert.throws(() => new Queue('x', { connection: redis, defaultJobOptions: { priority: 2 } }), NotSupported);
  assert.throws(() => new Worker('shop', async () => {}, { autorun: false, limiter: { max: 1, duration: 1000 } }), NotSupported);
  assert.throws(() => new Worker('shop', '/path/to/processor.js', { autorun: false }), /sandboxed processors/);
  const w = new Worker('shop', async () => {}, { autorun: false });
  assert.throws(() => w.on('failed', () => {}), /Worker events \('failed'\) is not supported/);
  assert.deepEqual(jobOptions({ attempts: 4, backoff: 500 }), { maxAttempts: 4, backoffMs: [500] });
});

test('a Worker run by hand says to run it under punctual serve and exits 1', () => {
  const { spawnSync } = require('node:child_process');
  const path = require('node:path');
  const env = { ...process.env };
  delete env.PUNCTUAL_PROTOCOL;
  delete env.PUNCTUAL_TOPIC;
  const code = `const { Worker } = require(${JSON.stringify(path.join(__dirname, '..', 'bullmq.js'))}); new Worker('shop', async () => {});`;
  const r = spawnSync(process.execPath, ['-e', code], { env, encoding: 'utf8', timeout: 20000 });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /PUNCTUAL_PROTOCOL is not set: this program is a resident handler; run it under `punctual serve`/);
});

// A proxy that answers the first `n` commands with -LOADING, as Redis does
// while it reads its dataset, then forwards everything.
function loadingProxy(n) {
  const target = new URL(REDIS_URL);
  const state = { left: n, refused: 0 };
  const server = net.createServer((c) => {
    const up = net.connect(Number(target.port || 6379), target.hostname);
    up.on('data', (d) => c.write(d));
    up.on('error', () => c.destroy());
    c.on('error', () => up.destroy());
    c.on('close', () => up.destroy());
    c.on('data', (d) => {
      const s = d.toString('latin1');
      if (state.left > 0 && /EVALSHA|EVAL|HGET|SADD/i.test(s) && !/HELLO|CLIENT|SELECT/i.test(s)) {
        state.left -= 1;
        state.refused += 1;
        c.write('-LOADING Redis is loading the dataset in memory\r\n');
      } else up.write(d);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, state, port: server.address().port })));
}

test('LOADING is waited out and retried (node-redis and ioredis)', async () => {
  const { createClient } = require('redis');
  for (const kind of ['node-redis', 'ioredis']) {
    const { server, state, port } = await loadingProxy(3);
    const c = kind === 'ioredis' ? new IORedis(port, '127.0.0.1') : await createClient({ url: `redis://127.0.0.1:${port}` }).connect();
    const prefix = freshPrefix();
    const e = await new punctual.Producer(c, { prefix }).enqueue('t', 'x', { id: 'l1' });
    assert.deepEqual(e, { id: 'l1', status: 'created' }, kind);
    assert.equal(state.refused, 3, kind);
    assert.equal((await new punctual.Producer(redis, { prefix }).get('t', 'l1')).state, 'ready');
    if (kind === 'ioredis') c.disconnect();
    else await c.quit();
    server.close();
  }
  const { server, port } = await loadingProxy(1e9);
  const c = await createClient({ url: `redis://127.0.0.1:${port}` }).connect();
  const saved = punctual.limits.loadingWaitMs;
  punctual.limits.loadingWaitMs = 300;
  try {
    await assert.rejects(new punctual.Producer(c, { prefix: freshPrefix() }).enqueue('t', 'x'), /still loading its dataset after/);
  } finally {
    punctual.limits.loadingWaitMs = saved;
    await c.quit();
    server.close();
  }
});
