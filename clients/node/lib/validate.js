'use strict';
// The checks the Rust library makes before anything reaches Redis, with its
// messages (crates/punctual/src/keys.rs, job.rs, queue.rs).

const MAX_TOPIC_LEN = 100;
const MAX_ID_LEN = 200;
const MAX_DELAY_MS = 315360000000; // ten years
const MAX_ATTEMPTS = 10000;
const MAX_GROUP_LEN = 64;

/** Bad input (topic, id, payload, delay, option): nothing was written. */
class InvalidInput extends Error {
  constructor(message) {
    super(message);
    this.name = 'InvalidInput';
  }
}

const isControl = (cp) => cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
// What Rust's {:?} writes as \u{...}: control, format, separator (but the
// space), private-use, surrogate and unassigned characters.
const UNPRINTABLE = /^[\p{Cc}\p{Cf}\p{Zs}\p{Zl}\p{Zp}\p{Co}\p{Cs}\p{Cn}]$/u;
// Characters that show nothing or reorder text (bidi controls and isolates,
// zero-width characters, the byte order mark, ...): the library's
// is_invisible (crates/punctual/src/keys.rs), which the enqueue script
// refuses too.
const INVISIBLE = [
  [0xad, 0xad], [0x600, 0x605], [0x61c, 0x61c], [0x6dd, 0x6dd], [0x70f, 0x70f],
  [0x115f, 0x1160], [0x180e, 0x180e], [0x200b, 0x200f], [0x202a, 0x202e],
  [0x2060, 0x206f], [0x3164, 0x3164], [0xfeff, 0xfeff], [0xffa0, 0xffa0],
  [0xfff9, 0xfffb], [0x110bd, 0x110bd], [0x110cd, 0x110cd], [0x1d173, 0x1d17a],
  [0xe0000, 0xe007f],
];
const isInvisible = (cp) => INVISIBLE.some(([lo, hi]) => cp >= lo && cp <= hi);
// A lone surrogate: text with no UTF-8 form (Buffer.from would write U+FFFD).
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
// Unicode White_Space (Rust's char::is_whitespace).
const WHITESPACE = /[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u;

/** A string quoted as Rust's `{:?}` does, so messages match the CLI's. */
function quote(s) {
  let out = '"';
  for (const c of s) {
    const cp = c.codePointAt(0);
    if (c === '"' || c === '\\') out += '\\' + c;
    else if (c === '\n') out += '\\n';
    else if (c === '\r') out += '\\r';
    else if (c === '\t') out += '\\t';
    else if (cp === 0) out += '\\0';
    else if (c !== ' ' && UNPRINTABLE.test(c)) out += `\\u{${cp.toString(16)}}`;
    else out += c;
  }
  return out + '"';
}

const hasControl = (s) => [...s].some((c) => isControl(c.codePointAt(0)));

function validateTopic(topic) {
  if (typeof topic !== 'string') throw new InvalidInput(`invalid topic ${String(topic)}: give a string`);
  const bad = (why) => new InvalidInput(`invalid topic ${quote(topic)}: ${why}`);
  if (topic === '') throw bad('topic names may not be empty');
  if (LONE_SURROGATE.test(topic)) throw bad('topic names must be valid UTF-8');
  if (Buffer.byteLength(topic) > MAX_TOPIC_LEN) throw bad(`topic names are at most ${MAX_TOPIC_LEN} bytes`);
  if (topic.includes('{') || topic.includes('}')) throw bad('topic names may not contain braces');
  if (topic.includes('#')) throw bad("'#' is reserved for partitions");
  if (WHITESPACE.test(topic) || hasControl(topic)) {
    throw bad('topic names may not contain spaces or control characters');
  }
  for (const c of topic) {
    const cp = c.codePointAt(0);
    if (isInvisible(cp)) {
      const hex = cp.toString(16).toUpperCase().padStart(4, '0');
      throw bad(`topic names may not contain invisible or bidirectional formatting characters (U+${hex})`);
    }
  }
}

function validateId(id) {
  if (typeof id !== 'string') throw new InvalidInput(`invalid id ${String(id)}: give a string`);
  if (id === '') {
    throw new InvalidInput('invalid id "": ids may not be empty (leave the id out to have one generated)');
  }
  if (LONE_SURROGATE.test(id)) throw new InvalidInput('invalid id: ids must be valid UTF-8');
  const n = Buffer.byteLength(id);
  if (n > MAX_ID_LEN) throw new InvalidInput(`invalid id: ${n} bytes, ids are at most ${MAX_ID_LEN} bytes`);
  if (hasControl(id)) throw new InvalidInput(`invalid id ${quote(id)}: ids may not contain control characters`);
}

function validatePrefix(prefix) {
  if (typeof prefix !== 'string' || prefix === '' || /[{}]/.test(prefix)) {
    throw new InvalidInput(
      `invalid prefix ${quote(String(prefix))}: prefixes must be non-empty and may not contain braces`,
    );
  }
}

/**
 * Milliseconds as a whole number: a finite number rounded up (1.5 -> 2, so a
 * job is never due early), else null. The scripts take plain decimal digits
 * only, so "1.5e3" or "60000.5" never reach Redis.
 */
function wholeMs(v) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return null;
  const ms = Math.ceil(v);
  return Number.isSafeInteger(ms) ? ms : null;
}

