'use strict';
// Schedules: recurring jobs that `punctual serve` fires (docs/PROTOCOL.md,
// "Schedules"; docs/decisions.md, "Recurring schedules").
//
// A client only writes and reads the definitions: a JSON object per name in
// the HASH P:{T}:schedules, each change followed by
// PUBLISH P:{T}:schedules <name> so the firers look at once. It fires
// nothing: every `punctual serve` runs a firer that enqueues the
// occurrences, exactly once across hosts, up to a minute ahead.
//
// A change takes the firers' lock (P:{T}:schedules:lock) as the Rust library
// does, so no firer pass interleaves with it. Pause, remove and a change of
// timing take back the occurrences fired ahead and not yet due with the
// `unfire` script, and lower the watermark to now. The Rust library lists
// them from the schedule's timing; a client has no cron parser, so it reads
// them from P:{T}:fired (each partition's) instead: every occurrence fired
// ahead was fired within the last minute, and its id `<name>@<ms>` names its
// time.

const { InvalidInput, MAX_DELAY_MS, encodeOptions, quote, validateTopic, wholeMs } = require('./validate');

const crypto = require('node:crypto');

const MAX_NAME_LEN = 100;
const MAX_BATCH = 1000;
// The firers' lock: held this long at most (SET NX PX), as the Rust library.
const LOCK_MS = 10000;
// How far back P:{T}:fired is read for occurrences fired ahead: a firer
// enqueues an occurrence at most a minute (punctual::schedule::AHEAD) before
// it; 5 minutes leave room for clocks of cluster nodes that differ.
const FIRED_LOOKBACK_MS = 300000;
// How long fired marks live (7 days): the longest spread window take-back reads.
const FIRED_KEEP_MS = 604800000;
const UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const MIN_EVERY_MS = 1000;
const CATCH_UP = ['all', 'latest', 'skip', 'spread'];
const FIELDS = ['cron', 'everyMs', 'tz', 'payload', 'maxAttempts', 'expireMs', 'timeoutMs', 'group', 'catchUp', 'spreadMs', 'paused'];

/** A schedule name: 1 to 100 bytes of [A-Za-z0-9_.-]. */
function validateName(name) {
  if (typeof name !== 'string') throw new InvalidInput(`invalid schedule name ${String(name)}: give a string`);
  if (!/^[A-Za-z0-9_.-]{1,100}$/.test(name)) {
    throw new InvalidInput(
      `invalid schedule name ${quote(name)}: schedule names are 1 to ${MAX_NAME_LEN} bytes of letters, digits and _ . -`,
    );
  }
}

