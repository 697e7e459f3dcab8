'use strict';
// Shared by the tests: the Redis to use (PUNCTUAL_TEST_REDIS_URL, a private
// redis-server started by crates/punctual-cli/tests/clients.rs; never point
// it at a Redis that holds data), the punctual binary (PUNCTUAL_BIN).

const crypto = require('node:crypto');
const { createClient } = require('redis');

const REDIS_URL = process.env.PUNCTUAL_TEST_REDIS_URL;
if (!REDIS_URL) {
  console.error('set PUNCTUAL_TEST_REDIS_URL to a scratch Redis (the Rust test does this)');
  process.exit(2);
}

async function connect() {
  const client = createClient({ url: REDIS_URL });
  client.on('error', (e) => console.error('redis:', e.message));
  await client.connect();
  return client;
}

const freshPrefix = () => 'nodetest-' + crypto.randomBytes(5).toString('hex');

module.exports = { REDIS_URL, BIN: process.env.PUNCTUAL_BIN, connect, freshPrefix };