/** The script's encoding of a due time: `d<ms>` or `a<epoch ms>`. `at` may be a Date or epoch ms. */
function encodeWhen({ delayMs, at } = {}) {
  if (delayMs != null && at != null) throw new InvalidInput('give a delay or a due time, not both');
  if (at != null) {
    const ms = wholeMs(at instanceof Date ? at.getTime() : at);
    if (ms === null) {
      throw new InvalidInput(`invalid due time ${String(at)}: give a Date or epoch milliseconds as a number`);
    }
    if (ms < 0) throw new InvalidInput('invalid due time: before 1970; give a time after the epoch');
    return `a${ms}`;
  }
  if (delayMs == null) return 'd0';
  const given = delayMs;
  delayMs = wholeMs(given);
  if (delayMs === null) {
    throw new InvalidInput(`invalid delay ${String(given)}: give milliseconds as a number`);
  }
  if (delayMs < 0) throw new InvalidInput(`invalid delay ${delayMs}ms: delays may not be negative`);
  if (delayMs > MAX_DELAY_MS) {
    throw new InvalidInput(`invalid delay ${Math.floor(delayMs / 1000)}s: delays are at most ten years`);
  }
  return `d${delayMs}`;
}

/** An expiry or a timeout: whole ms (rounded up), 1 ms to ten years. */
function windowMs(what, article, given) {
  const ms = wholeMs(given);
  if (ms === null) throw new InvalidInput(`invalid ${what} ${String(given)}: give milliseconds as a number`);
  if (ms < 1 || ms > MAX_DELAY_MS) {
    throw new InvalidInput(`invalid ${what} ${ms}ms: ${article} ${what} is at least 1 ms and at most ten years`);
  }
  return ms;
}

/** A group name: 1 to 64 bytes of [A-Za-z0-9_.@-]. */
function validateGroup(group) {
  if (typeof group !== 'string') throw new InvalidInput(`invalid group ${String(group)}: give a string`);
  if (!/^[A-Za-z0-9_.@-]{1,64}$/.test(group)) {
    throw new InvalidInput(
      `invalid group ${quote(group)}: a group is 1 to ${MAX_GROUP_LEN} bytes of ASCII letters, digits, _ . @ -`,
    );
  }
}

const MAX_TRACESTATE_LEN = 512;

/**
 * A W3C traceparent: `version-traceid-spanid-flags`, 2, 32, 16 and 2
 * lowercase hex digits, the version not `ff`, neither id all zeros.
 */
