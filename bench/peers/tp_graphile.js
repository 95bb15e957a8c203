#!/usr/bin/env node
// graphile-worker side of bench/throughput.sh: a peer that keeps its jobs in the same
// PostgreSQL (fsync and synchronous_commit on), measured like the Celery row.
//
//   node tp_graphile.js fill PG_URL SCHEMA N
//       Installs graphile-worker's schema SCHEMA (its migrations), then queues N no-op
//       jobs (task `noop`, payload {}) with addJobs, 1000 per call.
//   node tp_graphile.js work PG_URL SCHEMA N PRESET MAX_S
//       A worker pool (one process) with PRESET's settings (below) runs the no-op task
//       until N completions are committed, prints one line
//         received=N first_ms=EPOCH_MS last_ms=EPOCH_MS rate=JOBS_S cpu_s_per_1000=S
//       (rate = (N - 1) / (last - first); cpu = this process between the first and the
//       last completion) and stays up until SIGTERM (the bench reads the servers' CPU
//       meanwhile). Exit 1 when N completions did not come within MAX_S seconds.
//   node tp_graphile.js latency PG_URL SCHEMA RATE SECONDS DRAIN_S
//       The batched preset's pool, and in the same process a producer that adds RATE
//       jobs/s for SECONDS (addJob each, paced by an absolute timer, send time in the
//       payload, up to maxPoolSize adds in flight): enqueue -> completion committed, p50,
//       p99, max over the jobs completed within DRAIN_S of the last send:
//         sent=S received=R p50_ms= p99_ms= max_ms=
//
// "Completion committed": graphile-worker deletes a job's row when it succeeds (one
// DELETE per job by default, one DELETE of many ids with completeJobBatchDelay), without
// waiting for it before it takes the next job. This script wraps pg's Client.query to see
// those DELETEs resolve: a job counts when its delete has committed, as an mqproc job
// counts when its result message arrives after its SUCCESS committed.
//
// PRESETs: `default` = graphile-worker's own defaults (concurrentJobs 1, maxPoolSize 10,
// pollInterval 2000, preparedStatements on, no local queue, no completion batching, a log
// line per completed job); `batched` = the configuration of its documentation's
// performance page ("Quick stats in optimal conditions"): concurrentJobs 24, maxPoolSize
// 25, localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0, and
// NO_LOG_SUCCESS=1 as its own perfTest sets (the bench sets it in the environment).
'use strict';
const { performance } = require('perf_hooks');
const pg = require('pg');
const { run, makeWorkerUtils } = require('graphile-worker');

