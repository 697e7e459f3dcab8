'use strict';
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { test, before, after } = require('node:test');
const { BIN, REDIS_URL, connect, freshPrefix } = require('./common');
const punctual = require('..');

let redis;
before(async () => {
  redis = await connect();
});
after(async () => {
  await redis.quit();
});

/** The punctual binary on the same Redis and prefix, --json; null without PUNCTUAL_BIN. */
function cli(prefix, ...args) {
  if (!BIN) return null;
  return JSON.parse(execFileSync(BIN, ['--redis', REDIS_URL, '--prefix', prefix, '--json', ...args]));
}

async function redisNowMs() {
  const t = await redis.time();
  return Array.isArray(t) ? Number(t[0]) * 1000 : t.getTime();
}

test('a call the script refuses does not list the topic', async () => {
  // The script fails on a key of the wrong type: nothing is written, not
  // even the topic's name in P:topics.
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  await redis.set(`${prefix}:{broken}:jobs`, 'not a hash');
  await assert.rejects(p.enqueue('broken', 'x', { id: 'a' }));
  assert.equal(Number(await redis.sIsMember(`${prefix}:topics`, 'broken')), 0);
  await p.enqueue('fine', 'x', { id: 'a' });
  assert.equal(Number(await redis.sIsMember(`${prefix}:topics`, 'fine')), 1);
});

test('enqueue of a dead id says dead', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  await p.enqueue('orders', 'a', { id: 'order:9', delayMs: 60000 });
  // Moved to dead as fail would (record kept, in the dead set only). A
  // minute ahead is within cold_after (10 min): the job is in the pool ZSET.
  assert.equal(await redis.zRem(`${prefix}:{orders}:pool`, 'order:9'), 1);
  await redis.zAdd(`${prefix}:{orders}:dead`, { score: 1000, value: 'order:9' });
  assert.deepEqual(await p.enqueue('orders', 'b', { id: 'order:9' }), { id: 'order:9', status: 'dead' });
  const out = await p.enqueueBatch('orders', [{ payload: 'c', id: 'order:9' }, { payload: 'd', id: 'new' }]);
  assert.deepEqual(out.map((o) => o.status), ['dead', 'created']);
  const info = await p.get('orders', 'order:9');
  assert.deepEqual([info.state, info.payload.toString()], ['dead', 'a']);
  assert.equal((await p.enqueue('orders', 'e', { id: 'order:9', replace: true })).status, 'replaced');
});

test('enqueue: created, duplicate, replaced; get', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const payload = Buffer.from([0xff, 0x00, ...Buffer.from(':colons:{"x":1}')]);
  assert.deepEqual(
    await p.enqueue('orders', payload, { id: 'order:1', delayMs: 60000, maxAttempts: 3, backoffMs: [1000, 2000] }),
    { id: 'order:1', status: 'created' },
  );
  assert.equal((await p.enqueue('orders', 'other', { id: 'order:1' })).status, 'duplicate');
  const info = await p.get('orders', 'order:1');
  assert.equal(info.state, 'pool');
  assert.deepEqual(info.payload, payload);
  assert.equal(info.maxAttempts, 3);
  // Redis's clock rounded up to the ms: the delay, or 1 ms more.
  assert.ok([60000, 60001].includes(info.dueMs - info.createdMs), String(info.dueMs - info.createdMs));
  assert.equal(info.attempts, 0);
  assert.equal(info.lastError, null);
  assert.equal(await redis.sIsMember(`${prefix}:topics`, 'orders'), 1);
  const got = cli(prefix, 'get', 'orders', 'order:1');
  if (got) assert.deepEqual([got.state, got.max_attempts, got.due_ms], ['pool', 3, info.dueMs]);
  assert.equal((await p.enqueue('orders', 'now', { id: 'order:1', replace: true })).status, 'replaced');
  const now = await p.get('orders', 'order:1');
  assert.deepEqual([now.state, now.payload.toString(), now.maxAttempts], ['ready', 'now', 6]);
});

