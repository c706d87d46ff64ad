// bench-busy: the bundled model's forward pass on a machine that other processes keep busy (issue 13). For each
// count of CPU hogs (child processes that spin) it times a prefill of --prompt tokens and single decode steps at
// each thread count, interleaved (threads 1, 2, 1, 2, ...), and reports medians and the ratio to one thread.
//
// What it shows: a pool whose caller waits for every thread (an OpenMP barrier) collapses when a helper is
// descheduled (each parallel op waits a scheduler time slice); one that counts items, not threads, degrades to
// about the one-thread time. Figures are only meaningful on an otherwise quiet machine: the hogs are the load.
#include "perf/common/bench_util.h"

#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::perf;

namespace {

const char* kUsage =
    "bench-busy: the bundled model's forward pass (prefill and decode) at each thread count while N CPU hogs run\n"
    "Usage: bench-busy [--busy LIST] [--prompt N] [--decode N] [--model PATH] [common flags]\n"
    "  --busy LIST     comma-separated counts of CPU-hog processes (default 0,3)\n"
    "  --prompt N      prefill length in tokens (default 32)\n"
    "  --decode N      decode steps timed after each prefill, each step one sample (default 8)\n"
    "  --model PATH    model file (default: SQRTDK_MODEL, else the bundled <build>/models/default.sqdk)\n"
    "Examples:\n"
    "  bench-busy --busy 0,3 --threads 1,2 --reps 9\n"
    "  bench-busy --busy 3 --json";

std::vector<int> parse_list(const std::string& flag, const std::string& text, int min_value) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < min_value || v > 64)
      throw std::invalid_argument(flag + ": expected integers in [" + std::to_string(min_value) + ", 64], got '" +
                                  item + "'");
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw std::invalid_argument(flag + ": empty list");
  return out;
}

// CPU hogs: child processes that spin until killed (and die with this process: PR_SET_PDEATHSIG).
class Hogs {
 public:
  explicit Hogs(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("fork failed");
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;) __asm__ __volatile__("");  // spins; the empty asm keeps the loop from being optimised away
      }
      pids_.push_back(pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(n > 0 ? 300 : 0));  // let the scheduler spread them
  }
  ~Hogs() {
    for (pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  Hogs(const Hogs&) = delete;
  Hogs& operator=(const Hogs&) = delete;

 private:
  std::vector<pid_t> pids_;
};

}  // namespace

int main(int argc, char** argv) {
  BenchArgs args = BenchArgs::parse(argc, argv, kUsage);
  std::vector<int> busy = {0, 3};
  int prompt_len = 32, decode_steps = 8;
  std::string model_path = default_model_path();
  try {
    for (size_t i = 0; i < args.rest.size(); ++i) {
      const std::string& a = args.rest[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= args.rest.size()) throw std::invalid_argument(a + " needs a value");
        return args.rest[++i];
      };
      if (a == "--busy")
        busy = parse_list("--busy", value(), 0);
      else if (a == "--prompt")
        prompt_len = parse_list("--prompt", value(), 1).at(0);
      else if (a == "--decode")
        decode_steps = parse_list("--decode", value(), 1).at(0);
      else if (a == "--model")
        model_path = value();
      else
        throw std::invalid_argument("unknown argument '" + a + "' (see --help)");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-busy: usage error: %s\n", e.what());
    return 1;
  }
  if (args.smoke) {
    busy = {1};
    prompt_len = 4;
    decode_steps = 1;
  }

  std::shared_ptr<const Model> model;
  try {
    model = Model::load(model_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-busy: %s\n", e.what());
    return 2;
  }
  const uint32_t n_vocab = static_cast<uint32_t>(model->config().n_vocab);
  std::vector<uint32_t> prompt(static_cast<size_t>(prompt_len));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<uint32_t>((i * 37 + 11) % n_vocab);
  if (prompt.size() + static_cast<size_t>(decode_steps) > model->config().max_seq) {
    std::fprintf(stderr, "bench-busy: --prompt + --decode exceeds the model's context (%zu)\n",
                 static_cast<size_t>(model->config().max_seq));
    return 1;
  }

  nlohmann::json out = {{"machine", machine_json({}, "wall-clock median of " + std::to_string(args.reps) +
                                                      " interleaved runs per thread count, warm caches",
                                          args.threads)},
                        {"model", model_path},
                        {"prompt_tokens", prompt_len},
                        {"decode_steps", decode_steps},
                        {"reps", args.reps},
                        {"results", nlohmann::json::array()}};
  Table table({"hogs", "threads", "prefill ms", "decode ms/token", "prefill vs 1 thread", "decode vs 1 thread"});
  for (int hogs : busy) {
    std::map<int, std::vector<double>> prefill_s, decode_s;
    {
      const Hogs running(hogs);
      std::vector<Session> sessions;
      for (int t : args.threads) {
        SessionOptions so;
        so.n_threads = t;
        sessions.emplace_back(model, so);
        sessions.back().prefill(prompt);  // warm-up: scratch grown, pool helpers started
        sessions.back().reset();
      }
      for (int rep = 0; rep < args.reps; ++rep)
        for (size_t k = 0; k < sessions.size(); ++k) {  // interleaved, so drift in the load hits every count alike
          Session& s = sessions[k];
          s.reset();
          double t0 = now_seconds();
          std::span<const float> logits = s.prefill(prompt);
          prefill_s[args.threads[k]].push_back(now_seconds() - t0);
          for (int step = 0; step < decode_steps; ++step) {
            const uint32_t next = static_cast<uint32_t>(step * 7 + 1) % n_vocab;
            t0 = now_seconds();
            logits = s.decode(next);
            decode_s[args.threads[k]].push_back(now_seconds() - t0);
          }
          (void)logits;
        }
    }
    const double p1 = median(prefill_s[args.threads[0]]), d1 = median(decode_s[args.threads[0]]);
    for (int t : args.threads) {
      const double p = median(prefill_s[t]), d = median(decode_s[t]);
      table.add({std::to_string(hogs), std::to_string(t), fmt(p * 1e3, 2), fmt(d * 1e3, 3), fmt(p1 / p, 2) + "x",
                 fmt(d1 / d, 2) + "x"});
      out["results"].push_back({{"hogs", hogs},
                                {"threads", t},
                                {"prefill_ms_median", p * 1e3},
                                {"decode_ms_per_token_median", d * 1e3},
                                {"prefill_speedup_vs_first_thread_count", p1 / p},
                                {"decode_speedup_vs_first_thread_count", d1 / d}});
    }
  }
  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("bench-busy: %s, prompt %d tokens, %d decode steps, median of %d reps (speedups vs %d thread%s)\n",
                model_path.c_str(), prompt_len, decode_steps, args.reps, args.threads[0],
                args.threads[0] == 1 ? "" : "s");
    std::printf("%s", table.str().c_str());
  }
  return 0;
}