const PRESETS = {
  default: {},
  batched: {
    concurrentJobs: 24,
    maxPoolSize: 25,
    localQueue: { size: 500 },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};
const nowMs = () => performance.timeOrigin + performance.now(); // wall clock, sub-ms
const die = (msg) => {
  console.log(`error: ${msg}`);
  process.exit(1);
};

// onComplete(ids, t) for every DELETE of _private_jobs that resolved (= committed: the
// pool's queries are autocommitted statements).
function watchCompletions(onComplete) {
  const DELETE = /^\s*(with j as \(\s*)?delete from \S+\._private_jobs/;
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (config, ...rest) {
    const res = query.call(this, config, ...rest);
    if (config && typeof config.text === 'string' && DELETE.test(config.text) && res && res.then) {
      const ids = config.values[0];
      res.then(() => onComplete(Array.isArray(ids) ? ids : [ids], nowMs()), () => {});
    }
    return res;
  };
}

async function fill(url, schema, n) {
  const utils = await makeWorkerUtils({ connectionString: url, schema });
  await utils.migrate();
  for (let i = 0; i < n; i += 1000) {
    const specs = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) specs.push({ identifier: 'noop', payload: {} });
    await utils.addJobs(specs);
  }
  await utils.release();
  console.log(`queued=${n}`);
}

// startPool: a runner with PRESET's settings and the task list; SIGTERM stops it.
async function startPool(url, schema, preset, noop) {
  const runner = await run({
    connectionString: url,
    schema,
    noHandleSignals: true,
    taskList: { noop },
    preset: { worker: PRESETS[preset] },
  });
  process.on('SIGTERM', () => runner.stop().then(() => process.exit(0), () => process.exit(1)));
  return runner;
}

async function work(url, schema, n, preset, maxS) {
  if (!PRESETS[preset]) die(`unknown preset ${preset}`);
  let got = 0;
  let first = 0;
  let cpu0 = null;
  let done = false;
  watchCompletions((ids, t) => {
    if (got === 0) {
      first = t;
      cpu0 = process.cpuUsage();
    }
    got += ids.length;
    if (got >= n && !done) {
      done = true;
      const cpu = process.cpuUsage(cpu0);
      const per1000 = ((cpu.user + cpu.system) / 1e6 / Math.max(1, got - 1)) * 1000;
      console.log(`received=${got} first_ms=${first.toFixed(1)} last_ms=${t.toFixed(1)} ` +
        `rate=${((got - 1) / ((t - first) / 1000)).toFixed(1)} cpu_s_per_1000=${per1000.toFixed(3)}`);
    }
  });
  setTimeout(() => {
    if (!done) die(`${got} of ${n} completions within ${maxS}s`);
  }, maxS * 1000).unref();
  await startPool(url, schema, preset, async () => {});
}

async function latency(url, schema, rate, secs, drain) {
  const sent = new Map(); // job id -> send time (ms)
  const lat = [];
  const total = Math.round(rate * secs);
  let nsent = 0;
  let lastSend = Infinity;
  watchCompletions((ids, t) => {
    for (const id of ids) {
      const t0 = sent.get(String(id));
      if (t0 !== undefined) lat.push(t - t0);
    }
  });
  // the task records its job's send time (the payload's), keyed by the job id
  await startPool(url, schema, 'batched', async (payload, helpers) => {
    sent.set(String(helpers.job.id), payload.t);
  });
  const utils = await makeWorkerUtils({ connectionString: url, schema });
  const t0 = nowMs() + 200;
  let inflight = 0;
  await new Promise((resolve) => {
    const tick = () => {
      const due = Math.min(total, Math.floor(((nowMs() - t0) / 1000) * rate) + 1);
      while (nsent < due && inflight < 25) {
        nsent++;
        inflight++;
        utils.addJob('noop', { t: nowMs() }).then(() => inflight--, (e) => die(`addJob: ${e}`));
      }
      if (nsent >= total) return resolve();
      setTimeout(tick, Math.max(0, t0 + ((nsent + 1) / rate) * 1000 - nowMs()));
    };
    setTimeout(tick, Math.max(0, t0 - nowMs()));
  });
  lastSend = nowMs();
  while (lat.length < total && nowMs() < lastSend + drain * 1000) await new Promise((r) => setTimeout(r, 5));
  await utils.release();
  lat.sort((a, b) => a - b);
  const at = (q) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(lat.length * q))] : 0);
  console.log(`sent=${nsent} received=${lat.length} p50_ms=${at(0.5).toFixed(2)} ` +
    `p99_ms=${at(0.99).toFixed(2)} max_ms=${at(1).toFixed(2)}`);
  process.exit(lat.length === total ? 0 : 1);
}

const [mode, url, schema, ...args] = process.argv.slice(2);
const main = { fill: () => fill(url, schema, +args[0]),
  work: () => work(url, schema, +args[0], args[1], +args[2]),
  latency: () => latency(url, schema, +args[0], +args[1], +args[2]) }[mode];
if (!main || !url || !schema) die('usage: tp_graphile.js fill|work|latency PG_URL SCHEMA ...');
main().catch((e) => die(e && e.stack ? e.stack.split('\n')[0] : String(e)));