test('generated ids and absolute times', async () => {
  const p = new punctual.Producer(redis, { prefix: freshPrefix() });
  const nowMs = Math.floor((await redisNowMs()) / 1000) * 1000;
  const e = await p.enqueue('t', 'x', { at: nowMs + 3600000 });
  assert.match(e.id, /^[0-9a-z]{12}$/);
  assert.equal((await p.get('t', e.id)).dueMs, nowMs + 3600000);
  const d = await p.enqueue('t', 'y', { at: new Date(nowMs + 7200000) });
  assert.equal((await p.get('t', d.id)).dueMs, nowMs + 7200000);
  assert.equal((await p.get('t', (await p.enqueue('t', 'z', { at: 1000 })).id)).state, 'ready');
});

test('batch: the first of an id wins, calls of 1000', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const out = await p.enqueueBatch('t', [
    { payload: 'a', id: 'a' },
    { payload: 'b', id: 'a' },
    { payload: 'c', delayMs: 5000 },
  ]);
  assert.deepEqual(out.map((o) => o.status), ['created', 'duplicate', 'created']);
  assert.equal(out[1].id, 'a');
  assert.equal((await p.get('t', 'a')).payload.toString(), 'a');
  const big = await p.enqueueBatch('big', Array.from({ length: 2500 }, (_, i) => ({ payload: String(i) })));
  assert.equal(new Set(big.map((b) => b.id)).size, 2500);
  assert.equal(await redis.hLen(`${prefix}:{big}:jobs`), 2500);
});

test('batch: the shared forms (=n, ~n, =*n, ~*n): ids and statuses as the script wrote them', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  // The form each call sent (ARGV[3]), as the Rust library picks it.
  const sent = [];
  const call = p.call.bind(p);
  p.call = (name, physical, argv) => {
    if (name === 'enqueue') sent.push(String(argv[2]));
    return call(name, physical, argv);
  };
  const got = async (id) => p.get('s', id);
  // =*n: every id generated, jobs alike (the reply: -1 and the first id).
  let out = await p.enqueueBatch('s', Array.from({ length: 100 }, (_, i) => ({ payload: `g${i}` })));
  assert.equal(sent.pop(), '=*100');
  assert.equal(new Set(out.map((e) => e.id)).size, 100);
  for (const [i, e] of out.entries()) {
    const info = await got(e.id);
    assert.deepEqual([e.status, info.payload.toString(), info.state], ['created', `g${i}`, 'ready']);
  }
  // ~*n: generated, a delay each.
  out = await p.enqueueBatch('s', Array.from({ length: 10 }, (_, i) => ({ payload: `d${i}`, delayMs: 60000 * (i + 1) })));
  assert.equal(sent.pop(), '~*10');
  const due = [];
  for (const [i, e] of out.entries()) {
    const info = await got(e.id);
    assert.deepEqual([e.status, info.payload.toString(), info.state], ['created', `d${i}`, 'pool']);
    due.push(info.dueMs);
  }
  assert.deepEqual(due, [...new Set(due)].sort((a, b) => a - b));
  assert.ok(due[9] - due[0] >= 9 * 60000, 'each its own delay');
  // =*n with a per-job option (the reply lists every id).
  out = await p.enqueueBatch('s', [{ payload: 'o1', group: 'g1' }, { payload: 'o2', group: 'g1' }]);
  assert.equal(sent.pop(), '=*2');
  const opts = await Promise.all(out.map((e) => got(e.id)));
  assert.deepEqual(opts.map((i) => [i.payload.toString(), i.group]), [['o1', 'g1'], ['o2', 'g1']]);
  // =n, ids given and one generated: statuses of the jobs not created.
  await p.enqueue('s', 'x', { id: 'live' });
  await p.enqueue('s', 'y', { id: 'gone' });
  assert.equal(await redis.zRem(`${prefix}:{s}:ready`, 'gone'), 1);
  await redis.zAdd(`${prefix}:{s}:dead`, { score: 1000, value: 'gone' });
  sent.length = 0;
  out = await p.enqueueBatch('s', [{ payload: '1', id: 'live' }, { payload: '2', id: 'fresh' },
    { payload: '3', id: 'gone' }, { payload: '4' }]);
  assert.equal(sent.pop(), '=4');
  assert.deepEqual(out.map((e) => e.status), ['duplicate', 'created', 'dead', 'created']);
  assert.deepEqual(out.slice(0, 3).map((e) => e.id), ['live', 'fresh', 'gone']);
  const payloads = await Promise.all(out.map(async (e) => (await got(e.id)).payload.toString()));
  assert.deepEqual(payloads, ['x', '2', 'y', '4']);
  // =n, all ids given (the reply lists none), with replace.
  out = await p.enqueueBatch('s', [{ payload: 'r1', id: 'live' }, { payload: 'r2', id: 'fresh' }], { replace: true });
  assert.equal(sent.pop(), '=2');
  assert.deepEqual(out, [{ id: 'live', status: 'replaced' }, { id: 'fresh', status: 'replaced' }]);
  assert.equal((await got('live')).payload.toString(), 'r1');
  // ~n: ids given, a time each.
  out = await p.enqueueBatch('s', [{ payload: 't1', id: 't1', delayMs: 60000 }, { payload: 't2', id: 't2' }]);
  assert.equal(sent.pop(), '~2');
  assert.deepEqual(out, [{ id: 't1', status: 'created' }, { id: 't2', status: 'created' }]);
  assert.deepEqual([(await got('t1')).state, (await got('t2')).state], ['pool', 'ready']);
  // Jobs that differ in max attempts, and one job: the five-argument form.
  out = await p.enqueueBatch('s', [{ payload: 'm1', maxAttempts: 2 }, { payload: 'm2', maxAttempts: 3 }]);
  assert.equal(sent.pop(), '2');
  assert.deepEqual([(await got(out[0].id)).maxAttempts, (await got(out[1].id)).maxAttempts], [2, 3]);
  assert.equal((await p.enqueue('s', 'one')).status, 'created');
  assert.equal(sent.pop(), '1');
});

