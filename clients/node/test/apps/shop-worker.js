'use strict';
// The shop's worker, written for BullMQ; the import line is the only change.
// Run by punctual serve: resident = ["node", "shop-worker.js"]. The lines
// that RPUSH to shop:ran are the test's instrumentation.
const IORedis = require('ioredis');
const { Worker, UnrecoverableError } = require('punctual/bullmq'); // was: require('bullmq')

const connection = new IORedis(process.env.SHOP_REDIS_URL, { maxRetriesPerRequest: null });

async function record(job) {
  const [sec, usec] = await connection.time();
  const p = job.punctual; // instrumentation: the delivery's due time
  await connection.rpush('shop:ran', JSON.stringify({
    id: job.id, name: job.name, data: job.data, attempt: job.attemptsMade + 1,
    due_ms: p.dueMs, created_ms: p.createdMs, now_ms: Number(sec) * 1000 + Math.floor(Number(usec) / 1000), pid: process.pid,
  }));
}

const worker = new Worker(
  'shop',
  async (job) => {
    await record(job);
    switch (job.name) {
      case 'close-order':
        return { closed: job.data.orderId };
      case 'charge':
        if (job.attemptsMade < 2) throw new Error('payment gateway unreachable');
        return 'charged';
      case 'refund':
        throw new Error('card declined');
      case 'fatal':
        throw new UnrecoverableError('order does not exist');
      case 'crash':
        if (job.attemptsMade === 0) {
          if (job.data.how === 'exit') process.exit(3);
          if (job.data.how === 'uncaught') setTimeout(() => { throw new TypeError('uncaught in a timer'); }, 0);
          if (job.data.how === 'unhandled') Promise.reject(new RangeError('nobody awaits this'));
          await new Promise((r) => setTimeout(r, 3600 * 1000));
        }
        return 'ok';
      default:
        throw new Error(`unknown job ${job.name}`);
    }
  },
  { connection, concurrency: 8 },
);
