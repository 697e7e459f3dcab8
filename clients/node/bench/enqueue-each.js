// Enqueues N jobs one Producer.enqueue call each (payloads payload-<n>, no
// options), as a web app enqueues one job per request; prints the loop's
// seconds. The Node side of clients/php/bench/single-enqueue.sh and of the
// bench's client-enqueue phase. Usage:
//
//     PUNCTUAL_REDIS_URL=redis://host:port [PUNCTUAL_PREFIX=punctual] node clients/node/bench/enqueue-each.js TOPIC N
'use strict';

const { createClient } = require('redis');
const { Producer } = require('../index.js');

async function main() {
  const client = createClient({ url: process.env.PUNCTUAL_REDIS_URL || 'redis://127.0.0.1:6379' });
  await client.connect();
  const producer = new Producer(client, { prefix: process.env.PUNCTUAL_PREFIX || 'punctual' });
  const topic = process.argv[2] || 'enqueue-each';
  const n = Number(process.argv[3] || 10000);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    await producer.enqueue(topic, 'payload-' + String(i).padStart(8, '0'));
  }
  console.log((Number(process.hrtime.bigint() - t0) / 1e9).toFixed(6));
  await client.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