test('invalid input is refused before Redis, with the library messages', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const cases = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'testdata', 'invalid.json')));
  const refused = (fn, message) => assert.rejects(fn, (e) => e instanceof punctual.InvalidInput && assert.equal(e.message, message) === undefined);
  for (const c of cases) {
    const opts = 'id' in c ? { id: c.id } : {};
    // Bytes that are not UTF-8: a JS string cannot hold them; its own text
    // with no UTF-8 form is a lone surrogate (Buffer.from would write U+FFFD).
    if ('id_hex' in c) opts.id = 'order:\ud800';
    if ('max_attempts' in c) opts.maxAttempts = c.max_attempts;
    await refused(() => p.enqueue(c.topic, 'x'.repeat(c.payload_bytes ?? 1), opts), c.message);
  }
  await refused(() => p.enqueueBatch('t', [{ payload: 'ok' }, { payload: 'x', maxAttempts: 0 }]), 'job 2: invalid max attempts 0: max attempts must be at least 1 and at most 10000');
  await refused(() => p.enqueue('t', 'x', { maxAttempts: 2.5 }), 'invalid max attempts 2.5: give an integer from 1 to 10000');
  await refused(() => p.enqueue('t', 'x', { delayMs: NaN }), 'invalid delay NaN: give milliseconds as a number');
  await refused(() => p.enqueue('t', 'x', { delayMs: '60000' }), 'invalid delay 60000: give milliseconds as a number');
  assert.throws(() => new punctual.Producer(redis, { prefix, maxPayload: 1.5 }), punctual.InvalidInput);
  await refused(() => p.enqueue('t', 'x', { delayMs: -5 }), 'invalid delay -5ms: delays may not be negative');
  await refused(() => p.enqueue('t', 'x', { delayMs: 315360000001 }), 'invalid delay 315360000s: delays are at most ten years');
  await refused(() => p.enqueue('t', 'x', { at: -1 }), 'invalid due time: before 1970; give a time after the epoch');
  await refused(() => p.enqueue('t', 'x', { backoffMs: [1000, 315360001000] }), 'invalid backoff step 315360001s: steps are at most ten years');
  await refused(() => p.enqueue('t', 'x', { delayMs: 1, at: 1 }), 'give a delay or a due time, not both');
  await refused(() => p.enqueue('t', 'x', { backoffMs: 5000 }), 'backoff must be a list of delays in milliseconds');
  await refused(() => p.enqueue('t', 'x', { dealyMs: 1 }), "unknown job field 'dealyMs'; the fields are: payload, id, delayMs, at, maxAttempts, backoffMs, expireMs, timeoutMs, group, traceparent, tracestate");
  await refused(() => p.get('t', ''), 'invalid id "": ids may not be empty (leave the id out to have one generated)');
  assert.throws(() => new punctual.Producer(redis, { prefix: 'a{b' }), {
    message: 'invalid prefix "a{b": prefixes must be non-empty and may not contain braces',
  });
  assert.deepEqual(await redis.keys(`${prefix}:*`), [], 'nothing reached Redis');
  const nowMs = await redisNowMs();
  await refused(() => p.enqueue('t', 'x', { at: nowMs + 20 * 365 * 86400 * 1000 }), 'job 1: due time more than ten years ahead');
});

