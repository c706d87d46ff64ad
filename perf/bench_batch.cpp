// bench-batch: continuous batching in the engine (sqrtdk::Batch), without HTTP. For S sequences (default
// 1,2,8,32) each holding a --context-token prompt, it times decode steps that advance all S together (one GEMM of
// M = S per linear layer) and reports aggregate tokens/s and the ratio to S = 1, measured in the same run. Then the
// prefix cache's gain: a --system-token shared prompt plus a --user-token tail prefilled from scratch (in the
// Scheduler's 64-token chunks) against forking the cached system prompt and prefilling only the tail.
//
// Decode on a CPU reads every weight once per step whatever S, so the aggregate grows with S until the GEMMs turn
// compute-bound; bench-serve measures the same through sqrtdk-serve's HTTP and scheduler.
#include "perf/common/bench_util.h"

#include <sqrtdk/batch.h>
#include <sqrtdk/model.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::perf;

namespace {

const char* kUsage =
    "bench-batch: aggregate decode tokens/s of S sequences stepped together, and the prefix cache's gain\n"
    "Usage: bench-batch --model PATH [--streams LIST] [--context N] [--steps N] [--system N] [--user N] [common]\n"
    "  --model PATH     model file (--smoke: the bundled one); the issue's shape: make-toy --arch llama --d-model\n"
    "                   768 --n-layers 12 --n-heads 12 --d-ff 2048 --n-vocab 32000 --max-seq 1024 (untied: 134M)\n"
    "  --streams LIST   sequence counts (default 1,2,8,32)\n"
    "  --context N      prompt tokens each sequence holds before the timed steps (default 128)\n"
    "  --steps N        decode steps per sample (default 8)\n"
    "  --system N       shared prompt tokens, cached (default 256); --user N: the tail (default 32)\n"
    "Example:\n"
    "  bench-batch --model llama134m.sqdk --threads 1,2 --reps 5 --json";

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    const int v = std::stoi(item, &used);
    if (used != item.size() || v < 1) throw std::invalid_argument("bad list item '" + item + "'");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::vector<uint32_t> tokens_for(size_t n, uint32_t n_vocab, uint32_t seed) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i * 7919 + seed * 104729 + 1) % n_vocab);
  return t;
}

