'use strict';
// Enqueues the shop's jobs, written for BullMQ; the import line is the only
// change. Prints one JSON line per job: {id, status, name, delay}.
const IORedis = require('ioredis');
const { Queue } = require('punctual/bullmq'); // was: const { Queue } = require('bullmq');

async function main() {
  const connection = new IORedis(process.env.SHOP_REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue('shop', { connection });
  const out = [];
  for (let i = 0; i < 20; i++) {
    const delay = 250 * (i % 5);
    out.push([await queue.add('close-order', { orderId: 1000 + i }, { delay }), delay]);
  }
  const bulk = await queue.addBulk([
    { name: 'charge', data: { orderId: 7, amount: 30 }, opts: { jobId: 'charge:7', attempts: 3, backoff: { type: 'fixed', delay: 100 } } },
    { name: 'refund', data: { orderId: 8 }, opts: { jobId: 'refund:8', attempts: 2, backoff: 100 } },
    { name: 'crash', data: { orderId: 9, how: 'exit' }, opts: { jobId: 'crash:9', attempts: 3, backoff: 100, delay: 1500 } },
    { name: 'crash', data: { orderId: 10, how: 'uncaught' }, opts: { jobId: 'crash:10', attempts: 3, backoff: 100, delay: 4000 } },
    { name: 'crash', data: { orderId: 11, how: 'unhandled' }, opts: { jobId: 'crash:11', attempts: 3, backoff: 100, delay: 6500 } },
    { name: 'fatal', data: { orderId: 12 }, opts: { jobId: 'fatal:12', attempts: 5 } },
  ]);
  for (const j of bulk) out.push([j, null]);
  // The crashes come after the rest, one at a time: a crash takes the
  // program's other jobs with it (they are retried).
  // A job moved: first 10 minutes out, then 400 ms.
  const later = await queue.add('close-order', { orderId: 2000 }, { jobId: 'later:2000', delay: 600000 });
  out.push([later, null]);
  await (await queue.getJob('later:2000')).changeDelay(400);
  // A job removed before it runs.
  await queue.add('close-order', { orderId: 3000 }, { jobId: 'gone:3000', delay: 60000 });
  out.push([{ id: 'gone:3000', status: (await queue.remove('gone:3000')) === 1 ? 'removed' : 'not removed', name: 'close-order' }, null]);
  // The same jobId again: nothing changes.
  out.push([await queue.add('close-order', { orderId: 2000 }, { jobId: 'later:2000' }), null]);
  for (const [j, delay] of out) console.log(JSON.stringify({ id: j.id, status: j.status, name: j.name, delay }));
  await queue.close();
  connection.disconnect();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