/** Checks a schedule; returns it as stored (PROTOCOL.md's key order), created_ms still 0. */
function build(name, spec, maxPayload) {
  for (const k of Object.keys(spec)) {
    if (!FIELDS.includes(k)) {
      throw new InvalidInput(`unknown schedule field '${k}'; the fields are: ${FIELDS.join(', ')}`);
    }
  }
  const { cron = null, everyMs = null, payload = '', catchUp = 'all', spreadMs = null, paused = false } = spec;
  let tz = spec.tz ?? null;
  const bad = (why) => new InvalidInput(`schedule ${quote(name)}: ${why}`);
  if ((cron === null) === (everyMs === null)) throw bad('give exactly one of a cron expression and an interval');
  const s = { name };
  if (cron !== null) {
    if (typeof cron !== 'string' || ![5, 6].includes(cron.trim().split(/\s+/).length)) {
      throw new InvalidInput(`invalid cron ${quote(String(cron))}: a cron expression has 5 fields, or 6 with seconds first`);
    }
    tz ??= 'UTC';
    if (typeof tz !== 'string' || tz.trim() === '' || /\s/.test(tz)) {
      throw new InvalidInput(`invalid time zone ${quote(String(tz))}: give an IANA zone name such as Europe/Berlin`);
    }
    s.cron = cron;
    s.tz = tz;
  } else {
    const every = wholeMs(everyMs);
    if (every === null) throw new InvalidInput(`invalid interval ${String(everyMs)}: give milliseconds as a number`);
    if (every < MIN_EVERY_MS || every > MAX_DELAY_MS) {
      throw new InvalidInput(`invalid interval ${every}ms: an interval is at least ${MIN_EVERY_MS} ms and at most ten years`);
    }
    if (tz !== null) throw bad('a time zone is only for cron schedules');
    s.every_ms = every;
  }
  if (!CATCH_UP.includes(catchUp)) {
    throw new InvalidInput(`invalid catch-up ${quote(String(catchUp))}: give all, latest, skip or spread`);
  }
  let spread = null;
  if (catchUp === 'spread') {
    if (spreadMs === null) throw bad('catch-up spread needs a spread window (ms)');
    spread = wholeMs(spreadMs);
    if (spread === null) throw new InvalidInput(`invalid spread window ${String(spreadMs)}: give milliseconds as a number`);
    if (spread < 1 || spread > MAX_DELAY_MS) {
      throw new InvalidInput(`invalid spread window ${spread}ms: a spread window is at least 1 ms and at most ten years`);
    }
  } else if (spreadMs !== null) {
    throw bad('a spread window is only for catch-up spread');
  }
  if (typeof paused !== 'boolean') throw new InvalidInput(`invalid paused ${String(paused)}: give true or false`);
  const options = encodeOptions(spec);
  let text = payload;
  if (Buffer.isBuffer(text)) {
    text = text.toString();
    if (!Buffer.from(text).equals(payload)) throw new InvalidInput("a schedule's payload must be UTF-8 text (it is stored in JSON)");
  } else if (typeof text !== 'string') {
    throw new InvalidInput('payload must be a string or a Buffer (use JSON.stringify for JSON)');
  }
  const size = Buffer.byteLength(text);
  if (size > maxPayload) {
    throw new InvalidInput(
      `payload is ${size} bytes, over the ${maxPayload}-byte limit ` +
        '(raise max_payload or store the data elsewhere and enqueue a reference)',
    );
  }
  Object.assign(s, { payload: text, options, catch_up: catchUp, spread_ms: spread, paused, created_ms: 0 });
  return s;
}

const parse = (name, raw) => {
  try {
    const s = JSON.parse(raw);
    if (s !== null && typeof s === 'object' && !Array.isArray(s)) return s;
  } catch {
    // below
  }
  return { name, unreadable: String(raw) };
};

/** The schedule operations of a Producer (its schedule* methods). */
class Schedules {
  /**
   * @param {{physicals: (topic: string) => Promise<string[]>,
   *   unfire: (physical: string, ids: string[]) => Promise<number>}} producer
   *   the partitions of a topic (or the topic), and the unfire script on one
   */
  constructor(client, prefix, maxPayload, producer) {
    this.client = client; // replies as strings
    this.prefix = prefix;
    this.maxPayload = maxPayload;
    this.producer = producer;
  }

  /**
   * Runs `change` holding the firers' lock of `topic` (waiting while a
   * firer's pass or another change holds it), then releases it.
   */
  async locked(topic, change) {
    const key = this.key(topic, ':lock');
    const token = crypto.randomBytes(8).toString('hex');
    const deadline = Date.now() + LOCK_MS + 2000;
    while ((await this.client.set(key, token, { condition: 'NX', expiration: { type: 'PX', value: LOCK_MS } })) === null) {
      if (Date.now() > deadline) {
        throw new Error(`the schedules' lock ${key} stayed held for over ${LOCK_MS / 1000 + 2} s; try again`);
      }
      await sleep(20);
    }
    try {
      return await change();
    } finally {
      await this.client.eval(UNLOCK, { keys: [key], arguments: [token] }).catch(() => {}); // else it expires
    }
  }

