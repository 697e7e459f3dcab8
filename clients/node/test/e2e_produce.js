'use strict';
// Enqueues jobs through the Node producer for the end-to-end tests.
// Usage: node e2e_produce.js TOPIC < jobs, one JSON object per line
// ({"payload"|"payload_hex", "id", "delay_ms", "at_ms", "max_attempts",
// "expire_ms", "timeout_ms", "group"}); prints one
// JSON line per job: {"id", "status"}. With PUNCTUAL_TEST_CLUSTER_URLS
// (comma-separated), it talks to a Redis Cluster.

const readline = require('node:readline');
const { createCluster } = require('redis');
const { connect } = require('./common');
const { Producer } = require('..');

async function main() {
  const seeds = process.env.PUNCTUAL_TEST_CLUSTER_URLS;
  const redis = seeds
    ? await createCluster({ rootNodes: seeds.split(',').map((url) => ({ url })) }).connect()
    : await connect();
  const producer = new Producer(redis);
  const jobs = [];
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    const s = JSON.parse(line);
    const job = { payload: s.payload_hex != null ? Buffer.from(s.payload_hex, 'hex') : s.payload };
    if (s.id != null) job.id = s.id;
    if (s.delay_ms != null) job.delayMs = s.delay_ms;
    if (s.max_attempts != null) job.maxAttempts = s.max_attempts;
    if (s.at_ms != null) job.at = s.at_ms;
    if (s.expire_ms != null) job.expireMs = s.expire_ms;
    if (s.timeout_ms != null) job.timeoutMs = s.timeout_ms;
    if (s.group != null) job.group = s.group;
    if (s.traceparent != null) job.traceparent = s.traceparent;
    if (s.tracestate != null) job.tracestate = s.tracestate;
    jobs.push(job);
  }
  let out;
  if (jobs.length === 1) {
    const { payload, ...opts } = jobs[0];
    out = [await producer.enqueue(process.argv[2], payload, opts)];
  } else {
    out = await producer.enqueueBatch(process.argv[2], jobs);
  }
  for (const e of out) console.log(JSON.stringify(e));
  await (typeof redis.close === 'function' ? redis.close() : redis.quit());
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
