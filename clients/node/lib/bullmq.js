'use strict';
// BullMQ's Queue and Worker on punctual, so a BullMQ app changes its import
// line only: `const { Queue, Worker } = require('punctual/bullmq')`.
// The supported subset is listed in README.md ("Coming from BullMQ"); what
// is not supported throws, never silently does nothing.

const { Producer } = require('./producer');
const { run, Dead, Retry } = require('./worker');
const { isIoredis, isNodeRedis } = require('./clients');
const { InvalidInput } = require('./validate');

/** BullMQ's UnrecoverableError: the job goes to the dead set, no retry. */
class UnrecoverableError extends Dead {
  constructor(message = '') {
    super(message);
    this.name = 'UnrecoverableError';
  }
}

class NotSupported extends Error {
  constructor(what, instead) {
    super(`punctual/bullmq: ${what} is not supported by punctual${instead ? `; ${instead}` : ''} (see clients/node/README.md, "Coming from BullMQ")`);
    this.name = 'NotSupported';
  }
}

const JOB_OPTS = new Set(['delay', 'jobId', 'attempts', 'backoff', 'removeOnComplete', 'removeOnFail', 'timeout']);
const REFUSED_OPTS = {
  priority: 'priorities',
  repeat: 'repeatable jobs (use schedules: producer.scheduleAdd or `punctual schedule add`)',
  lifo: 'LIFO order',
  parent: 'flows (parent/child jobs)',
  rateLimiterKey: 'rate limiter keys',
  stackTraceLimit: 'stack trace limits',
  keepLogs: 'job logs',
  sizeLimit: 'size limits (punctual refuses payloads over max_payload)',
  deduplication: 'deduplication options (give jobId: an enqueue of a live id is a duplicate)',
  debounce: 'debounce',
  prevMillis: 'prevMillis',
};

/** punctual's per-job options from BullMQ's job options. */
function jobOptions(opts = {}, defaults = {}) {
  opts = { ...defaults, ...opts };
  for (const k of Object.keys(opts)) {
    if (REFUSED_OPTS[k]) throw new NotSupported(`the job option ${k} (${REFUSED_OPTS[k]})`);
    if (!JOB_OPTS.has(k)) throw new NotSupported(`the job option ${k}`);
  }
  if (opts.removeOnComplete === false || (typeof opts.removeOnComplete === 'object' && opts.removeOnComplete))
    throw new NotSupported('keeping completed jobs (removeOnComplete other than true)', 'a done job is deleted');
  if (opts.removeOnFail === true || typeof opts.removeOnFail === 'number' || (typeof opts.removeOnFail === 'object' && opts.removeOnFail))
    throw new NotSupported('removeOnFail', 'a failed job stays in the dead set until `punctual dead purge`');
  const out = {};
  if (opts.jobId != null) out.id = String(opts.jobId);
  if (opts.delay != null) out.delayMs = opts.delay;
  if (opts.timeout != null) out.timeoutMs = opts.timeout;
  if (opts.attempts != null) out.maxAttempts = opts.attempts;
  if (opts.backoff != null) {
    const b = typeof opts.backoff === 'number' ? { type: 'fixed', delay: opts.backoff } : opts.backoff;
    if (typeof b !== 'object' || !['fixed', 'exponential'].includes(b.type) || typeof b.delay !== 'number') {
      throw new NotSupported(`the backoff ${JSON.stringify(opts.backoff)}`, "give a number, {type: 'fixed'|'exponential', delay}");
    }
    if (b.jitter) throw new NotSupported('backoff jitter');
    // BullMQ: fixed waits `delay` each time; exponential 2^(n-1) x delay
    // before retry n. punctual repeats the ladder's last step.
    const retries = Math.max(1, Math.min((opts.attempts ?? 1) - 1, 30));
    out.backoffMs =
      b.type === 'fixed' ? [b.delay] : Array.from({ length: retries }, (_, i) => b.delay * 2 ** i);
  }
  return out;
}

let shared = null;
/** A node-redis client for connection options ({host, port, password, db, username, url, tls}). */
async function connectOptions(o) {
  const { createClient } = require('redis');
  const url =
    o.url ??
    `redis${o.tls ? 's' : ''}://${o.username ? encodeURIComponent(o.username) : ''}${o.password ? ':' + encodeURIComponent(o.password) : ''}${o.username || o.password ? '@' : ''}${o.host ?? '127.0.0.1'}:${o.port ?? 6379}/${o.db ?? 0}`;
  const c = createClient({ url });
  c.on('error', (e) => console.error('punctual/bullmq redis:', e.message));
  await c.connect();
  return c;
}

