'use strict';
// Per-job options (expiry, timeout, group) and schedules (docs/PROTOCOL.md,
// "Per-job options" and "Schedules").
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { test, before, after } = require('node:test');
const { connect, freshPrefix } = require('./common');
const punctual = require('..');
const { encodeJob } = require('../lib/validate');

let redis;
let sub;
before(async () => {
  redis = await connect();
  sub = redis.duplicate();
  await sub.connect();
});
after(async () => {
  await sub.quit();
  await redis.quit();
});

async function redisNowMs() {
  const t = await redis.time();
  return Array.isArray(t) ? Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000) : t.getTime();
}

const camel = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

/** Schedules of a topic as stored: name -> parsed JSON (or null). */
async function stored(prefix, topic, name) {
  const raw = await redis.hGet(`${prefix}:{${topic}}:schedules`, name);
  return raw == null ? null : JSON.parse(raw);
}

/** Collects what is published on the topic's schedules channel. */
async function listen(prefix, topic) {
  const got = [];
  const channel = `${prefix}:{${topic}}:schedules`;
  await sub.subscribe(channel, (m) => got.push(m));
  return {
    /** The names published since the last look (waits for `n` of them, or 500 ms of quiet). */
    async take(n) {
      const until = Date.now() + (n > 0 ? 5000 : 500);
      while (got.length < n && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
      if (n === 0) await new Promise((r) => setTimeout(r, 300));
      return got.splice(0);
    },
    close: () => sub.unsubscribe(channel),
  };
}

test('the shared invalid options are refused before Redis', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const cases = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'testdata', 'invalid_options.json')));
  assert.ok(cases.length >= 20);
  for (const c of cases) {
    const args = Object.fromEntries(Object.entries(c.args).map(([k, v]) => [camel(k), v]));
    const check = (e) => e instanceof punctual.InvalidInput && assert.equal(e.message, c.message) === undefined;
    if (c.kind === 'enqueue') {
      await assert.rejects(p.enqueue('t', 'x', args), check);
    } else {
      const { name, payloadBytes = 1, ...rest } = args;
      await assert.rejects(p.scheduleAdd('t', name, { payload: 'x'.repeat(payloadBytes), ...rest }), check);
    }
  }
  await assert.rejects(p.enqueue('t', 'x', { expireMs: '60000' }), {
    message: 'invalid expiry 60000: give milliseconds as a number',
  });
  await assert.rejects(p.scheduleAdd('t', 's', { everyMs: 60000, catchUp: 'all', frequency: 2 }), {
    message:
      "unknown schedule field 'frequency'; the fields are: cron, everyMs, tz, payload, maxAttempts, expireMs, timeoutMs, group, catchUp, spreadMs, paused",
  });
  assert.deepEqual(await redis.keys(`${prefix}:*`), [], 'nothing reached Redis');
});

test('options are passed in the max-attempts argument', () => {
  // What the script gets: <max>;x<ms>;t<ms>;g<group>, in that order.
  const enc = (o) => encodeJob({ payload: 'x', ...o }, 100)[3];
  assert.equal(enc({ maxAttempts: 3, expireMs: 3600000, timeoutMs: 5000, group: 'shop-17' }), '3;x3600000;t5000;gshop-17');
  assert.equal(enc({ expireMs: 3600000 }), ';x3600000');
  assert.equal(enc({ group: 'a.b_c@d-9' }), ';ga.b_c@d-9');
  assert.equal(enc({ maxAttempts: 2 }), '2');
  assert.equal(enc({}), '');
  assert.equal(enc({ expireMs: 1.2, timeoutMs: 0.001 }), ';x2;t1', 'whole ms, rounded up');
});

test('options read back from what get returns', () => {
  const { parseOptions } = require('../lib/producer');
  const none = { traceparent: null, tracestate: null };
  assert.deepEqual(parseOptions(';ezz;t5000;gshop-17'), { expiresAtMs: 36 * 36 - 1, timeoutMs: 5000, group: 'shop-17', ...none });
  assert.deepEqual(parseOptions(';gops'), { expiresAtMs: null, timeoutMs: null, group: 'ops', ...none });
  assert.deepEqual(parseOptions(''), { expiresAtMs: null, timeoutMs: null, group: null, ...none });
  assert.deepEqual(parseOptions(';p00-ab-cd-01;sk=a%3Bb%3Ac%25'), {
    expiresAtMs: null, timeoutMs: null, group: null, traceparent: '00-ab-cd-01', tracestate: 'k=a;b:c%',
  });
});

