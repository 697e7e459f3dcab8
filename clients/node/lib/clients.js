'use strict';
// The Redis clients the producer takes: node-redis (`redis` v5/v6:
// createClient, createCluster) as it is, ioredis (Redis, Cluster) through a
// thin adapter exposing the few node-redis methods the producer and the
// schedules use. Both retry a command Redis answers LOADING (it is reading
// its dataset after a restart) for up to LOADING_WAIT_MS; ids make the
// resend safe.

const LOADING_WAIT_MS = 60_000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `fn` again while Redis answers LOADING, up to `limits.loadingWaitMs`. */
async function retryLoading(fn, limits = exports.limits) {
  const started = Date.now();
  let pause = 50;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (!String(e?.message).startsWith('LOADING')) throw e;
      if (Date.now() - started > limits.loadingWaitMs) {
        throw new Error(
          `${e.message} (Redis was still loading its dataset after ${Math.round((Date.now() - started) / 1000)} s of retries; ` +
            'wait for it to finish, or raise require("punctual").limits.loadingWaitMs)',
          { cause: e },
        );
      }
      await sleep(pause);
      pause = Math.min(pause * 2, 1000);
    }
  }
}

const isIoredis = (c) =>
  c != null && typeof c.evalsha === 'function' && typeof c.evalshaBuffer === 'function' && typeof c.withTypeMapping !== 'function';

const isNodeRedis = (c) => c != null && typeof c.withTypeMapping === 'function';

/**
 * node-redis's calls on an ioredis client. `buffers`: bulk replies as
 * Buffers (the producer's scripts), else strings (the schedules).
 */
function fromIoredis(c, buffers) {
  const args = ({ keys = [], arguments: argv = [] }) => [keys.length, ...keys, ...argv];
  return {
    evalSha: (sha, o) => (buffers ? c.evalshaBuffer(sha, ...args(o)) : c.evalsha(sha, ...args(o))),
    eval: (src, o) => (buffers ? c.evalBuffer(src, ...args(o)) : c.eval(src, ...args(o))),
    hGet: (k, f) => c.hget(k, f),
    hSet: (k, f, v) => c.hset(k, f, v),
    hDel: (k, f) => c.hdel(k, f),
    hExists: (k, f) => c.hexists(k, f),
    hGetAll: (k) => c.hgetall(k),
    sAdd: (k, m) => c.sadd(k, m),
    lPush: (k, v) => c.lpush(k, v),
    lTrim: (k, start, stop) => c.ltrim(k, start, stop),
    publish: (ch, m) => c.publish(ch, m),
    time: () => c.time(),
    zRangeByScore: (k, min, max, o) =>
      o?.LIMIT ? c.zrangebyscore(k, min, max, 'LIMIT', o.LIMIT.offset, o.LIMIT.count) : c.zrangebyscore(k, min, max),
    set: async (k, v, o = {}) => {
      const a = [k, v];
      if (o.expiration) a.push(o.expiration.type, o.expiration.value);
      if (o.condition) a.push(o.condition);
      return c.set(...a);
    },
    exists: (k) => c.exists(k),
    get: (k) => c.get(k),
  };
}

/** Every method of `client` wrapped in retryLoading. */
function loadingSafe(client) {
  return new Proxy(client, {
    get(target, prop) {
      const v = target[prop];
      if (typeof v !== 'function') return v;
      return (...a) => retryLoading(() => v.apply(target, a));
    },
  });
}

/**
 * The producer's two views of `client`: `buffers` (bulk replies as Buffers)
 * and `strings`. Throws a TypeError naming what is accepted otherwise.
 */
function adapt(client, RESP_TYPES) {
  if (isNodeRedis(client)) {
    return {
      buffers: loadingSafe(client.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer })),
      strings: loadingSafe(client),
    };
  }
  if (isIoredis(client)) {
    return { buffers: loadingSafe(fromIoredis(client, true)), strings: loadingSafe(fromIoredis(client, false)) };
  }
  throw new TypeError(
    'punctual: give a connected client of the `redis` package (createClient, createCluster) or an ioredis ' +
      'Redis/Cluster; got ' + (client?.constructor?.name ?? String(client)),
  );
}

exports.limits = { loadingWaitMs: LOADING_WAIT_MS };
exports.adapt = adapt;
exports.retryLoading = retryLoading;
exports.isIoredis = isIoredis;
exports.isNodeRedis = isNodeRedis;
exports.fromIoredis = fromIoredis;