function connection(conn) {
  if (isIoredis(conn) || isNodeRedis(conn)) return { client: Promise.resolve(conn), owned: false };
  if (conn == null) {
    shared ??= connectOptions({});
    return { client: shared, owned: false };
  }
  if (typeof conn === 'object') return { client: connectOptions(conn), owned: true };
  throw new TypeError('connection: give an ioredis or node-redis client, or {host, port, ...}');
}

/** The payload of a job: JSON {name, data}. */
const encode = (name, data) => {
  const text = JSON.stringify({ name: String(name), data: data === undefined ? null : data });
  return text;
};

/** What a processor gets (BullMQ's Job, the read side). */
class Job {
  constructor(queue, fields) {
    this.queue = queue;
    Object.assign(this, fields);
  }

  /** Removes the job, in any state (punctual's cancel: a running one is stopped in flight). */
  async remove() {
    const was = await (await this.queue.producer()).cancel(this.queue.name, this.id);
    if (was === null) throw new Error(`job ${this.id} is not in queue ${this.queue.name} (done or removed)`);
  }

  /** A waiting job's new delay from now (punctual's reschedule). */
  async changeDelay(delay) {
    const was = await (await this.queue.producer()).reschedule(this.queue.name, this.id, { delayMs: delay });
    if (was !== 'pool' && was !== 'ready') {
      throw new Error(`job ${this.id} is ${was ?? 'gone'}: only a waiting (delayed) job's delay can change`);
    }
  }

  async getState() {
    const j = await (await this.queue.producer()).get(this.queue.name, this.id);
    if (!j) return 'unknown';
    return { pool: 'delayed', ready: 'waiting', running: 'active', dead: 'failed' }[j.state] ?? j.state;
  }

  updateProgress() {
    throw new NotSupported('job progress');
  }

  log() {
    throw new NotSupported('job logs', 'print: a resident program\'s output goes to serve\'s log with the job id');
  }
}

function fromStored(queue, info) {
  let parsed = {};
  try {
    parsed = JSON.parse(info.payload.toString());
  } catch {}
  return new Job(queue, {
    id: info.id,
    name: parsed?.name,
    data: parsed?.data,
    attemptsMade: info.attempts,
    timestamp: info.createdMs,
    delay: Math.max(0, info.dueMs - info.createdMs),
    failedReason: info.lastError ?? undefined,
    opts: { attempts: info.maxAttempts },
  });
}

class Queue {
  /**
   * @param {string} name the punctual topic
   * @param {{connection?: object, prefix?: string, defaultJobOptions?: object}} opts
   *   connection: an ioredis or node-redis client, or {host, port, ...}
   */
  constructor(name, { connection: conn, prefix = 'punctual', defaultJobOptions = {}, ...rest } = {}) {
    for (const k of Object.keys(rest)) {
      if (k !== 'skipVersionCheck' && k !== 'streams') throw new NotSupported(`the Queue option ${k}`);
    }
    this.name = name;
    this.defaultJobOptions = defaultJobOptions;
    jobOptions({}, defaultJobOptions); // refused now, not at the first add
    const c = connection(conn);
    this.owned = c.owned;
    this.clientPromise = c.client;
    this.prefix = prefix;
    this.producerPromise = null;
  }

  producer() {
    this.producerPromise ??= this.clientPromise.then((c) => new Producer(c, { prefix: this.prefix }));
    return this.producerPromise;
  }

  /** Adds a job: data (JSON) under `name`; opts: delay, jobId, attempts, backoff, timeout. */
  async add(name, data, opts = {}) {
    const o = jobOptions(opts, this.defaultJobOptions);
    const e = await (await this.producer()).enqueue(this.name, encode(name, data), o);
    return new Job(this, { id: e.id, name, data, opts: { ...this.defaultJobOptions, ...opts }, attemptsMade: 0, status: e.status });
  }

  /** Adds jobs [{name, data, opts}] in one call per 1,000. */
  async addBulk(jobs) {
    const list = jobs.map((j) => ({ payload: encode(j.name, j.data), ...jobOptions(j.opts, this.defaultJobOptions) }));
    const res = await (await this.producer()).enqueueBatch(this.name, list);
    return res.map((e, i) => new Job(this, { id: e.id, name: jobs[i].name, data: jobs[i].data, opts: jobs[i].opts ?? {}, attemptsMade: 0, status: e.status }));
  }

  /** The job, or undefined when it is not live (done jobs are deleted). */
  async getJob(id) {
    const info = await (await this.producer()).get(this.name, String(id));
    return info ? fromStored(this, info) : undefined;
  }

