// ONNX Runtime (onnxruntime-node) timing a prefill of the graph tools/export_onnx.py writes; driven by
// perf/ort_peer.py, which gives it the package's folder and compares it with `sqrtdk bench` in the same run.
//
//   node perf/ort_peer.js --ort DIR --model M.onnx --threads N --prefill 32,128,512 --reps R --vocab V
//        [--logits IDS]
//
// One session per call, with ONNX Runtime's best CPU settings for a single stream: all graph optimizations,
// intra-op threads = N (the calling thread is one of them), one inter-op thread, sequential execution, the memory
// arena on and its spinning threads left on (its default). Each prefill length gets 3 untimed runs, then R timed
// ones (wall clock around session.run, which includes the 128 KB logits copy out: < 1% at T = 32).
// Prints one JSON document: {"ort_version", "threads", "optimized": seconds to create the session,
// "prefill": [{"tokens": T, "seconds": [...]}]}; with --logits 5,17,42 only the logits of that prompt.
'use strict';

function parseArgs(argv) {
  const args = {reps: 5, prefill: [32, 128, 512], threads: 1, vocab: 256};
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i], value = argv[i + 1];
    if (value === undefined) throw new Error(`ort_peer.js: ${key} needs a value`);
    if (key === '--ort') args.ort = value;
    else if (key === '--model') args.model = value;
    else if (key === '--threads') args.threads = Number(value);
    else if (key === '--reps') args.reps = Number(value);
    else if (key === '--vocab') args.vocab = Number(value);
    else if (key === '--prefill') args.prefill = value.split(',').map(Number);
    else if (key === '--logits') args.logits = value.split(',').map(Number);
    else throw new Error(`ort_peer.js: unknown argument ${key}`);
  }
  if (!args.ort || !args.model) throw new Error('ort_peer.js: --ort DIR and --model FILE are required');
  return args;
}

function idsTensor(ort, ids) {
  return new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const ort = require(args.ort);
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(args.model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
    enableCpuMemArena: true,
  });
  const created = Number(process.hrtime.bigint() - t0) / 1e9;
  if (args.logits) {
    const out = await session.run({input_ids: idsTensor(ort, args.logits)});
    process.stdout.write(JSON.stringify({logits: Array.from(out.logits.data)}) + '\n');
    return;
  }
  const prefill = [];
  for (const T of args.prefill) {
    // Token ids spread over the vocabulary; the time does not depend on them.
    const feeds = {input_ids: idsTensor(ort, Array.from({length: T}, (_, i) => (i * 7919 + 1) % args.vocab))};
    for (let w = 0; w < 3; ++w) await session.run(feeds);
    const seconds = [];
    for (let r = 0; r < args.reps; ++r) {
      const s = process.hrtime.bigint();
      await session.run(feeds);
      seconds.push(Number(process.hrtime.bigint() - s) / 1e9);
    }
    prefill.push({tokens: T, seconds});
  }
  const version = require(require('path').join(args.ort, 'package.json')).version;
  process.stdout.write(JSON.stringify({ort_version: version, threads: args.threads, created, prefill}) + '\n');
}

main().catch((e) => {
  process.stderr.write(`ort_peer.js: ${e.message}\n`);
  process.exit(1);
});
