'use strict';
// The resident handler loop of `punctual serve` (docs/RESIDENT.md, protocol
// 1): jobs arrive on fd 3 and replies go to fd 4, one JSON object per line.
// stdout and stderr are not part of the protocol: console.log freely.

const fs = require('node:fs');
const net = require('node:net');

const PROTOCOL = 1;

/** Throw to have the job retried, after `delayMs` (default: the topic's backoff ladder). */
class Retry extends Error {
  constructor(message = '', delayMs = null) {
    super(message);
    this.name = 'Retry';
    this.delayMs = delayMs;
  }
}

/** Throw to send the job straight to the dead set (a permanent failure). */
class Dead extends Error {
  constructor(reason = '') {
    super(reason);
    this.name = 'Dead';
  }
}

/** The key of Job#once's marker. */
const onceKey = (prefix, topic, id, step) => `${prefix}:once:${topic}:${id}:${step}`;

/** One delivery of a job. */
class Job {
  constructor(msg) {
    this.id = String(msg.id);
    this.topic = String(msg.topic ?? '');
    this.attempt = Number(msg.attempt ?? 1);
    this.maxAttempts = Number(msg.max_attempts ?? 0);
    this.dueMs = Number(msg.due_ms ?? 0);
    this.createdMs = Number(msg.created_ms ?? 0);
    this.timeoutMs = Number(msg.timeout_ms ?? 0);
    /** The producer's W3C trace context (the parent span when serve exports spans), or null. */
    this.traceparent = msg.traceparent ?? null;
    this.tracestate = msg.tracestate ?? null;
    this._controller = null;
    this._aborted = undefined;
    /** Exactly the bytes the producer enqueued. */
    this.payload =
      msg.payload_b64 != null ? Buffer.from(msg.payload_b64, 'base64') : Buffer.from(String(msg.payload ?? ''));
  }

  /**
   * An AbortSignal that aborts when an operator cancels the job while it
   * runs. Made on first use: most handlers never look, and a controller per
   * job is a measurable part of a no-op job's cost.
   */
  get signal() {
    if (this._controller === null) {
      this._controller = new AbortController();
      if (this._aborted !== undefined) this._controller.abort(this._aborted);
    }
    return this._controller.signal;
  }

  /** Aborts `signal` (now, or when it is first asked for). */
  _abort(reason) {
    if (this._aborted !== undefined) return;
    this._aborted = reason;
    this._controller?.abort(reason);
  }

  /** The payload as text (UTF-8). */
  get text() {
    return this.payload.toString();
  }

  /** The payload parsed as JSON. */
  json() {
    return JSON.parse(this.text);
  }

  /**
   * Runs `fn` unless step `step` of this job already succeeded within
   * `ttlSeconds`; resolves to whether it ran. The marker is
   * `SET prefix:once:TOPIC:ID:STEP 1 NX EX ttl`, written after fn resolves.
   * At least once, not exactly once: if the process dies between the side
   * effect and the marker, or two deliveries run at the same time (a lost
   * lease), the step runs again. `client`: node-redis or ioredis. Also pass the other side an idempotency key
   * where it takes one (e.g. `${job.id}:${step}`).
   */
  async once(client, step, ttlSeconds, fn, { prefix = 'punctual' } = {}) {
    const { isIoredis, fromIoredis } = require('./clients');
    if (isIoredis(client)) client = fromIoredis(client, false);
    const key = onceKey(prefix, this.topic, this.id, step);
    if (await client.exists(key)) return false;
    await fn();
    await client.set(key, '1', { condition: 'NX', expiration: { type: 'EX', value: ttlSeconds } });
    return true;
  }
}

/** The reply for a handler's outcome: done (no error), or the error's. */
function replyFor(id, err) {
  if (err === undefined) return { type: 'done', id };
  if (err instanceof Dead) return { type: 'dead', id, error: err.message };
  if (err instanceof Retry) {
    const r = { type: 'retry', id, error: err.message };
    // Whole ms, rounded up; anything but a finite number is left to the
    // topic's backoff ladder.
    const d = err.delayMs;
    if (typeof d === 'number' && Number.isFinite(d)) r.delay_ms = Math.max(0, Math.ceil(d));
    return r;
  }
  const cls = err?.constructor?.name ?? 'Error';
  return { type: 'retry', id, error: err instanceof Error ? `${cls}: ${err.message}` : `thrown: ${String(err)}` };
}

/**
 * Refuses to run outside `punctual serve`: serve sets PUNCTUAL_PROTOCOL, and
 * only then are fds 3 and 4 its pipes (run by hand, they may be anything the
 * shell or the interpreter left open).
 */