function validateTraceparent(tp) {
  if (typeof tp !== 'string') throw new InvalidInput(`invalid traceparent ${String(tp)}: give a string`);
  let why = null;
  if (!/^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/.test(tp)) {
    why = 'not four dash-separated fields of lowercase hex';
  } else if (tp.startsWith('ff')) why = 'version ff is invalid';
  else if (/^0+$/.test(tp.slice(3, 35))) why = 'the trace id is all zeros';
  else if (/^0+$/.test(tp.slice(36, 52))) why = 'the parent span id is all zeros';
  if (why) {
    throw new InvalidInput(
      `invalid traceparent ${quote(tp)}: ${why}; a W3C traceparent is version-traceid-spanid-flags, ` +
        '2, 32, 16 and 2 lowercase hex digits, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    );
  }
}

/** A W3C tracestate: at most 512 bytes of printable ASCII. */
function validateTracestate(ts) {
  const bytes = typeof ts === 'string' ? Buffer.byteLength(ts) : 0;
  if (typeof ts !== 'string' || bytes > MAX_TRACESTATE_LEN || !/^[\x20-\x7e]*$/.test(ts)) {
    throw new InvalidInput(
      `invalid tracestate: a W3C tracestate is at most ${MAX_TRACESTATE_LEN} bytes of printable ASCII (got ${bytes} bytes)`,
    );
  }
}

// @opentelemetry/api, looked up once: undefined before, null when absent.
let otelApi;

/**
 * The active OpenTelemetry context's traceparent and tracestate (each null
 * when absent), read through `@opentelemetry/api` when it is installed and
 * a propagator is registered (the SDK's default: W3C Trace Context);
 * [null, null] otherwise. Not a dependency.
 */
function currentTraceContext(api) {
  if (api === undefined) {
    if (otelApi === undefined) {
      try {
        otelApi = require('@opentelemetry/api');
      } catch {
        otelApi = null;
      }
    }
    api = otelApi;
  }
  if (!api) return [null, null];
  const carrier = {};
  try {
    api.propagation.inject(api.context.active(), carrier);
  } catch {
    return [null, null];
  }
  const tp = carrier.traceparent ?? null;
  const ts = carrier.tracestate || null;
  try {
    validateTraceparent(tp);
    if (ts !== null) validateTracestate(ts);
  } catch {
    return [null, null];
  }
  return [tp, ts];
}

/** Tests only: the OpenTelemetry API to read (null: none; undefined: look it up). */
function useOpenTelemetry(api) {
  otelApi = api;
}

const escapeTracestate = (ts) => ts.replace(/%/g, '%25').replace(/;/g, '%3B').replace(/:/g, '%3A');

/**
 * The enqueue script's "max attempts" argument with the per-job options
 * (docs/PROTOCOL.md, "Per-job options"):
 * `<max>;x<ms>;t<ms>;g<group>;p<traceparent>;s<tracestate, escaped>`, each
 * part only when given; '' for none.
 */
function encodeOptions({ maxAttempts, expireMs, timeoutMs, group, traceparent, tracestate } = {}) {
  let out = '';
  if (maxAttempts != null) {
    const m = maxAttempts;
    if (!Number.isSafeInteger(m)) {
      throw new InvalidInput(`invalid max attempts ${String(m)}: give an integer from 1 to ${MAX_ATTEMPTS}`);
    }
    if (m < 1 || m > MAX_ATTEMPTS) {
      throw new InvalidInput(`invalid max attempts ${m}: max attempts must be at least 1 and at most ${MAX_ATTEMPTS}`);
    }
    out = String(m);
  }
  if (expireMs != null) out += `;x${windowMs('expiry', 'an', expireMs)}`;
  if (timeoutMs != null) out += `;t${windowMs('timeout', 'a', timeoutMs)}`;
  if (group != null) {
    validateGroup(group);
    out += `;g${group}`;
  }
  if (traceparent != null) validateTraceparent(traceparent);
  if (tracestate != null) {
    if (traceparent == null) throw new InvalidInput('a tracestate needs a traceparent: give both, or neither');
    validateTracestate(tracestate);
  }
  if (traceparent != null) {
    out += `;p${traceparent}`;
    if (tracestate) out += `;s${escapeTracestate(tracestate)}`;
  }
  return out;
}

const JOB_FIELDS = [
  'payload', 'id', 'delayMs', 'at', 'maxAttempts', 'backoffMs', 'expireMs', 'timeoutMs', 'group',
  'traceparent', 'tracestate',
];

/** Checks one job; returns [id or null, payload Buffer, when, max attempts and options, backoff]. */
function encodeJob(job, maxPayload) {
  for (const k of Object.keys(job)) {
    if (!JOB_FIELDS.includes(k)) {
      throw new InvalidInput(`unknown job field '${k}'; the fields are: ${JOB_FIELDS.join(', ')}`);
    }
  }
  const id = job.id ?? null;
  if (id !== null) validateId(id);
  let max;
  if (job.traceparent == null && job.tracestate == null) {
    const [traceparent, tracestate] = currentTraceContext();
    max = encodeOptions({ ...job, traceparent, tracestate });
  } else {
    max = encodeOptions(job);
  }
  let backoff = '';
  if (job.backoffMs != null) {
    if (!Array.isArray(job.backoffMs)) throw new InvalidInput('backoff must be a list of delays in milliseconds');
    const steps = [];
    for (const given of job.backoffMs) {
      const step = wholeMs(given);
      if (step === null) {
        throw new InvalidInput(`invalid backoff step ${String(given)}: give milliseconds as numbers`);
      }
      steps.push(step);
      if (step < 0) throw new InvalidInput(`invalid backoff step ${step}ms: steps may not be negative`);
      if (step > MAX_DELAY_MS) {
        throw new InvalidInput(`invalid backoff step ${Math.floor(step / 1000)}s: steps are at most ten years`);
      }
    }
    backoff = steps.join(',');
  }
  const when = encodeWhen(job);
  let payload = job.payload;
  if (typeof payload === 'string') payload = Buffer.from(payload);
  else if (payload instanceof Uint8Array) payload = Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  else throw new InvalidInput('payload must be a string or a Buffer (use JSON.stringify for JSON)');
  if (payload.length > maxPayload) {
    throw new InvalidInput(
      `payload is ${payload.length} bytes, over the ${maxPayload}-byte limit ` +
        '(raise max_payload or store the data elsewhere and enqueue a reference)',
    );
  }
  return [id, payload, when, max, backoff];
}

module.exports = {
  InvalidInput,
  MAX_DELAY_MS,
  MAX_ATTEMPTS,
  quote,
  validateTopic,
  validateId,
  validatePrefix,
  validateGroup,
  validateTraceparent,
  validateTracestate,
  currentTraceContext,
  useOpenTelemetry,
  wholeMs,
  encodeWhen,
  encodeOptions,
  encodeJob,
};
