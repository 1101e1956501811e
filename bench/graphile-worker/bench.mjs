// graphile-worker's side of ojsd-bench's `graphile-drain` and `graphile-latency` workloads.
//
// ojsd-bench starts this process, reads its lines on stdout and answers on stdin, so that one
// CPU sampler (ojsd-bench's, over every postgres process) measures both products:
//
//   node bench.mjs drain   --db URL --jobs N [--batch 1000] [--concurrency 24] [--local-queue 500]
//     prints `enqueued <jobs> <seconds>` after adding N jobs in batches (graphile's add_jobs),
//     waits for a line `go` (ojsd-bench vacuums, analyses and checkpoints the table first and
//     marks the start of its window), runs a worker pool until every job has completed, and
//     prints `drained <jobs> <seconds>`.
//   node bench.mjs latency --db URL --rate R --seconds S [--concurrency 4]
//     starts a worker pool, prints `ready`, waits for `go`, adds R jobs per second for S seconds
//     (one add_job each, as a producer would) and prints `latency <JSON array of milliseconds>`,
//     a job's latency running from just before its add_job to the start of its task.
//
// Installing graphile-worker (its schema) happens before the first line, outside the window.
import { run, makeWorkerUtils } from "graphile-worker";
import { createInterface } from "node:readline";

const [mode, ...rest] = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = rest.indexOf(`--${name}`);
  return i >= 0 ? rest[i + 1] : dflt;
};
const db = opt("db", process.env.DATABASE_URL);
const lines = createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => lines.once("line", resolve));
const silent = () => () => {};
const logger = new (await import("graphile-worker")).Logger(silent);

async function drain() {
  const jobs = Number(opt("jobs", 100000));
  const batch = Number(opt("batch", 1000));
  const concurrency = Number(opt("concurrency", 24));
  const localQueue = Number(opt("local-queue", 500));
  const utils = await makeWorkerUtils({ connectionString: db, logger });
  await utils.migrate();
  const t0 = process.hrtime.bigint();
  for (let n = 0; n < jobs; n += batch) {
    const specs = [];
    for (let i = n; i < Math.min(n + batch, jobs); i++) {
      specs.push({ identifier: "bench_noop", payload: { n: i } });
    }
    await utils.addJobs(specs);
  }
  const enqueued = Number(process.hrtime.bigint() - t0) / 1e9;
  await utils.release();
  console.log(`enqueued ${jobs} ${enqueued}`);
  await nextLine();
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const started = process.hrtime.bigint();
  const runner = await run({
    preset: {
      worker: {
        connectionString: db,
        concurrentJobs: concurrency,
        maxPoolSize: concurrency + 2,
        localQueue: { size: localQueue },
        completeJobBatchDelay: 0,
        logger,
      },
    },
    noHandleSignals: true,
    taskList: {
      bench_noop: async () => {
        if (++done === jobs) finish();
      },
    },
  });
  await finished;
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  // The last completions are batched: stop gracefully so that they reach the database.
  await runner.stop();
  console.log(`drained ${jobs} ${seconds}`);
}

async function latency() {
  const rate = Number(opt("rate", 200));
  const seconds = Number(opt("seconds", 10));
  const concurrency = Number(opt("concurrency", 4));
  const utils = await makeWorkerUtils({ connectionString: db, logger });
  await utils.migrate();
  const samples = [];
  const runner = await run({
    preset: { worker: { connectionString: db, concurrentJobs: concurrency, logger } },
    noHandleSignals: true,
    taskList: {
      bench_timed: async (payload) => {
        samples.push(performance.now() - payload.t);
      },
    },
  });
  console.log("ready");
  await nextLine();
  const total = rate * seconds;
  const start = performance.now();
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    utils.addJob("bench_timed", { t: performance.now() });
  }
  const deadline = performance.now() + 10000;
  while (samples.length < total && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
  }
  await runner.stop();
  await utils.release();
  console.log(`latency ${JSON.stringify(samples)}`);
}

if (mode === "drain") await drain();
else if (mode === "latency") await latency();
else {
  console.error("usage: node bench.mjs drain|latency --db URL ...");
  process.exit(2);
}
lines.close();
process.exit(0);