  /**
   * Under the lock: takes back, with the unfire script, the occurrences of
   * schedule `name`, `s` (as stored: for a new timing, the old one) that are
   * not due yet, and lowers its watermark to now when it was ahead. Those
   * are the ones fired ahead (now < o <= watermark) and, for catch-up
   * `spread`, also the missed ones whose due time was spread ahead of now:
   * every `<name>@<digits>` marked in P:{T}:fired within the spread window
   * (at most the 7 days marks live) plus 5 minutes for the clocks of nodes
   * that differ (unfire leaves any already due alone), as PROTOCOL.md's
   * unfire section says. Returns how many were taken back.
   */
  async takeBack(topic, name, s) {
    const now = await this.nowMs();
    const raw = await this.client.hGet(this.key(topic, ':last'), name);
    if (raw == null || !/^[0-9]+$/.test(String(raw))) return 0;
    const wm = Number(raw);
    const spread = s?.catch_up === 'spread' && Number.isSafeInteger(s?.spread_ms);
    const since = now - FIRED_LOOKBACK_MS - (spread ? Math.min(s.spread_ms, FIRED_KEEP_MS) : 0);
    const head = `${name}@`;
    let removed = 0;
    for (const physical of await this.producer.physicals(topic)) {
      const fired = `${this.prefix}:{${physical}}:fired`;
      const ids = [];
      // Pages by score: each starts at the last page's highest score, past
      // the ids already read at it (an offset is walked entry by entry).
      let [from, skip] = [since, 0];
      for (;;) {
        const page = await this.client.zRangeByScoreWithScores(fired, String(from), '+inf', {
          LIMIT: { offset: skip, count: MAX_BATCH },
        });
        for (const { value } of page) {
          const id = String(value);
          const at = id.slice(head.length);
          if (id.startsWith(head) && /^[0-9]+$/.test(at) && (spread || (Number(at) > now && Number(at) <= wm))) ids.push(id);
        }
        if (page.length > 0) {
          const last = Number(page[page.length - 1].score);
          let atLast = 0;
          for (let i = page.length - 1; i >= 0 && Number(page[i].score) === last; i--) atLast++;
          if (last === from) skip += atLast;
          else [from, skip] = [last, atLast];
        }
        if (page.length < MAX_BATCH) break;
      }
      for (let i = 0; i < ids.length; i += MAX_BATCH) {
        removed += await this.producer.unfire(physical, ids.slice(i, i + MAX_BATCH));
      }
    }
    if (wm > now) await this.client.hSet(this.key(topic, ':last'), name, String(now));
    return removed;
  }

  key(topic, suffix = '') {
    return `${this.prefix}:{${topic}}:schedules${suffix}`;
  }

  async nowMs() {
    const t = await this.client.time();
    return Array.isArray(t) ? Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000) : t.getTime();
  }

  async read(topic, name) {
    const raw = await this.client.hGet(this.key(topic), name);
    return raw == null ? null : parse(name, raw);
  }

  async store(topic, s) {
    await this.client.hSet(this.key(topic), s.name, JSON.stringify(s));
  }

  async add(topic, name, spec = {}) {
    validateTopic(topic);
    validateName(name);
    const s = build(name, spec, this.maxPayload);
    await this.locked(topic, async () => {
      const old = await this.read(topic, name);
      // A schedule written again keeps its creation time: the phase of an
      // interval, and the start of its watermark. A new timing takes back
      // what the old one fired ahead.
      s.created_ms = Number.isSafeInteger(old?.created_ms) ? old.created_ms : await this.nowMs();
      if (old !== null && ['cron', 'every_ms', 'tz'].some((f) => (old[f] ?? null) !== (s[f] ?? null))) {
        await this.takeBack(topic, name, old);
      }
      await this.store(topic, s);
    });
    await this.client.publish(this.key(topic), name);
    return s;
  }

  async list(topic) {
    validateTopic(topic);
    const all = await this.client.hGetAll(this.key(topic));
    return Object.entries(all)
      .map(([name, raw]) => parse(name, raw))
      .sort((a, b) => (String(a.name) < String(b.name) ? -1 : String(a.name) > String(b.name) ? 1 : 0));
  }

  async setPaused(topic, name, paused) {
    validateTopic(topic);
    validateName(name);
    const found = await this.locked(topic, async () => {
      const s = await this.read(topic, name);
      if (s === null) return false;
      if ('unreadable' in s) throw new InvalidInput(`schedule ${quote(name)} is not readable JSON; add it again`);
      if (paused) await this.takeBack(topic, name, s);
      s.paused = paused;
      await this.store(topic, s);
      return true;
    });
    if (found) await this.client.publish(this.key(topic), name);
    return found;
  }

  async remove(topic, name) {
    validateTopic(topic);
    validateName(name);
    const found = await this.locked(topic, async () => {
      const s = await this.read(topic, name);
      if (s === null) return false;
      await this.takeBack(topic, name, s); // an unreadable one: as not spread
      await this.client.hDel(this.key(topic), name);
      await this.client.hDel(this.key(topic, ':last'), name);
      return true;
    });
    if (found) await this.client.publish(this.key(topic), name);
    return found;
  }
}

module.exports = { Schedules, validateName };
