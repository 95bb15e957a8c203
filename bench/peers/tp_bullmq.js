#!/usr/bin/env node
// BullMQ side of bench/throughput.sh: a peer on Redis (the bench's private redis-server,
// AOF on, appendfsync as the row says), measured like the Celery row.
//
//   node tp_bullmq.js fill PORT QUEUE N
//       Queues N no-op jobs (name `noop`, data {}) with Queue.addBulk, 1000 per call,
//       BullMQ's default job options (completed jobs are kept).
//   node tp_bullmq.js work PORT QUEUE N CONCURRENCY MAX_S
//       One Worker (one process) with that concurrency and its defaults otherwise runs
//       the no-op processor until N `completed` events, prints one line
//         received=N first_ms=EPOCH_MS last_ms=EPOCH_MS rate=JOBS_S cpu_s_per_1000=S
//       (rate = (N - 1) / (last - first); cpu = this process between the first and the
//       last completion) and stays up until SIGTERM (the bench reads the servers' CPU
//       meanwhile). Exit 1 when N completions did not come within MAX_S seconds.
//
// A Worker emits `completed` after its moveToCompleted script has returned, and Redis
// with appendfsync always answers a write only after the AOF was fsync'd: a counted job's
// completion is durable (with everysec, up to a second of completions may be lost).
'use strict';
const { performance } = require('perf_hooks');
const { Queue, Worker } = require('bullmq');

const nowMs = () => performance.timeOrigin + performance.now(); // wall clock, sub-ms
const die = (msg) => {
  console.log(`error: ${msg}`);
  process.exit(1);
};

async function fill(port, name, n) {
  const queue = new Queue(name, { connection: { host: '127.0.0.1', port } });
  for (let i = 0; i < n; i += 1000) {
    const jobs = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) jobs.push({ name: 'noop', data: {} });
    await queue.addBulk(jobs);
  }
  await queue.close();
  console.log(`queued=${n}`);
}

async function work(port, name, n, concurrency, maxS) {
  let got = 0;
  let first = 0;
  let cpu0 = null;
  const worker = new Worker(name, async () => {}, {
    connection: { host: '127.0.0.1', port },
    concurrency,
  });
  worker.on('error', (e) => console.log(`worker error: ${e}`));
  worker.on('completed', () => {
    const t = nowMs();
    if (got++ === 0) {
      first = t;
      cpu0 = process.cpuUsage();
    }
    if (got === n) {
      const cpu = process.cpuUsage(cpu0);
      const per1000 = ((cpu.user + cpu.system) / 1e6 / Math.max(1, got - 1)) * 1000;
      console.log(`received=${got} first_ms=${first.toFixed(1)} last_ms=${t.toFixed(1)} ` +
        `rate=${((got - 1) / ((t - first) / 1000)).toFixed(1)} cpu_s_per_1000=${per1000.toFixed(3)}`);
    }
  });
  setTimeout(() => {
    if (got < n) die(`${got} of ${n} completions within ${maxS}s`);
  }, maxS * 1000).unref();
  process.on('SIGTERM', () => worker.close().then(() => process.exit(0), () => process.exit(1)));
}

const [mode, port, name, ...args] = process.argv.slice(2);
const main = { fill: () => fill(+port, name, +args[0]),
  work: () => work(+port, name, +args[0], +args[1], +args[2]) }[mode];
if (!main || !port || !name) die('usage: tp_bullmq.js fill|work PORT QUEUE ...');
main().catch((e) => die(e && e.stack ? e.stack.split('\n')[0] : String(e)));