  /** Removes a job by id: 1 if it was live, else 0. */
  async remove(id) {
    return (await (await this.producer()).cancel(this.name, String(id))) === null ? 0 : 1;
  }

  on(event) {
    throw new NotSupported(`Queue events ('${event}')`, 'punctual has no event stream: see /metrics and `punctual stats`');
  }

  async close() {
    if (this.owned) await (await this.clientPromise).quit();
  }

  async waitUntilReady() {
    await this.producer();
  }
}

for (const m of ['pause', 'resume', 'drain', 'obliterate', 'clean', 'getJobs', 'getJobCounts', 'getWaiting', 'getDelayed',
  'getCompleted', 'getFailed', 'getActive', 'count', 'getRepeatableJobs', 'removeRepeatable', 'retryJobs', 'promoteJobs']) {
  Queue.prototype[m] = function () {
    throw new NotSupported(`Queue.${m}()`, 'use the punctual CLI or HTTP API (stats, dead, topic pause/resume)');
  };
}

/**
 * BullMQ's Worker: under `punctual serve` (resident = ["node", "worker.js"]),
 * runs `processor(job)` for each job of topic `name`, up to `concurrency` at
 * once. Returning: done. Throwing: retried (the job's attempts/backoff, else
 * the topic's); UnrecoverableError: dead. A Worker whose name is not the
 * topic serve runs the program for stays idle (one program may declare the
 * workers of several queues). When serve closes fd 3 and the jobs in hand
 * are answered, it exits the process. Outside serve it prints what to do
 * and exits 1.
 */
class Worker {
  constructor(name, processor, { concurrency = 1, autorun = true, connection: _c, prefix: _p, ...rest } = {}) {
    for (const k of Object.keys(rest)) {
      if (['limiter', 'settings', 'lockDuration', 'stalledInterval', 'maxStalledCount', 'removeOnComplete', 'removeOnFail', 'metrics', 'useWorkerThreads', 'lockRenewTime'].includes(k) && rest[k] !== undefined) {
        throw new NotSupported(`the Worker option ${k}`, 'serve\'s topic config sets timeouts, backoff and limits');
      }
      if (k !== 'skipVersionCheck' && k !== 'drainDelay' && k !== 'runRetryDelay' && k !== 'skipLockRenewal' && k !== 'skipStalledCheck')
        throw new NotSupported(`the Worker option ${k}`);
    }
    if (typeof processor !== 'function') {
      throw new NotSupported('a processor given as a file path (sandboxed processors)', 'pass a function');
    }
    this.name = name;
    this.processor = processor;
    this.concurrency = concurrency;
    this.running = null;
    if (autorun) this.run();
  }

  /** Starts the resident loop (autorun does this). */
  run() {
    const topic = process.env.PUNCTUAL_TOPIC;
    if (topic !== undefined && topic !== this.name) {
      this.running = Promise.resolve(); // another topic's program: idle
      return this.running;
    }
    const queue = { name: this.name };
    this.running = run(
      async (pj) => {
        let parsed;
        try {
          parsed = JSON.parse(pj.text);
        } catch {
          throw new Dead('not a BullMQ-style job: the payload is not JSON {name, data}');
        }
        if (parsed === null || typeof parsed !== 'object' || !('data' in parsed)) {
          throw new Dead('not a BullMQ-style job: the payload must be JSON {name, data}');
        }
        const job = new Job(queue, {
          id: pj.id,
          name: parsed.name,
          data: parsed.data,
          attemptsMade: pj.attempt - 1,
          attemptsStarted: pj.attempt,
          timestamp: pj.createdMs,
          processedOn: Date.now(),
          opts: { attempts: pj.maxAttempts },
          punctual: pj,
        });
        return this.processor(job);
      },
      { inflight: this.concurrency },
    ).then(
      // serve closed fd 3 and every job in hand is answered: exit, as serve
      // expects (the app's own connections would keep the process alive).
      () => process.exit(0),
      (e) => {
        console.error(e.message);
        process.exit(1);
      },
    );
    return this.running;
  }

  on(event) {
    throw new NotSupported(`Worker events ('${event}')`, 'a failure is the job\'s last error (`punctual get`), its output goes to serve\'s log');
  }

  async close() {
    // serve ends the program: it closes fd 3 and the loop returns.
  }

  async waitUntilReady() {}
}

module.exports = { Queue, Worker, Job, UnrecoverableError, NotSupported, Retry, jobOptions, InvalidInput };