test('NOSCRIPT: loaded again', async () => {
  const p = new punctual.Producer(redis, { prefix: freshPrefix() });
  await redis.scriptFlush();
  assert.equal((await p.enqueue('t', 'x', { id: '1' })).status, 'created');
  await redis.scriptFlush();
  assert.equal((await p.get('t', '1')).state, 'ready');
});

test('cancel and reschedule', async () => {
  const p = new punctual.Producer(redis, { prefix: freshPrefix() });
  await p.enqueue('t', 'x', { id: 'j', delayMs: 3600000 });
  assert.equal(await p.reschedule('t', 'j'), 'pool');
  assert.equal((await p.get('t', 'j')).state, 'ready');
  assert.equal(await p.reschedule('t', 'j', { delayMs: 60000 }), 'ready');
  assert.equal((await p.get('t', 'j')).state, 'pool');
  assert.equal(await p.cancel('t', 'j'), 'pool');
  assert.equal(await p.cancel('t', 'j'), null);
  assert.equal(await p.get('t', 'j'), null);
  assert.equal(await p.reschedule('t', 'j'), null);
});

test('a cancel is in the audit trail as the CLI\'s', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  await p.enqueue('t', 'x', { id: 'a' });
  await p.enqueue('t', 'x', { id: 'b' });
  assert.equal(await p.cancel('t', 'a'), 'ready');
  assert.equal(await p.cancel('t', 'b', { by: 'billing' }), 'ready');
  assert.equal(await p.cancel('t', 'a'), null); // found nothing: changed nothing, not recorded
  const trail = (await redis.lRange(`${prefix}:audit`, 0, -1)).map((e) => JSON.parse(e));
  for (const e of trail) {
    assert.ok(Math.abs(e.at_ms - Date.now()) < 60000, `at_ms ${e.at_ms}`);
    delete e.at_ms;
  }
  const me = `${require('node:os').hostname()}/${process.pid}`;
  assert.deepEqual(trail, [
    { who: 'billing', from: me, action: 'cancel', topic: 't', detail: { id: 'b', was: 'ready' } },
    { who: 'node', from: me, action: 'cancel', topic: 't', detail: { id: 'a', was: 'ready' } },
  ]);
  await assert.rejects(p.cancel('t', 'b', { by: 7 }), punctual.InvalidInput);
  const read = cli(prefix, 'audit');
  if (read !== null) assert.deepEqual(read.map((e) => [e.who, e.detail.id]), [['billing', 'b'], ['node', 'a']]);
});