// Needs the enqueue script of the `opts` branch.
test('options round-trip into the record', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const at = (await redisNowMs()) + 60000;
  const e = await p.enqueue('orders', 'pay', { id: 'o1', at, maxAttempts: 3, expireMs: 3600000, timeoutMs: 5000, group: 'shop-17' });
  assert.equal(e.status, 'created');
  const head = async (id) => String(await redis.hGet(`${prefix}:{orders}:jobs`, id)).split(':')[0];
  // x is stored as e<deadline in base 36>: the due time plus the window.
  assert.equal(await head('o1'), `3;e${(at + 3600000).toString(36)};t5000;gshop-17`);
  const info = await p.get('orders', 'o1');
  assert.deepEqual([info.state, info.maxAttempts, info.dueMs, info.payload.toString()], ['pool', 3, at, 'pay']);
  assert.deepEqual([info.expiresAtMs, info.timeoutMs, info.group], [at + 3600000, 5000, 'shop-17']);
  await p.enqueue('orders', 'pay', { id: 'o2', at, expireMs: 60000 });
  assert.equal(await head('o2'), `;e${(at + 60000).toString(36)}`);
  await p.enqueue('orders', 'pay', { id: 'o3', at, maxAttempts: 4 });
  assert.equal(await head('o3'), '4', 'without options the record is what it was');
  const o3 = await p.get('orders', 'o3');
  assert.deepEqual([o3.expiresAtMs, o3.timeoutMs, o3.group], [null, null, null]);
});

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

test('a trace context round-trips, escaped, through the record', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const state = 'rojo=00f067aa0ba902b7,congo=a:b;c%d';
  await p.enqueue('orders', 'pay', { id: 't1', maxAttempts: 3, group: 'g1', traceparent: TP, tracestate: state });
  const head = async (id) => String(await redis.hGet(`${prefix}:{orders}:jobs`, id)).split(':')[0];
  assert.equal(await head('t1'), `3;gg1;p${TP};srojo=00f067aa0ba902b7,congo=a%3Ab%3Bc%25d`);
  const info = await p.get('orders', 't1');
  assert.deepEqual([info.traceparent, info.tracestate, info.group], [TP, state, 'g1']);
  // None given and no OpenTelemetry: nothing stored, no byte more.
  await p.enqueue('orders', 'pay', { id: 't2', maxAttempts: 3 });
  assert.equal(await head('t2'), '3');
  assert.equal((await p.get('orders', 't2')).traceparent, null);
});

test('the active OpenTelemetry context is taken when none is given', async () => {
  const { useOpenTelemetry } = require('../lib/validate');
  const other = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  // A stand-in for @opentelemetry/api with a registered W3C propagator.
  const active = { span: other };
  const fake = {
    context: { active: () => active },
    propagation: {
      inject: (cx, carrier) => {
        carrier.traceparent = cx.span;
        carrier.tracestate = 'k=v';
      },
    },
  };
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  useOpenTelemetry(fake);
  try {
    await p.enqueue('orders', 'x', { id: 'o1' });
    await p.enqueue('orders', 'x', { id: 'o2', traceparent: TP });
  } finally {
    useOpenTelemetry(undefined);
  }
  const [o1, o2] = [await p.get('orders', 'o1'), await p.get('orders', 'o2')];
  assert.deepEqual([o1.traceparent, o1.tracestate], [other, 'k=v']);
  assert.deepEqual([o2.traceparent, o2.tracestate], [TP, null], 'a given one wins');
});

test('a resident job message carries the trace context', () => {
  const job = new punctual.Job({ id: 'j', traceparent: TP, tracestate: 'k=v' });
  assert.deepEqual([job.traceparent, job.tracestate], [TP, 'k=v']);
  assert.equal(new punctual.Job({ id: 'j' }).traceparent, null);
});

