'use strict';
// require('punctual/bullmq'): BullMQ's Queue and Worker on punctual (lib/bullmq.js).
module.exports = require('./lib/bullmq');
