'use strict';
// The checks the Rust library makes before anything reaches Redis, with its
// messages (crates/punctual/src/keys.rs, job.rs, queue.rs).

const MAX_TOPIC_LEN = 100;
const MAX_ID_LEN = 200;
const MAX_DELAY_MS = 315360000000; // ten years
const MAX_ATTEMPTS = 4294967295;

/** Bad input (topic, id, payload, delay, option): nothing was written. */
class InvalidInput extends Error {
  constructor(message) {
    super(message);
    this.name = 'InvalidInput';
  }
}

const isControl = (cp) => cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
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
    else if (isControl(cp)) out += `\\u{${cp.toString(16)}}`;
    else out += c;
  }
  return out + '"';
}

const hasControl = (s) => [...s].some((c) => isControl(c.codePointAt(0)));

function validateTopic(topic) {
  if (typeof topic !== 'string') throw new InvalidInput(`invalid topic ${String(topic)}: give a string`);
  const bad = (why) => new InvalidInput(`invalid topic ${quote(topic)}: ${why}`);
  if (topic === '') throw bad('topic names may not be empty');
  if (Buffer.byteLength(topic) > MAX_TOPIC_LEN) throw bad(`topic names are at most ${MAX_TOPIC_LEN} bytes`);
  if (topic.includes('{') || topic.includes('}')) throw bad('topic names may not contain braces');
  if (topic.includes('#')) throw bad("'#' is reserved for partitions");
  if (WHITESPACE.test(topic) || hasControl(topic)) {
    throw bad('topic names may not contain spaces or control characters');
  }
}

function validateId(id) {
  if (typeof id !== 'string') throw new InvalidInput(`invalid id ${String(id)}: give a string`);
  if (id === '') {
    throw new InvalidInput('invalid id "": ids may not be empty (leave the id out to have one generated)');
  }
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

/** The script's encoding of a due time: `d<ms>` or `a<epoch ms>`. `at` may be a Date or epoch ms. */
function encodeWhen({ delayMs, at } = {}) {
  if (delayMs != null && at != null) throw new InvalidInput('give a delay or a due time, not both');
  if (at != null) {
    const ms = at instanceof Date ? at.getTime() : at;
    if (!Number.isSafeInteger(ms)) {
      throw new InvalidInput(`invalid due time ${String(at)}: give a Date or epoch milliseconds as an integer`);
    }
    if (ms < 0) throw new InvalidInput('invalid due time: before 1970; give a time after the epoch');
    return `a${ms}`;
  }
  if (delayMs == null) return 'd0';
  if (!Number.isSafeInteger(delayMs)) {
    throw new InvalidInput(`invalid delay ${String(delayMs)}: give milliseconds as an integer`);
  }
  if (delayMs < 0) throw new InvalidInput(`invalid delay ${delayMs}ms: delays may not be negative`);
  if (delayMs > MAX_DELAY_MS) {
    throw new InvalidInput(`invalid delay ${Math.floor(delayMs / 1000)}s: delays are at most ten years`);
  }
  return `d${delayMs}`;
}

const JOB_FIELDS = ['payload', 'id', 'delayMs', 'at', 'maxAttempts', 'backoffMs'];

/** Checks one job; returns [id or null, payload Buffer, when, max attempts, backoff]. */
function encodeJob(job, maxPayload) {
  for (const k of Object.keys(job)) {
    if (!JOB_FIELDS.includes(k)) {
      throw new InvalidInput(`unknown job field '${k}'; the fields are: ${JOB_FIELDS.join(', ')}`);
    }
  }
  const id = job.id ?? null;
  if (id !== null) validateId(id);
  let max = '';
  if (job.maxAttempts != null) {
    if (!Number.isSafeInteger(job.maxAttempts)) throw new InvalidInput('max attempts must be a positive integer');
    if (job.maxAttempts < 1) throw new InvalidInput('max attempts must be at least 1');
    if (job.maxAttempts > MAX_ATTEMPTS) throw new InvalidInput(`max attempts must be at most ${MAX_ATTEMPTS}`);
    max = String(job.maxAttempts);
  }
  let backoff = '';
  if (job.backoffMs != null) {
    if (!Array.isArray(job.backoffMs)) throw new InvalidInput('backoff must be a list of delays in milliseconds');
    for (const step of job.backoffMs) {
      if (!Number.isSafeInteger(step)) {
        throw new InvalidInput(`invalid backoff step ${String(step)}: give milliseconds as integers`);
      }
      if (step < 0) throw new InvalidInput(`invalid backoff step ${step}ms: steps may not be negative`);
      if (step > MAX_DELAY_MS) {
        throw new InvalidInput(`invalid backoff step ${Math.floor(step / 1000)}s: steps are at most ten years`);
      }
    }
    backoff = job.backoffMs.join(',');
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
  quote,
  validateTopic,
  validateId,
  validatePrefix,
  encodeWhen,
  encodeJob,
};