test('scheduleAdd writes the documented JSON and publishes', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const l = await listen(prefix, 'orders');
  const before = await redisNowMs();
  const s = await p.scheduleAdd('orders', 'close-unpaid', {
    cron: '0 */5 * * * *', tz: 'Europe/Berlin', payload: '{"kind":"sweep"}', timeoutMs: 60000, catchUp: 'latest',
  });
  const afterMs = await redisNowMs();
  assert.deepEqual(await l.take(1), ['close-unpaid']);
  const got = await stored(prefix, 'orders', 'close-unpaid');
  assert.deepEqual(got, s);
  assert.ok(before <= got.created_ms && got.created_ms <= afterMs, JSON.stringify(got));
  assert.deepEqual(got, {
    name: 'close-unpaid', cron: '0 */5 * * * *', tz: 'Europe/Berlin', payload: '{"kind":"sweep"}',
    options: ';t60000', catch_up: 'latest', spread_ms: null, paused: false, created_ms: got.created_ms,
  });
  // The key order of PROTOCOL.md's example.
  assert.deepEqual(Object.keys(got), ['name', 'cron', 'tz', 'payload', 'options', 'catch_up', 'spread_ms', 'paused', 'created_ms']);
  await p.scheduleAdd('orders', 'tick.5s', {
    everyMs: 5000, payload: 't', maxAttempts: 2, expireMs: 4000, group: 'ops', catchUp: 'spread', spreadMs: 600000,
  });
  assert.deepEqual(await l.take(1), ['tick.5s']);
  const { created_ms: _, ...tick } = await stored(prefix, 'orders', 'tick.5s');
  assert.deepEqual(tick, {
    name: 'tick.5s', every_ms: 5000, payload: 't', options: '2;x4000;gops', catch_up: 'spread', spread_ms: 600000, paused: false,
  });
  await p.scheduleAdd('orders', 'nightly', { cron: '0 3 * * *' });
  const n = await stored(prefix, 'orders', 'nightly');
  assert.deepEqual([n.tz, n.payload, n.options, n.catch_up, n.paused], ['UTC', '', '', 'all', false]);
  assert.deepEqual((await p.scheduleList('orders')).map((x) => x.name), ['close-unpaid', 'nightly', 'tick.5s']);
  // Only the topic's hash: nothing was enqueued, the clients fire nothing.
  assert.deepEqual(await redis.keys(`${prefix}:*`), [`${prefix}:{orders}:schedules`]);
  await l.close();
});

test('scheduleAdd again replaces it and keeps its creation time', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const first = await p.scheduleAdd('t', 's', { everyMs: 60000, payload: 'a' });
  await new Promise((r) => setTimeout(r, 10));
  const second = await p.scheduleAdd('t', 's', { everyMs: 30000, payload: 'b', paused: true });
  assert.equal(second.created_ms, first.created_ms);
  assert.deepEqual(await stored(prefix, 't', 's'), second);
  assert.deepEqual([second.every_ms, second.payload, second.paused], [30000, 'b', true]);
});

test('scheduleList, schedulePause, scheduleResume, scheduleRemove', async () => {
  const prefix = freshPrefix();
  const p = new punctual.Producer(redis, { prefix });
  const l = await listen(prefix, 't');
  assert.deepEqual(await p.scheduleList('t'), []);
  await p.scheduleAdd('t', 'b', { everyMs: 1000 });
  await p.scheduleAdd('t', 'a', { cron: '*/10 * * * * *' });
  assert.deepEqual(await l.take(2), ['b', 'a']);
  const listed = await p.scheduleList('t');
  assert.deepEqual(listed.map((s) => s.name), ['a', 'b']);
  assert.deepEqual(listed[0], await stored(prefix, 't', 'a'));
  assert.equal(await p.schedulePause('t', 'a'), true);
  assert.deepEqual(await l.take(1), ['a']);
  assert.equal((await stored(prefix, 't', 'a')).paused, true);
  assert.equal((await stored(prefix, 't', 'b')).paused, false);
  assert.equal(await p.scheduleResume('t', 'a'), true);
  assert.deepEqual(await l.take(1), ['a']);
  assert.equal((await stored(prefix, 't', 'a')).paused, false);
  assert.equal(await p.scheduleRemove('t', 'a'), true);
  assert.deepEqual(await l.take(1), ['a']);
  assert.equal(await stored(prefix, 't', 'a'), null);
  assert.deepEqual((await p.scheduleList('t')).map((s) => s.name), ['b']);
  // Unknown names: false, nothing written or published.
  assert.equal(await p.scheduleRemove('t', 'a'), false);
  assert.equal(await p.schedulePause('t', 'nope'), false);
  assert.equal(await p.scheduleResume('t', 'nope'), false);
  assert.deepEqual(await l.take(0), []);
  // The watermark of a removed schedule goes with it.
  await redis.hSet(`${prefix}:{t}:schedules:last`, 'b', '1000');
  assert.equal(await p.scheduleRemove('t', 'b'), true);
  assert.equal(Number(await redis.hExists(`${prefix}:{t}:schedules:last`, 'b')), 0);
  await assert.rejects(p.schedulePause('t{x}', 'a'), punctual.InvalidInput);
  await l.close();
});