test('a job due far ahead waits cold, in its minute\'s bucket', async (t) => {
  // docs/PROTOCOL.md "The cold pool": due at least cold_after (10 min by
  // default) ahead, a job waits in P:{T}:c:<minute>, not in the pool ZSET;
  // get, reschedule and cancel still call it pool.
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const k = (name) => `${prefix}:{t}:${name}`;
  const coldN = async () => Number((await redis.hGet(k('meta'), 'cold_n')) ?? 0);
  // A topic gets cold jobs once a scheduler ticked on it (its first tick
  // writes cold_at): one tick, as `punctual serve` runs at its start.
  if (!BIN) return t.skip('PUNCTUAL_BIN not set');
  const tick = execFileSync(BIN, ['script', 'tick'], { encoding: 'utf8' });
  const names = ['pool', 'ready', 'running', 'dead', 'jobs', 'meta', 'stats', 'seq', 'attempts'];
  await redis.eval(tick, { keys: names.map(k), arguments: ['1000', '1000000', '1000'] });
  await p.enqueue('t', 'x', { id: 'far', delayMs: 3600000 });
  await p.enqueue('t', 'x', { id: 'near', delayMs: 60000 });
  const far = await p.get('t', 'far');
  assert.equal(far.state, 'pool');
  const start = far.dueMs - (far.dueMs % 60000);
  assert.equal(await redis.zScore(k('pool'), 'far'), null);
  assert.deepEqual(await redis.lRange(k(`c:${start}`), 0, -1), ['far']);
  assert.deepEqual(await redis.zRange(k('cold'), 0, -1), [String(start)]);
  assert.equal(await coldN(), 1);
  const near = await p.get('t', 'near');
  assert.equal(await redis.zScore(k('pool'), 'near'), near.dueMs);
  const got = cli(prefix, 'get', 't', 'far');
  if (got) assert.deepEqual([got.state, got.due_ms], ['pool', far.dueMs]);
  cli(prefix, 'check', 't'); // exits non-zero on a problem
  // Rescheduled within W: in the pool ZSET, no longer cold.
  assert.equal(await p.reschedule('t', 'far', { delayMs: 120000 }), 'pool');
  assert.equal(await redis.zScore(k('pool'), 'far'), (await p.get('t', 'far')).dueMs);
  assert.equal(await coldN(), 0);
  // Far again, then cancelled.
  assert.equal(await p.reschedule('t', 'far', { delayMs: 7200000 }), 'pool');
  const again = await p.get('t', 'far');
  assert.equal(again.state, 'pool');
  assert.equal(await redis.zScore(k('pool'), 'far'), null);
  const bucket = await redis.lRange(k(`c:${again.dueMs - (again.dueMs % 60000)}`), 0, -1);
  assert.ok(bucket.includes('far'), String(bucket));
  assert.equal(await coldN(), 1);
  assert.equal(await p.cancel('t', 'far'), 'pool');
  assert.equal(await p.get('t', 'far'), null);
  assert.equal(await coldN(), 0);
});

test('partitioned topic: crc32 routing, client-made ids', async () => {
  const prefix = freshPrefix();
  await redis.hSet(`${prefix}:partitions`, 'hot', '3');
  const p = new punctual.Producer(redis, { prefix });
  const out = await p.enqueueBatch('hot', Array.from({ length: 60 }, (_, i) => ({ payload: String(i) })));
  const parts = new Set();
  for (const e of out) {
    assert.match(e.id, /^[0-9a-z]{21}$/);
    const part = punctual.partitionOf(e.id, 3);
    parts.add(part);
    assert.equal(await redis.hExists(`${prefix}:{hot#${part}}:jobs`, e.id), 1);
  }
  assert.equal(parts.size, 3);
  assert.equal(punctual.crc32(Buffer.from('123456789')), 0xcbf43926);
  await p.enqueue('hot', 'given', { id: 'order:10086', delayMs: 60000 });
  assert.equal((await p.get('hot', 'order:10086')).payload.toString(), 'given');
  assert.equal(await p.reschedule('hot', 'order:10086'), 'pool');
  assert.equal(await p.cancel('hot', 'order:10086'), 'ready');
  assert.deepEqual(await redis.sMembers(`${prefix}:topics`), ['hot']);
  cli(prefix, 'check', 'hot'); // exits non-zero on an id in the wrong partition
});

