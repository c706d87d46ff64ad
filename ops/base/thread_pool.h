// ThreadPool: parallel_for(n_threads, n_items, fn) runs fn(item, worker) once for every item in [0, n_items), on
// the calling thread and up to n_threads − 1 helper threads (in the spirit of pthreadpool / XNNPACK).
//
// Built for a machine that other processes share (issue 13). An OpenMP region splits work statically per thread and
// ends at a barrier, so when a helper is descheduled every region waits a scheduler time slice for it. Here:
//   - the calling thread participates and every participant claims items dynamically from one atomic word: the
//     caller from the front, the helpers from the back (so with two threads each tends to keep the same half of
//     every job from call to call, and its caches the data that half reads);
//   - completion is counted by items, not by threads: the caller returns as soon as every item is done, even if a
//     helper never woke up. A helper that wakes late finds nothing left to claim and goes back to sleep;
//   - helpers sleep on a futex (std::atomic::wait) after a bounded spin (kSpin below), never spin while idle.
// So a busy machine costs the caller at most the items a descheduled helper had already claimed, not a time slice
// per parallel region, and with no helper at all it runs as fast as one thread.
//
// Contract of fn(item, worker): called exactly once per item (unless an earlier item threw: see below); `worker` in
// [0, n_threads) identifies the participant running it (0 is the caller), for per-worker scratch; two items running
// at the same time never share a worker id. Which worker runs which item, and in which order, is unspecified:
// results must depend only on the item (ops/base/threading.h has the determinism rule).
// Exceptions: the first exception thrown by fn is rethrown on the caller once the running items have finished;
// items not yet started are skipped.
// Nested calls: parallel_for from inside an item runs serially on the calling thread (worker 0), no deadlock.
// One caller at a time per pool: a second thread calling a pool that is busy runs its items itself, serially.
// Back-off: when the caller waits for a helper-claimed item longer than it worked itself (and over kBackoffWait), the
// helper was preempted mid-item: other processes hold the cores. Jobs then run on the caller alone for as long as
// that wait lasted, twice the last window if it happens again (up to kMaxBackoff, in thread_pool.cpp); each job
// with little waiting halves the window. A window in time, not in jobs: an isolated preemption (a VM's vCPU
// stolen for a few ms, seen on idle 2-vCPU VMs) costs at most about the time it already cost, while on a busy
// machine the window grows until each op stops waiting a scheduler time slice. Results do not change: item
// boundaries never depend on who runs them.
// After fork() the child's copy of a pool has no helper threads: its jobs run on the calling thread alone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

namespace sqrtdk {

class ThreadPool {
 public:
  // How long a participant spins before it sleeps: a helper after its last item (waiting for the next job), the
  // caller waiting for the helpers' last items. Decode issues one job every few microseconds; a helper asleep costs
  // the caller a futex wake (a syscall) and arrives tens of microseconds later. Measured (quiet 2-vCPU Xeon VM,
  // 2026-11-30, bundled model, 2 threads): see thread_pool.cpp, kDefaultSpin.
  struct Options {
    std::chrono::nanoseconds spin;
    // Test hook: runs on a helper thread each time it wakes for a job, before it claims anything (e.g. to hold
    // helpers back and check that the caller finishes alone). Empty in production.
    std::function<void()> before_helper_claims;
    Options();
  };

  ThreadPool();
  explicit ThreadPool(Options options);
  ~ThreadPool();  // wakes and joins the helpers
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  template <class Fn>
  void parallel_for(int n_threads, size_t n_items, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(n_threads, n_items, const_cast<void*>(static_cast<const void*>(&fn)), [](void* ctx, size_t item, int worker) {
      (*static_cast<F*>(ctx))(item, worker);
    });
  }

  int helpers() const;  // helper threads started so far (they are started on demand, up to n_threads − 1)

  // Returns once up to n_threads − 1 helpers are awake and running (each then spins for Options::spin before it
  // sleeps again), or after `timeout`; the number that woke. For benchmarks that time one call right after
  // something long that put the helpers to sleep (a cache flush): without it such a call also times the wake-up of
  // an idle vCPU (60–130 us on the 2-vCPU VMs, as long as a decode attention call), which a forward pass, whose
  // ops follow each other within the spin, does not pay.
  // Untimed by design: it costs up to `timeout` when the pool is backing off (its jobs then run on the caller alone).
  int wake_helpers(int n_threads, std::chrono::microseconds timeout = std::chrono::microseconds(2000));

 private:
  using Call = void (*)(void* ctx, size_t item, int worker);
  struct Helper;
  void run(int n_threads, size_t n_items, void* ctx, Call call);
  void run_job(int n_threads, uint32_t n_items, void* ctx, Call call);
  void start_helpers(int count);
  void helper_main(Helper& self, int worker);
  void claim_items(int worker);
  void finish_item(uint32_t item, int worker, void* ctx, Call call);

  Options options_;
  // The job: the claim word packs (generation << 32 | unclaimed items [front, end), 16 bits each); the descriptor
  // fields below it belong to the generation in the claim word. The proof that a late helper never runs a finished job's items is at
  // claim_items() in thread_pool.cpp.
  alignas(64) std::atomic<uint64_t> claim_;
  std::atomic<int> n_threads_{0};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<Call> call_{nullptr};
  alignas(64) std::atomic<uint32_t> remaining_{0};  // items of the current job not finished; the caller waits on it
  std::atomic<bool> failed_{false};                 // an item threw: skip the rest
  std::mutex error_mutex_;
  std::exception_ptr error_;  // the first exception, under error_mutex_
  alignas(64) std::atomic<int> claiming_helpers_{0};  // helpers inside claim_items (for the generation wrap)
  std::atomic<bool> busy_{false};                     // a caller is inside run()
  // Back-off (see the header comment), touched only by the caller holding busy_: jobs run serially until
  // serial_until_ (the epoch: not backing off); backoff_window_ is the last window, doubled by the next preemption.
  std::chrono::steady_clock::time_point serial_until_{};
  std::chrono::steady_clock::duration backoff_window_{};
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Helper>> helpers_;
  int owner_pid_;  // after fork() the child has none of the helpers: it must not join them
};

// The calling thread's own pool: created on first use, its helpers started on demand (up to the largest n_threads
// asked of it) and joined when the thread exits. Why per thread rather than one pool for the process: the ops take
// `int n_threads` from their caller (a Session) and two sessions on two threads must never share or wait for each
// other's workers; and no pool is global mutable state. Two sessions used in turn by one thread share its pool,
// which is safe because a thread runs one job at a time.
ThreadPool& this_thread_pool();

// ThreadPool::wake_helpers on the calling thread's pool (0 when n_threads ≤ 1).
int wake_pool_helpers(int n_threads);

// parallel_for on the calling thread's pool; runs inline (no pool touched) when n_threads ≤ 1 or n_items ≤ 1.
template <class Fn>
void parallel_for(int n_threads, size_t n_items, Fn&& fn) {
  if (n_threads <= 1 || n_items <= 1) {
    for (size_t i = 0; i < n_items; ++i) fn(i, 0);
    return;
  }
  this_thread_pool().parallel_for(n_threads, n_items, std::forward<Fn>(fn));
}

}  // namespace sqrtdk