// Feeds `tokens` to `seq` in chunks of 64 (the Scheduler's default prefill chunk).
void prefill(Batch& batch, Batch::SequenceId seq, std::span<const uint32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); i += 64) {
    const Batch::Work w{seq, tokens.subspan(i, std::min<size_t>(64, tokens.size() - i))};
    batch.step({&w, 1});
  }
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs args;
  std::string model_path;
  std::vector<int> streams = {1, 2, 8, 32};
  size_t context = 128, steps = 8, system = 256, user = 32;
  try {
    args = BenchArgs::parse(argc, argv, kUsage);
    for (size_t i = 0; i < args.rest.size(); ++i) {
      const std::string& a = args.rest[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= args.rest.size()) throw std::invalid_argument(a + " needs a value");
        return args.rest[++i];
      };
      if (a == "--model") model_path = value();
      else if (a == "--streams") streams = parse_list(value());
      else if (a == "--context") context = std::stoul(value());
      else if (a == "--steps") steps = std::stoul(value());
      else if (a == "--system") system = std::stoul(value());
      else if (a == "--user") user = std::stoul(value());
      else throw std::invalid_argument("unknown argument " + a);
    }
    if (steps == 0 || user == 0) throw std::invalid_argument("--steps and --user must be >= 1");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-batch: usage error: %s\n%s\n", e.what(), kUsage);
    return 1;
  }
  if (args.smoke) {
    if (model_path.empty()) model_path = default_model_path();
    streams = {1, 4};
    context = 16, steps = 2, system = 64, user = 8;
    args.reps = 1;
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "bench-batch: --model is required (see --help)\n");
    return 1;
  }
  try {
    const auto model = Model::load(model_path);
    const ModelConfig& c = model->config();
    if (context + args.reps * steps * 2 + steps + 2 > c.max_seq || system + user > c.max_seq)
      throw std::runtime_error("the model's max_seq " + std::to_string(c.max_seq) + " is too short for --context " +
                               std::to_string(context) + " + the timed steps, or --system + --user");
    nlohmann::json out = {{"machine", machine_json({}, "wall-clock median of " + std::to_string(args.reps) +
                                                           " samples of " + std::to_string(steps) + " steps",
                                                   args.threads)},
                          {"model", model_path},
                          {"context", context},
                          {"rows", nlohmann::json::array()}};
    Table table({"threads", "streams", "ms/step", "aggregate tok/s", "vs 1 stream"});
    Table prefix_table({"threads", "prefill system+user ms", "fork + prefill user ms", "speedup"});
    for (int threads : args.threads) {
      double single = 0;
      for (int s : streams) {
        Batch batch(model, {.max_context = 0, .max_rows = std::max<size_t>(64, s), .kv_block = 16,
                            .n_threads = threads});
        std::vector<Batch::SequenceId> ids;
        std::vector<uint32_t> next(s);
        for (int i = 0; i < s; ++i) {
          ids.push_back(batch.add_sequence());
          batch.reserve(ids.back(), context + (args.reps + 1) * steps + 1);
          prefill(batch, ids.back(), tokens_for(context, c.n_vocab, i));
          next[i] = static_cast<uint32_t>((i * 31 + 7) % c.n_vocab);
        }
        std::vector<Batch::Work> work(s);
        for (int i = 0; i < s; ++i) work[i] = {ids[i], std::span<const uint32_t>(&next[i], 1)};
        auto run = [&] {
          for (size_t k = 0; k < steps; ++k) batch.step(work);
        };
        const double sec = median_seconds(run, args.reps, 0);  // one warm-up + reps samples
        const double tps = s * steps / sec;
        if (s == streams.front()) single = tps / s;
        table.add({std::to_string(threads), std::to_string(s), fmt(1e3 * sec / steps, 2), fmt(tps, 1),
                   fmt(tps / single, 2) + "x"});
        out["rows"].push_back({{"threads", threads}, {"streams", s}, {"ms_per_step", 1e3 * sec / steps},
                               {"aggregate_tokens_per_s", tps}, {"vs_one_stream", tps / single}});
      }
      // Prefix cache: the system prompt prefilled once and kept; each sample forks it (a copy of its KV rows).
      Batch batch(model, {.max_context = 0, .max_rows = 64, .kv_block = 16, .n_threads = threads});
      const auto sys = tokens_for(system, c.n_vocab, 99);
      const auto tail = tokens_for(user, c.n_vocab, 98);
      std::vector<uint32_t> whole = sys;
      whole.insert(whole.end(), tail.begin(), tail.end());
      const auto cached = batch.add_sequence();
      prefill(batch, cached, sys);
      const double miss = median_seconds([&] {
        const auto seq = batch.add_sequence();
        batch.reserve(seq, whole.size());
        prefill(batch, seq, whole);
        batch.remove_sequence(seq);
      }, args.reps, 0);
      const double hit = median_seconds([&] {
        const auto seq = batch.fork_sequence(cached, system, whole.size());
        prefill(batch, seq, tail);
        batch.remove_sequence(seq);
      }, args.reps, 0);
      prefix_table.add({std::to_string(threads), fmt(1e3 * miss, 1), fmt(1e3 * hit, 1), fmt(miss / hit, 2) + "x"});
      out["prefix"].push_back({{"threads", threads}, {"system", system}, {"user", user}, {"miss_ms", 1e3 * miss},
                               {"hit_ms", 1e3 * hit}, {"speedup", miss / hit}});
    }
    if (args.json) {
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::printf("bench-batch: %s, each sequence at %zu tokens of context, %zu decode steps per sample, median of "
                  "%d samples (ratios vs %d stream%s, same run)\n",
                  model_path.c_str(), context, steps, args.reps, streams.front(), streams.front() == 1 ? "" : "s");
      std::printf("%s\n", table.str().c_str());
      std::printf("prefix cache: %zu shared + %zu own prompt tokens\n%s", system, user, prefix_table.str().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-batch: %s\n", e.what());
    return 1;
  }
  return 0;
}
