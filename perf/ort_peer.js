// ONNX Runtime (onnxruntime-node) timing the graphs tools/export_onnx.py writes; driven by perf/ort_peer.py, which
// gives it the package's folder and compares it with `sqrtdk bench` in the same run.
//
//   node perf/ort_peer.js --ort DIR --model M.onnx --threads N --reps R --vocab V
//        [--prefill 32,128,512 | --decode N --decode-prompt P --kv KV,HD | --logits IDS [--kv KV,HD --decode-prompt P]]
//
// One session per call, with ONNX Runtime's best CPU settings for a single stream: all graph optimizations,
// intra-op threads = N (the calling thread is one of them), one inter-op thread, sequential execution, the memory
// arena on and its spinning threads left on (its default).
//   prefill: per length 3 untimed runs, then R timed ones (wall clock around session.run, which includes the 128 KB
//            logits copy out: < 1% at T = 32);
//   decode (a graph with a past, --kv its kv heads and head_dim): P prompt tokens in one call, then N calls of one
//            token each fed the last call's present K/V; one untimed pass, then R timed ones (the N calls);
//   logits: the last position's logits of IDS (with a past: the first P in one call, the rest one at a time).
// Prints one JSON document: {"ort_version", "threads", "created": seconds to create the session, and "prefill":
// [{"tokens": T, "seconds": [...]}] or "decode": {"prompt", "tokens", "tokens_per_s": [...]}}, or {"logits": [...]}.
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
    else if (key === '--decode') args.decode = Number(value);
    else if (key === '--decode-prompt') args.decodePrompt = Number(value);
    else if (key === '--kv') args.kv = value.split(',').map(Number);  // kv heads, head_dim (graphs with a past)
    else throw new Error(`ort_peer.js: unknown argument ${key}`);
  }
  if (!args.ort || !args.model) throw new Error('ort_peer.js: --ort DIR and --model FILE are required');
  return args;
}

// n token ids spread over the vocabulary (the time does not depend on them).
function spreadIds(n, vocab) {
  return Array.from({length: n}, (_, i) => (i * 7919 + 1) % vocab);
}

function idsTensor(ort, ids) {
  return new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
}

// The graph's KV cache inputs (past_key.i / past_value.i), empty: [1, kv heads, 0, head_dim].
function emptyPast(ort, session, kv) {
  const feeds = {};
  for (const name of session.inputNames)
    if (name.startsWith('past_')) feeds[name] = new ort.Tensor('float32', new Float32Array(0), [1, kv[0], 0, kv[1]]);
  return feeds;
}

// Runs ids[0, prompt) as one call, then each later id alone with the KV cache of the calls before; returns the last
// call's output and the seconds the one-token calls took.
async function generate(ort, session, kv, ids, prompt) {
  let out = await session.run({input_ids: idsTensor(ort, ids.slice(0, prompt)), ...emptyPast(ort, session, kv)});
  const t0 = process.hrtime.bigint();
  for (let i = prompt; i < ids.length; ++i) {
    const feeds = {input_ids: idsTensor(ort, [ids[i]])};
    for (const name of session.inputNames)
      if (name.startsWith('past_')) feeds[name] = out[name.replace('past_', 'present_')];
    out = await session.run(feeds);
  }
  return {out, seconds: Number(process.hrtime.bigint() - t0) / 1e9};
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
    // With a past: the prompt, then the rest one token at a time (checks the decode path too).
    const {out} = args.kv ? await generate(ort, session, args.kv, args.logits, args.decodePrompt || 1)
                          : {out: await session.run({input_ids: idsTensor(ort, args.logits)})};
    process.stdout.write(JSON.stringify({logits: Array.from(out.logits.data)}) + '\n');
    return;
  }
  const version = require(require('path').join(args.ort, 'package.json')).version;
  if (args.decode) {
    if (!args.kv) throw new Error('--decode needs --kv and a graph with a past (export_onnx.py --with-past)');
    const ids = spreadIds(args.decodePrompt + args.decode, args.vocab);
    await generate(ort, session, args.kv, ids, args.decodePrompt);  // warm-up
    const tokensPerS = [];
    for (let r = 0; r < args.reps; ++r)
      tokensPerS.push(args.decode / (await generate(ort, session, args.kv, ids, args.decodePrompt)).seconds);
    process.stdout.write(JSON.stringify({ort_version: version, threads: args.threads, created,
                                         decode: {prompt: args.decodePrompt, tokens: args.decode, tokens_per_s: tokensPerS}}) + '\n');
    return;
  }
  const prefill = [];
  for (const T of args.prefill) {
    const feeds = {input_ids: idsTensor(ort, spreadIds(T, args.vocab))};
    for (let w = 0; w < 3; ++w) await session.run(feeds);
    const seconds = [];
    for (let r = 0; r < args.reps; ++r) {
      const s = process.hrtime.bigint();
      await session.run(feeds);
      seconds.push(Number(process.hrtime.bigint() - s) / 1e9);
    }
    prefill.push({tokens: T, seconds});
  }
  process.stdout.write(JSON.stringify({ort_version: version, threads: args.threads, created, prefill}) + '\n');
}

main().catch((e) => {
  process.stderr.write(`ort_peer.js: ${e.message}\n`);
  process.exit(1);
});