function checkProtocol() {
  const v = process.env.PUNCTUAL_PROTOCOL;
  if (v === undefined || v === '') {
    throw new Error(
      'punctual: PUNCTUAL_PROTOCOL is not set: this program is a resident handler; run it under `punctual serve` ' +
        '(a topic with resident = [...]), which sets it and sends jobs on fd 3; see docs/RESIDENT.md',
    );
  }
  if (v !== String(PROTOCOL)) {
    throw new Error(
      `punctual: PUNCTUAL_PROTOCOL is ${JSON.stringify(v)}; this client speaks protocol ${PROTOCOL}: ` +
        'use a client release that matches your punctual serve',
    );
  }
}

function openFd(env, fallback) {
  const fd = Number(process.env[env] ?? fallback);
  try {
    fs.fstatSync(fd);
  } catch {
    throw new Error(
      `punctual: fd ${fd} is not open: run this program under \`punctual serve\` ` +
        '(a topic with resident = [...]); see docs/RESIDENT.md',
    );
  }
  return fd;
}

/**
 * A stream over one of serve's pipes. A pipe is read through libuv's event
 * loop (net.Socket): a read on the thread pool (fs.createReadStream) would
 * sit blocked in read(2), and keep the process alive after process.exit, an
 * uncaught exception or an unhandled rejection. Anything else (a file, in a
 * test) falls back to the fs streams.
 */
function pipeStream(fd, readable) {
  const kind = fs.fstatSync(fd);
  if (kind.isFIFO() || kind.isSocket()) {
    return new net.Socket({ fd, readable, writable: !readable });
  }
  return readable ? fs.createReadStream(null, { fd }) : fs.createWriteStream(null, { fd });
}

/**
 * Says ready, then runs `handler(job)` for each job punctual sends, up to
 * `inflight` at once (async handlers run concurrently), until fd 3 ends
 * (EOF: punctual wants the program to exit); then waits for the jobs in
 * hand and resolves. Resolving normally: done; throwing Retry: retry;
 * Dead: dead; anything else: retry with its class and message as the error.
 * When an operator cancels a job while it runs (docs/RESIDENT.md, "Cancel"),
 * its `job.signal` (an AbortSignal) aborts: a handler that watches it and
 * stops in time keeps the program; its reply is not recorded.
 */
async function run(handler, { inflight = 1 } = {}) {
  if (!Number.isInteger(inflight) || inflight < 1 || inflight > 1000) {
    throw new RangeError('inflight must be 1 to 1000');
  }
  checkProtocol();
  const jobsFd = openFd('PUNCTUAL_JOBS_FD', 3);
  const repliesFd = openFd('PUNCTUAL_REPLIES_FD', 4);
  const out = pipeStream(repliesFd, false);
  // The replies of one turn of the event loop leave in one write: serve
  // then reads them in one wake-up.
  let corked = false;
  const uncork = () => {
    corked = false;
    out.uncork();
  };
  const send = (msg) => {
    if (!corked) {
      corked = true;
      out.cork();
      process.nextTick(uncork);
    }
    out.write(JSON.stringify(msg) + '\n');
  };
  send({ type: 'ready', protocol: PROTOCOL, inflight });

  const pending = new Set();
  const running = new Map(); // id -> Job
  const take = (line) => {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      return;
    }
    if (msg !== null && typeof msg === 'object' && msg.type === 'cancel') {
      running.get(String(msg.id))?._abort(new Error('cancelled by an operator'));
      return;
    }
    if (msg === null || typeof msg !== 'object' || msg.type !== 'job') return; // later versions may add types
    const job = new Job(msg);
    running.set(job.id, job);
    const p = Promise.resolve()
      .then(() => handler(job))
      .then(
        () => send(replyFor(job.id)),
        (err) => send(replyFor(job.id, err)),
      )
      .finally(() => {
        pending.delete(p);
        if (running.get(job.id) === job) running.delete(job.id);
      });
    pending.add(p);
  };
  // fd 3 split in lines here: readline's async iterator costs more per
  // line than a no-op job.
  const input = pipeStream(jobsFd, true);
  input.setEncoding('utf8');
  await new Promise((resolve, reject) => {
    let buf = '';
    input.on('data', (chunk) => {
      buf += chunk;
      let from = 0;
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n', from)) {
        take(buf.slice(from, i));
        from = i + 1;
      }
      buf = buf.slice(from);
    });
    input.on('end', () => {
      if (buf !== '') take(buf);
      resolve();
    });
    input.on('error', reject);
  });
  await Promise.all(pending);
  await new Promise((resolve) => out.end(resolve));
}

module.exports = { run, Job, Retry, Dead, replyFor, onceKey, PROTOCOL };