/**
 * Enqueues occurrences as punctual's firer does: id `name@o`, due `a<o>`,
 * through the enqueue script with the fired key; the watermark at the last.
 */
async function fire(p, prefix, topic, name, occurrences) {
  const k = await p.partitions(topic);
  for (const o of occurrences) {
    const id = `${name}@${o}`;
    const physical = k <= 1 ? topic : `${topic}#${punctual.partitionOf(id, k)}`;
    await p.call('enqueue', physical, [65536, 0, 1, id, 'x', `a${o}`, '', ''], { fired: true });
  }
  await redis.hSet(`${prefix}:{${topic}}:schedules:last`, name, String(Math.max(...occurrences)));
}

/** The ids in every partition's P:{T}:fired. */
async function firedIds(p, prefix, topic) {
  const k = await p.partitions(topic);
  const ids = [];
  for (let i = 0; i < k; i++) {
    ids.push(...(await redis.zRange(`${prefix}:{${k <= 1 ? topic : `${topic}#${i}`}}:fired`, 0, -1)));
  }
  return ids;
}

test('schedulePause and scheduleRemove take back the occurrences fired ahead', async () => {
  const prefix = freshPrefix();
  await redis.hSet(`${prefix}:partitions`, 'hot', '3');
  const p = new punctual.Producer(redis, { prefix });
  for (const topic of ['t', 'hot']) {
    await p.scheduleAdd(topic, 's', { everyMs: 1000 });
    await p.scheduleAdd(topic, 'other', { everyMs: 1000 });
    const now = await redisNowMs();
    const ahead = [0, 1, 2, 3, 4, 5].map((i) => now + 30000 + i * 1000);
    await fire(p, prefix, topic, 's', [now - 5000, ...ahead]);
    await fire(p, prefix, topic, 'other', ahead);
    assert.equal(await p.schedulePause(topic, 's'), true);
    for (const o of ahead) {
      assert.equal(await p.get(topic, `s@${o}`), null, `${topic}: s@${o} taken back`);
      assert.notEqual(await p.get(topic, `other@${o}`), null, `${topic}: other@${o} kept`);
    }
    assert.notEqual(await p.get(topic, `s@${now - 5000}`), null, 'already due: left alone');
    const fired = await firedIds(p, prefix, topic);
    assert.deepEqual(ahead.filter((o) => fired.includes(`s@${o}`)), [], 'taken back: may fire again');
    assert.ok(fired.includes(`s@${now - 5000}`));
    const wm = Number(await redis.hGet(`${prefix}:{${topic}}:schedules:last`, 's'));
    assert.ok(wm >= now && wm < ahead[0], `watermark lowered to now: ${wm}`);
    assert.equal(await p.scheduleResume(topic, 's'), true);
    assert.equal(await p.scheduleRemove(topic, 'other'), true);
    for (const o of ahead) assert.equal(await p.get(topic, `other@${o}`), null, `${topic}: other@${o} taken back`);
    assert.equal(await redis.exists(`${prefix}:{${topic}}:schedules:lock`), 0);
    // A new timing takes back what the old one fired ahead.
    await fire(p, prefix, topic, 's', ahead.map((o) => o + 500));
    await p.scheduleAdd(topic, 's', { everyMs: 1000 });
    assert.notEqual(await p.get(topic, `s@${ahead[0] + 500}`), null, 'same timing: kept');
    await p.scheduleAdd(topic, 's', { everyMs: 2000 });
    assert.equal(await p.get(topic, `s@${ahead[0] + 500}`), null, 'new timing: taken back');
  }
});

test('a partitioned topic keeps its schedules under the topic', async () => {
  const prefix = freshPrefix();
  await redis.hSet(`${prefix}:partitions`, 'hot', '3');
  const p = new punctual.Producer(redis, { prefix });
  await p.scheduleAdd('hot', 's', { everyMs: 60000 });
  assert.notEqual(await stored(prefix, 'hot', 's'), null);
  assert.deepEqual((await p.scheduleList('hot')).map((s) => s.name), ['s']);
});
