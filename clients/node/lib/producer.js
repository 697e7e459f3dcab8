'use strict';
// Enqueues and inspects punctual jobs from Node, through punctual's own Lua
// scripts (copies in ../lua, identical to `punctual script NAME`), called by
// EVALSHA. On NOSCRIPT the script is sent once with EVAL, which also caches
// it on the node that holds the keys (so this works on Redis Cluster too).

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const zlib = require('node:zlib');
const { RESP_TYPES } = require('redis');
const { InvalidInput, encodeJob, encodeWhen, validateId, validatePrefix, validateTopic } = require('./validate');
const { Schedules } = require('./schedules');
const { adapt } = require('./clients');

/** The audit trail keeps this many entries, the newest (docs/PROTOCOL.md, "Audit trail"). */
const AUDIT_MAX_ENTRIES = 10000;

const DEFAULT_PREFIX = 'punctual';
const DEFAULT_MAX_PAYLOAD = 64 * 1024;
const MAX_BATCH = 1000;
const MAX_PARTITIONS = 1024;
// Rounds of routing anew after the script refuses a stale partition count.
const STALE_ROUNDS = 5;
const KEYS = ['pool', 'ready', 'running', 'dead', 'jobs', 'meta', 'stats', 'seq', 'attempts'];
// Status 4 ("fired before") comes only with the fired key, which only
// punctual's schedule firer passes: here it is unknown, hence an error.
const STATUS = { 0: 'duplicate', 1: 'created', 2: 'replaced', 3: 'dead' };

/** The name of an enqueue status; an unknown one is an error, never taken for "created". */
function statusName(code) {
  const name = STATUS[Number(code)];
  if (name === undefined) throw new Error(`enqueue returned an unknown status ${code}`);
  return name;
}
const DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz';

/**
 * The ids the enqueue script generated for `n` jobs from `first` on, when
 * it skipped none: each the one before with its last four base-36 digits
 * counted up by one, modulo 36^4 (docs/PROTOCOL.md "enqueue").
 */
function followingIds(first, n) {
  const last = first.slice(-4);
  if (first.length < 4 || ![...last].every((c) => DIGITS.includes(c))) {
    throw new Error(`unexpected reply from Redis to enqueue: ${JSON.stringify(first)} is not a generated id`);
  }
  const stamp = first.slice(0, -4);
  const v = parseInt(last, 36);
  const ids = [];
  for (let j = 0; j < n; j++) ids.push(stamp + ((v + j) % 1679616).toString(36).padStart(4, '0'));
  return ids;
}

/** A batch that took several script calls failed part way. */
class PartialBatch extends Error {
  constructor(total, written, failed, source) {
    super(
      `${source.message} (the batch of ${total} jobs went in calls of up to 1,000: ` +
        `${written.size} written, ${failed.length} not; enqueue those again, ids make that safe)`,
      { cause: source },
    );
    this.name = 'PartialBatch';
    this.total = total;
    this.written = written; // Map: batch index -> {id, status}
    this.failed = failed; // batch indexes not written
  }
}

