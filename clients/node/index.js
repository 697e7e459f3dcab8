'use strict';
// punctual for Node: a producer for punctual's Redis layout, and the resident
// handler loop of `punctual serve` (docs/RESIDENT.md).

const { Producer, PartialBatch, crc32, partitionOf, generateId, DEFAULT_PREFIX, DEFAULT_MAX_PAYLOAD } = require('./lib/producer');
const { InvalidInput, quote } = require('./lib/validate');
const { run, Job, Retry, Dead, onceKey, PROTOCOL } = require('./lib/worker');
const { limits } = require('./lib/clients');

module.exports = {
  Producer,
  PartialBatch,
  InvalidInput,
  run,
  Job,
  Retry,
  Dead,
  onceKey,
  crc32,
  partitionOf,
  generateId,
  quote,
  PROTOCOL,
  DEFAULT_PREFIX,
  DEFAULT_MAX_PAYLOAD,
  limits,
};
