'use strict';
// The same BullMQ-style code run on BullMQ and on punctual/bullmq, one
// after the other on one private Redis: enqueue one at a time (await
// queue.add), in bulk (addBulk of 1,000), and a worker draining due jobs
// at concurrency 1 and 8 (BullMQ's Worker in its own process; punctual's
// under `punctual serve`, one resident program). Figures in README.md.
//
//   node bench/compare-bullmq.js PORT BULLMQ_DIR PUNCTUAL_BIN > results.jsonl
//
// PORT: an empty redis-server you do not care about (it is FLUSHALLed).
// BULLMQ_DIR: a directory whose node_modules has bullmq and ioredis (e.g.
// the cache run-bullmq.sh fills). Env: N1 (3000), N2 (20000), N3 (5000).
// `node bench/compare-bullmq.js worker IMPL C` is the worker child.

const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const { spawn } = require('node:child_process');

const N1 = +(process.env.N1 || 3000);
const N2 = +(process.env.N2 || 20000);
const N3 = +(process.env.N3 || 5000);

function impl(name, bullmqDir) {
  if (name === 'bullmq') return require(require.resolve('bullmq', { paths: [bullmqDir] }));
  return require(path.join(__dirname, '..', 'bullmq.js'));
}

function ioredis(bullmqDir) {
  return require(require.resolve('ioredis', { paths: [bullmqDir, path.join(__dirname, '..')] }));
}

const data = (n) => ({ orderId: n, action: 'close', pad: 'x'.repeat(60) });

async function worker(name, c) {
  const dir = process.env.BULLMQ_DIR;
  const IORedis = ioredis(dir);
  const { Worker } = impl(name, dir);
  const connection = new IORedis(+process.env.PORT, '127.0.0.1', { maxRetriesPerRequest: null });
  const total = +process.env.N3;
  new Worker(
    'bench',
    async () => {
      await connection.set('bench:start', String(Date.now()), 'NX');
      if ((await connection.incr('bench:done')) === total) await connection.set('bench:end', String(Date.now()));
    },
    { connection, concurrency: c },
  );
}

async function main() {
  if (process.argv[2] === 'worker') return worker(process.argv[3], +process.argv[4]);
  const [port, bullmqDir, bin] = process.argv.slice(2);
  const IORedis = ioredis(bullmqDir);
  const admin = new IORedis(+port, '127.0.0.1', { maxRetriesPerRequest: null });
  const emit = (o) => console.log(JSON.stringify(o));
  for (const name of ['bullmq', 'punctual']) {
    const { Queue } = impl(name, bullmqDir);
    const connection = new IORedis(+port, '127.0.0.1', { maxRetriesPerRequest: null });

    await admin.flushall();
    let q = new Queue('bench', { connection });
    let t0 = performance.now();
    for (let i = 0; i < N1; i++) await q.add('close', data(i), { delay: 3600_000 });
    emit({ system: name, phase: 'enqueue one at a time', n: N1, jobs_per_s: Math.round(N1 / ((performance.now() - t0) / 1000)) });

    await admin.flushall();
    q = new Queue('bench', { connection });
    t0 = performance.now();
    for (let i = 0; i < N2; i += 1000) {
      await q.addBulk(Array.from({ length: 1000 }, (_, j) => ({ name: 'close', data: data(i + j), opts: { delay: 3600_000 } })));
    }
    emit({ system: name, phase: 'enqueue addBulk 1000', n: N2, jobs_per_s: Math.round(N2 / ((performance.now() - t0) / 1000)) });

    for (const c of [1, 8]) {
      await admin.flushall();
      q = new Queue('bench', { connection });
      for (let i = 0; i < N3; i += 1000) {
        await q.addBulk(Array.from({ length: Math.min(1000, N3 - i) }, (_, j) => ({ name: 'close', data: data(i + j) })));
      }
      const env = { ...process.env, PORT: port, BULLMQ_DIR: bullmqDir, N3: String(N3) };
      let child;
      let dir;
      if (name === 'bullmq') {
        child = spawn(process.execPath, [__filename, 'worker', name, String(c)], { env, stdio: 'inherit' });
      } else {
        dir = fs.mkdtempSync(path.join(os.tmpdir(), 'punctual-bench-'));
        fs.writeFileSync(
          path.join(dir, 'punctual.toml'),
          `redis = "redis://127.0.0.1:${port}"\nworkers = 1\n\n[topics.bench]\n` +
            `resident = [${JSON.stringify(process.execPath)}, ${JSON.stringify(__filename)}, "worker", "punctual", "${c}"]\n` +
            `processes = 1\nenv = { PORT = "${port}", BULLMQ_DIR = ${JSON.stringify(bullmqDir)}, N3 = "${N3}" }\n`,
        );
        child = spawn(bin, ['serve', '--config', path.join(dir, 'punctual.toml')], { env, stdio: ['ignore', 'ignore', 'ignore'] });
      }
      const deadline = Date.now() + 300_000;
      while (!(await admin.get('bench:end')) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      const [start, end] = [Number(await admin.get('bench:start')), Number(await admin.get('bench:end'))];
      emit({ system: name, phase: `worker concurrency ${c}`, n: N3, ok: end > 0, jobs_per_s: end > 0 ? Math.round(N3 / ((end - start) / 1000)) : null });
      child.kill('SIGTERM');
      await new Promise((r) => child.on('exit', r));
      if (dir) fs.rmSync(dir, { recursive: true, force: true });
    }
    connection.disconnect();
  }
  admin.disconnect();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
