'use strict';
// Schedule operations through the Node producer, for
// crates/punctual-cli/tests/clients.rs.
// Usage: node e2e_schedule.js TOPIC < ops, one JSON object per line:
// {"op": "add", "name", "spec": {cron, every_ms, tz, payload, ...}} (snake
// case, as the other clients name them), {"op": "pause"|"resume"|"remove",
// "name"} or {"op": "list"}. Prints one JSON line per op: {"result"}. With
// PUNCTUAL_TEST_CLUSTER_URLS (comma-separated), it talks to a Redis Cluster.

const readline = require('node:readline');
const { createCluster } = require('redis');
const { connect } = require('./common');
const { Producer } = require('..');

const camel = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

async function main() {
  const seeds = process.env.PUNCTUAL_TEST_CLUSTER_URLS;
  const redis = seeds
    ? await createCluster({ rootNodes: seeds.split(',').map((url) => ({ url })) }).connect()
    : await connect();
  const p = new Producer(redis);
  const topic = process.argv[2];
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    const op = JSON.parse(line);
    let result;
    if (op.op === 'add') {
      const spec = Object.fromEntries(Object.entries(op.spec ?? {}).map(([k, v]) => [camel(k), v]));
      result = await p.scheduleAdd(topic, op.name, spec);
    } else if (op.op === 'list') {
      result = await p.scheduleList(topic);
    } else {
      const method = { pause: 'schedulePause', resume: 'scheduleResume', remove: 'scheduleRemove' }[op.op];
      result = await p[method](topic, op.name);
    }
    console.log(JSON.stringify({ result }));
  }
  await (typeof redis.close === 'function' ? redis.close() : redis.quit());
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