let table = null;
/** IEEE CRC-32, as zlib and PHP's crc32() compute it (zlib.crc32 needs Node 20.15). */
function crc32(buf) {
  if (typeof zlib.crc32 === 'function') return zlib.crc32(buf);
  if (!table) {
    table = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let j = 0; j < 8; j++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      table[n] = c >>> 0;
    }
  }
  let c = 0xffffffff;
  for (const b of buf) c = table[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** The partition of `id` among k: IEEE CRC-32 of its bytes, mod k. */
function partitionOf(id, k) {
  return k <= 1 ? 0 : crc32(Buffer.from(id)) % k;
}

const partitionName = (topic, i, k) => (k <= 1 ? topic : `${topic}#${i}`);

/** An id for a partitioned topic: 9 base-36 digits of the time in ms, then 12 random ones. */
function generateId() {
  let ms = Date.now();
  let head = '';
  for (let i = 0; i < 9; i++) {
    head = DIGITS[ms % 36] + head;
    ms = Math.floor(ms / 36);
  }
  for (let i = 0; i < 12; i++) head += DIGITS[crypto.randomInt(36)];
  return head;
}

/**
 * The script calls for the jobs `pending` (indexes into `encoded`): per
 * partition (of k), at most 1,000 each. A partitioned topic's missing ids are
 * made here, since the id picks the partition.
 */
function groupJobs(topic, k, pending, encoded) {
  const groups = [];
  const chunks = (idx) => {
    const out = [];
    for (let s = 0; s < idx.length; s += MAX_BATCH) out.push(idx.slice(s, s + MAX_BATCH));
    return out;
  };
  if (k <= 1) {
    for (const c of chunks(pending)) groups.push([topic, c]);
    return groups;
  }
  const byPart = new Map();
  for (const i of pending) {
    if (encoded[i][0] === null) encoded[i][0] = generateId();
    const p = partitionOf(encoded[i][0], k);
    if (!byPart.has(p)) byPart.set(p, []);
    byPart.get(p).push(i);
  }
  for (const p of [...byPart.keys()].sort((a, b) => a - b)) {
    for (const c of chunks(byPart.get(p))) groups.push([partitionName(topic, p, k), c]);
  }
  return groups;
}

const text = (v) => (Buffer.isBuffer(v) ? v.toString() : String(v));

/**
 * The options part of a record's first field as `get` returns it
 * (`;e<deadline base 36>;t<ms>;g<group>;p<traceparent>;s<tracestate>`, or
 * ''; an older get script returns none): {expiresAtMs, timeoutMs, group,
 * traceparent, tracestate}, null where not set.
 */
function parseOptions(s) {
  const out = { expiresAtMs: null, timeoutMs: null, group: null, traceparent: null, tracestate: null };
  for (const part of s.split(';').slice(1)) {
    const [letter, value] = [part.slice(0, 1), part.slice(1)];
    if (letter === 'e' && /^[0-9a-z]+$/.test(value)) out.expiresAtMs = parseInt(value, 36);
    else if (letter === 't' && /^[0-9]+$/.test(value)) out.timeoutMs = Number(value);
    else if (letter === 'g' && value !== '') out.group = value;
    else if (letter === 'p' && value !== '') out.traceparent = value;
    else if (letter === 's' && value !== '') {
      out.tracestate = value.replace(/%([0-9A-Fa-f]{2})/g, (_, h) => String.fromCharCode(parseInt(h, 16)));
    }
  }
  return out;
}

class Producer {
  /**
   * @param client a connected client of the `redis` package (createClient or
   *   createCluster), or an ioredis Redis or Cluster; replies are read as
   *   Buffers, so payloads keep their bytes. A command Redis answers LOADING
   *   is retried for up to 60 s (`limits.loadingWaitMs`).
   * @param {{prefix?: string, maxPayload?: number}} options
   */
  constructor(client, { prefix = DEFAULT_PREFIX, maxPayload = DEFAULT_MAX_PAYLOAD } = {}) {
    validatePrefix(prefix);
    if (!Number.isSafeInteger(maxPayload) || maxPayload < 1) {
      throw new InvalidInput(`invalid maxPayload ${String(maxPayload)}: give a number of bytes (an integer, at least 1)`);
    }
    const { buffers, strings } = adapt(client, RESP_TYPES);
    this.client = buffers;
    this.prefix = prefix;
    this.maxPayload = maxPayload;
    this.scripts = {};
    for (const name of ['enqueue', 'get', 'cancel', 'reschedule', 'unfire']) {
      const source = fs.readFileSync(path.join(__dirname, '..', 'lua', `${name}.lua`));
      this.scripts[name] = { source, sha: crypto.createHash('sha1').update(source).digest('hex') };
    }
    this.registered = new Set();
    this.partitionCache = new Map();
    this.schedules = new Schedules(strings, prefix, maxPayload, {
      physicals: async (topic) => {
        const k = await this.partitions(topic);
        return Array.from({ length: k }, (_, i) => partitionName(topic, i, k));
      },
      unfire: async (physical, ids) => Number(await this.call('unfire', physical, ids, { fired: true })),
    });
  }

  /** The nine keys of one topic (or partition `T#i`), in script order. */
  keys(topic) {
    return KEYS.map((n) => `${this.prefix}:{${topic}}:${n}`);
  }

  /**
   * EVALSHA of script `name` with the nine keys of `topic` (and, with
   * `fired`, its tenth, P:{T}:fired).
   */
  async call(name, topic, argv, { fired = false } = {}) {
    const { source, sha } = this.scripts[name];
    const keys = this.keys(topic);
    if (fired) keys.push(`${this.prefix}:{${topic}}:fired`);
    const options = { keys, arguments: argv.map((a) => (Buffer.isBuffer(a) ? a : String(a))) };
    try {
      try {
        return await this.client.evalSha(sha, options);
      } catch (e) {
        if (!String(e?.message).startsWith('NOSCRIPT')) throw e;
        // Empty script cache (restart, failover, SCRIPT FLUSH): EVAL runs the
        // text and caches it on the node that holds the keys.
        return await this.client.eval(source.toString(), options);
      }
    } catch (e) {
      const msg = String(e?.message);
      if (msg.startsWith('PUNCTUAL_INVALID ')) throw new InvalidInput(msg.slice('PUNCTUAL_INVALID '.length));
      throw e;
    }
  }

  /** How many partitions `topic` has (1: not partitioned); cached for 1 s. */
  async partitions(topic) {
    validateTopic(topic);
    const hit = this.partitionCache.get(topic);
    if (hit && Date.now() - hit.at < 1000) return hit.k;
    const v = await this.client.hGet(`${this.prefix}:partitions`, topic);
    const k = v == null ? 1 : Math.min(MAX_PARTITIONS, Math.max(1, parseInt(text(v), 10) || 1));
    this.partitionCache.set(topic, { k, at: Date.now() });
    return k;
  }

  async route(topic, id) {
    const k = await this.partitions(topic);
    return partitionName(topic, partitionOf(id, k), k);
  }

  /**
   * Enqueues one job: due now, `delayMs` after Redis gets it, or `at` (a
   * Date or epoch ms, Redis clock). Options: id (default: generated),
   * delayMs, at, maxAttempts, backoffMs (array of ms), replace, and the
   * per-job options (docs/PROTOCOL.md, "Per-job options"): expireMs (1 ms
   * to ten years: the job may start only until its due time plus this,
   * later it goes to dead unrun), timeoutMs (same range: the handler
   * timeout for this job instead of the topic's), group (1 to 64 bytes of
   * [A-Za-z0-9_.@-]: the group it is served fairly in), traceparent and
   * tracestate (W3C Trace Context: the producer's trace, handed to every
   * attempt's handler; without them, the active OpenTelemetry context's when
   * @opentelemetry/api is installed with a registered propagator).
   * @returns {Promise<{id: string, status: 'created'|'duplicate'|'replaced'|'dead'}>}
   */
  async enqueue(topic, payload, { replace = false, ...options } = {}) {
    return (await this.enqueueBatch(topic, [{ payload, ...options }], { replace }))[0];
  }

  /**
   * Enqueues jobs ({payload, ...options of enqueue}): one atomic script call
   * per 1,000 jobs (per partition). Every job is checked before anything is
   * written. An id given twice: the first wins, the others are duplicates.
   */
  async enqueueBatch(topic, jobs, { replace = false } = {}) {
    validateTopic(topic);
    if (jobs.length === 0) return [];
    const encoded = jobs.map((job, i) => {
      try {
        return encodeJob(job, this.maxPayload);
      } catch (e) {
        if (e instanceof InvalidInput && jobs.length > 1) throw new InvalidInput(`job ${i + 1}: ${e.message}`);
        throw e;
      }
    });
    const placed = new Array(jobs.length).fill(null);
    const first = new Set();
    encoded.forEach(([id], i) => {
      if (id === null) return;
      if (first.has(id)) placed[i] = { id, status: 'duplicate' };
      else first.add(id);
    });
    let pending = [...placed.keys()].filter((i) => placed[i] === null);
    const failed = [];
    let firstError = null;
    let rounds = 0;
    let accepted = false;
    while (pending.length > 0) {
      rounds += 1;
      const k = await this.partitions(topic);
      const stale = [];
      for (const [physical, idx] of groupJobs(topic, k, pending, encoded)) {
        try {
          const results = await this.enqueueCall(physical, k, replace, idx, encoded);
          idx.forEach((i, n) => {
            placed[i] = results[n];
          });
          accepted = true;
        } catch (e) {
          if (String(e?.message).startsWith('PUNCTUAL_STALE') && rounds < STALE_ROUNDS) {
            stale.push(...idx);
          } else {
            failed.push(...idx);
            firstError ??= e;
          }
        }
      }
      pending = stale.sort((a, b) => a - b);
      if (pending.length > 0) {
        // The partition count changed since it was read: read it again and
        // route those jobs anew.
        this.partitionCache.delete(topic);
        await new Promise((resolve) => setTimeout(resolve, 20 * rounds));
      }
    }
    if (accepted && !this.registered.has(topic)) {
      // Listed only once a script took a job: a refused call changes nothing.
      await this.client.sAdd(`${this.prefix}:topics`, topic);
      this.registered.add(topic);
    }
    if (firstError) {
      if (placed.every((p) => p === null || p.status === 'duplicate' || p.status === 'dead')) throw firstError;
      const written = new Map();
      placed.forEach((p, i) => p && written.set(i, p));
      throw new PartialBatch(jobs.length, written, failed.sort((a, b) => a - b), firstError);
    }
    return placed;
  }

  /**
   * One call of the enqueue script for the jobs `idx`, in the form the Rust
   * library sends for the same jobs (docs/PROTOCOL.md "enqueue"): one job,
   * or jobs that differ in max attempts or backoff, in the five-argument
   * form; jobs alike in all but id and payload in the shared form `=n`
   * (their when, max attempts and backoff once), jobs alike in max
   * attempts and backoff in `~n`; `=*n`, `~*n` when every id is to be
   * generated. Returns {id, status} per job, in the order of `idx`.
   */
  async enqueueCall(physical, k, replace, idx, encoded) {
    const n = idx.length;
    const first = encoded[idx[0]];
    const sameWhen = idx.every((i) => String(encoded[i][2]) === String(first[2]));
    const sameRest = idx.every((i) => String(encoded[i][3]) === String(first[3]) && String(encoded[i][4]) === String(first[4]));
    const genAll = idx.every((i) => encoded[i][0] === null);
    const form = n > 1 && sameRest ? (sameWhen ? '=' : '~') : null;
    const argv = [this.maxPayload, replace ? '1' : '0'];
    if (form === null) {
      argv.push(n);
      for (const i of idx) {
        const [id, payload, when, max, backoff] = encoded[i];
        argv.push(id ?? '', payload, when, max, backoff);
      }
    } else {
      argv.push(`${form}${genAll ? '*' : ''}${n}`);
      if (form === '=') argv.push(first[2]);
      argv.push(first[3], first[4]);
      for (const i of idx) {
        if (!genAll) argv.push(encoded[i][0] ?? '');
        argv.push(encoded[i][1]);
        if (form === '~') argv.push(encoded[i][2]);
      }
    }
    // The count routed with goes last: the script refuses the call
    // (PUNCTUAL_STALE, nothing written) when the topic has another.
    argv.push(k);
    const reply = await this.call('enqueue', physical, argv);
    const bad = (why) => new Error(`unexpected reply from Redis to enqueue: ${why}`);
    if (!Array.isArray(reply)) throw bad('an array expected');
    if (form === null) {
      if (reply.length !== 2 * n) throw bad('one result per job expected');
      return idx.map((_, j) => ({ id: text(reply[2 * j]), status: statusName(reply[2 * j + 1]) }));
    }
    // Shared forms: c, c ids (n when one was generated, 0 when all were
    // given), then pairs j, status for the jobs not created; or, all
    // generated, -1 and the first id, the others following it.
    const count = reply.length > 0 ? Number(reply[0]) : 0;
    if (count === -1 && genAll) {
      if (reply.length !== 2) throw bad('more after the first id');
      return followingIds(text(reply[1]), n).map((id) => ({ id, status: 'created' }));
    }
    if ((count !== 0 && count !== n) || reply.length < 1 + count || (reply.length - 1 - count) % 2 !== 0) {
      throw bad('one id per job expected');
    }
    if (count === 0 && idx.some((i) => encoded[i][0] === null)) throw bad('no ids returned for generated ones');
    const out = idx.map((i, j) => ({ id: count === 0 ? encoded[i][0] : text(reply[1 + j]), status: 'created' }));
    for (let p = 1 + count; p < reply.length; p += 2) {
      const j = Number(reply[p]) - 1;
      if (!(j >= 0 && j < n)) throw bad('a status for no job');
      out[j].status = statusName(reply[p + 1]);
    }
    return out;
  }

  /**
   * One job by id, or null when no such job is live: {id, state, attempts,
   * maxAttempts, dueMs, createdMs, stateSinceMs (lease deadline when running,
   * time of death when dead, else null), lastError (null if none), payload
   * (Buffer), nowMs (Redis's clock), and the per-job options: expiresAtMs
   * (the expiry deadline), timeoutMs, group (null when not set)}.
   */
  async get(topic, id) {
    validateTopic(topic);
    validateId(id);
    const r = await this.call('get', await this.route(topic, id), [id]);
    if (r == null) return null;
    const state = text(r[0]);
    const err = text(r[8]);
    return {
      id,
      state,
      attempts: Number(r[2]),
      maxAttempts: Number(r[3]),
      dueMs: Number(r[5]),
      createdMs: Number(r[6]),
      stateSinceMs: state === 'running' || state === 'dead' ? Number(r[1]) : null,
      lastError: err === '' ? null : err,
      payload: Buffer.isBuffer(r[9]) ? r[9] : Buffer.from(String(r[9])),
      nowMs: Number(r[10]),
      ...parseOptions(r.length > 11 && r[11] != null ? text(r[11]) : ''),
    };
  }

  /**
   * Cancels a job in any state: the state it was in, or null when it was
   * not live. A running job is stopped in flight: the worker holding it, on
   * any host, is told at once (docs/RESIDENT.md, "Cancel"). A cancel that
   * found the job is recorded in the audit trail (`punctual audit`) as the
   * CLI's is: who is `by` (default 'node'), from this host and pid; a failed
   * record is a process warning (`process.on('warning')`), and the cancel
   * stands.
   */
  async cancel(topic, id, { by = null } = {}) {
    validateTopic(topic);
    validateId(id);
    if (by != null && typeof by !== 'string') {
      throw new InvalidInput(`invalid by ${String(by)}: give who cancels, as text`);
    }
    const r = await this.call('cancel', await this.route(topic, id), [id]);
    if (r == null) return null; // nothing changed: not recorded
    const was = text(r);
    await this.audit(by, 'cancel', topic, { id, was });
    return was;
  }

  /**
   * Appends an entry to the audit trail (docs/PROTOCOL.md, "Audit trail"),
   * as the CLI does: LPUSH and LTRIM sent together, one round trip (not a
   * MULTI: the clients' pipelines differ, and the two touch one key; an
   * LTRIM lost with the connection is made by the next append). A failure
   * is a warning, not thrown: the change is made.
   */
  async audit(by, action, topic, detail) {
    const entry = JSON.stringify({
      at_ms: Date.now(),
      who: by || 'node',
      from: `${os.hostname()}/${process.pid}`,
      action,
      topic,
      detail,
    });
    const key = `${this.prefix}:audit`;
    try {
      await Promise.all([this.client.lPush(key, entry), this.client.lTrim(key, 0, AUDIT_MAX_ENTRIES - 1)]);
    } catch (e) {
      process.emitWarning(
        `punctual: the ${action} of job ${detail.id ?? '-'} of ${topic} was made, but the audit trail could not record it: ${e?.message ?? e}`,
      );
    }
  }

  /**
   * Gives a waiting job (pool or ready) a new due time ({delayMs} or {at};
   * now when neither). Returns the state it was in; a running or dead job is
   * left alone and its state returned; null when not live.
   */
  async reschedule(topic, id, when = {}) {
    validateTopic(topic);
    validateId(id);
    const w = encodeWhen(when);
    const r = await this.call('reschedule', await this.route(topic, id), [id, w]);
    return r == null ? null : text(r[0]);
  }

  // ---- schedules (docs/PROTOCOL.md, "Schedules") ----------------------

  /**
   * Adds or replaces the schedule `name` of `topic` (not a partition);
   * resolves to it as stored. `spec`: exactly one of `cron` (5 fields, or 6
   * with seconds first; its syntax is checked by `punctual serve`, which
   * fires it) with `tz` (an IANA zone, default UTC) and `everyMs` (at
   * least 1000); `payload` (text, default ''); maxAttempts, expireMs,
   * timeoutMs, group (as for enqueue); `catchUp` ('all' (default), 'latest',
   * 'skip', or 'spread' with `spreadMs`); `paused` (default false). Each
   * occurrence is a job with id `<name>@<occurrence ms>`. A schedule added
   * again keeps its creation time. This client fires nothing.
   */
  async scheduleAdd(topic, name, spec = {}) {
    return this.schedules.add(topic, name, spec);
  }

  /** The schedules of `topic` as stored, by name ({name, unreadable} for an entry that is not JSON). */
  async scheduleList(topic) {
    return this.schedules.list(topic);
  }

  /**
   * Removes a schedule (and its watermark); false when there was none.
   * Occurrences already enqueued stay: cancel them by id (`<name>@<ms>`).
   */
  async scheduleRemove(topic, name) {
    return this.schedules.remove(topic, name);
  }

  /** Pauses a schedule: it fires nothing until resumed. False when there is none. */
  async schedulePause(topic, name) {
    return this.schedules.setPaused(topic, name, true);
  }

  /** Resumes a schedule (the firer applies its catch-up policy to what was missed). False when there is none. */
  async scheduleResume(topic, name) {
    return this.schedules.setPaused(topic, name, false);
  }
}

module.exports = { Producer, PartialBatch, parseOptions, crc32, partitionOf, generateId, DEFAULT_PREFIX, DEFAULT_MAX_PAYLOAD };