test('fractional ms are sent as whole ms, rounded up', async () => {
  // The scripts take plain decimal digits only ("1.5e3", "60000.5" are
  // refused); a fraction is rounded up, so a job is never due early.
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  await p.enqueue('t', 'x', { id: 'f1', delayMs: 59999.2, backoffMs: [1.5e3, 0.25] });
  const info = await p.get('t', 'f1');
  assert.ok([60000, 60001].includes(info.dueMs - info.createdMs), String(info.dueMs - info.createdMs));
  assert.ok((await redis.hGet(`${prefix}:{t}:jobs`, 'f1')).includes(':1500,1:0:x'));
  const nowMs = Math.floor((await redisNowMs()) / 1000) * 1000;
  await p.enqueue('t', 'x', { id: 'f2', at: nowMs + 3600000.4 });
  assert.equal((await p.get('t', 'f2')).dueMs, nowMs + 3600001);
  // Time passes between the reschedule and the get: bound the due time by
  // Redis's clock before the reschedule (floored) and at the get.
  const t0 = await redisNowMs();
  assert.equal(await p.reschedule('t', 'f2', { delayMs: 120000.5 }), 'pool');
  const r = await p.get('t', 'f2');
  assert.ok(r.dueMs >= t0 + 120001 && r.dueMs <= r.nowMs + 120002, `${r.dueMs} ${t0} ${r.nowMs}`);
});

test('a stale cached partition count never strands a job', async (t) => {
  if (!BIN) return t.skip('PUNCTUAL_BIN not set');
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  // The producer reads the count (1) and caches it...
  assert.equal((await p.enqueue('hot', 'x', { id: 'first' })).status, 'created');
  assert.equal(await p.cancel('hot', 'first'), 'ready');
  // ...then the topic (empty) is split into 3 by the Rust library.
  execFileSync(BIN, ['--redis', REDIS_URL, '--prefix', prefix, 'partitions', 'hot', '3']);
  // A producer that read the count just before the change: its cache still
  // says 1 (kept fresh here, so the test does not race the 1 s).
  p.partitionCache.set('hot', { k: 1, at: Date.now() });
  const ids = Array.from({ length: 40 }, (_, n) => `order:${n}`).filter((i) => punctual.partitionOf(i, 3) !== 0).slice(0, 6);
  const out = await p.enqueueBatch('hot', ids.map((id) => ({ payload: 'p', id })));
  assert.deepEqual(out.map((o) => o.status), ids.map(() => 'created'));
  for (const id of ids) {
    assert.equal(await redis.hExists(`${prefix}:{hot#${punctual.partitionOf(id, 3)}}:jobs`, id), 1, id);
  }
  assert.equal(await redis.hLen(`${prefix}:{hot}:jobs`), 0, 'nothing in the old layout');
  assert.equal(await p.partitions('hot'), 3);
  p.partitionCache.set('hot', { k: 1, at: Date.now() });
  const single = Array.from({ length: 40 }, (_, n) => `single:${n}`).find((i) => punctual.partitionOf(i, 3) !== 0);
  assert.equal((await p.enqueue('hot', 'q', { id: single })).status, 'created');
  assert.equal(await redis.hExists(`${prefix}:{hot#${punctual.partitionOf(single, 3)}}:jobs`, single), 1);
  execFileSync(BIN, ['--redis', REDIS_URL, '--prefix', prefix, 'check', 'hot']);
});
