// ThreadPool (thread_pool.h) and resolve_threads (threading.h).
#include "ops/base/thread_pool.h"

#include "ops/base/threading.h"

#include <algorithm>
#include <cstdlib>
#include <system_error>
#include <thread>
#include <vector>

#include <sched.h>
#include <unistd.h>

namespace sqrtdk {

namespace {

using Clock = std::chrono::steady_clock;

// The spin before sleeping: 50 us covers the gaps between the jobs of a decode step (~40 jobs in ~0.35 ms on the
// bundled model), so helpers stay awake through a step instead of costing a futex wake per op. On a busy machine
// (bench-busy, 3 hogs, interleaved medians of 31, 2-vCPU Xeon VM shared with other builds, 2026-11-30) spins of
// 0 and 50 us both kept 2 threads at 0.98–1.03x of 1 thread; 200 us once fell to 0.11x (prefill).
constexpr std::chrono::nanoseconds kDefaultSpin = std::chrono::microseconds(50);
// Back-off (thread_pool.h): a wait over this long for helper-claimed items is a preemption, not a slow item on an
// idle machine (a futex wake is tens of microseconds; a scheduler time slice milliseconds). The longest serial
// window: a busy machine reaches it after a few preemptions in a row, and tries its helpers again 10 times a second.
constexpr std::chrono::nanoseconds kBackoffWait = std::chrono::microseconds(200);
constexpr std::chrono::nanoseconds kMaxBackoff = std::chrono::milliseconds(100);

// The claim word: generation in the high 32 bits; in the low 32 the unclaimed items [front, end), front in bits
// 16..31 and end in bits 0..15. The caller (worker 0) claims from the front, the helpers from the end: with two
// threads each keeps the same end of every job, so a GEMM's thread reads the same part of the weights call after
// call (its own L2/L3 keeps them warm; a shared counter dealt them out at random), and a helper that is late only
// moves the meeting point. A finished job's word is (generation, 0, 0): front == end, nothing left to claim.
constexpr uint32_t kItemBits = 16;
constexpr uint32_t kItemMask = (uint32_t{1} << kItemBits) - 1;
constexpr size_t kMaxJobItems = kItemMask;
constexpr uint64_t job_word(uint32_t generation, uint32_t front, uint32_t end) {
  return (uint64_t{generation} << 32) | (uint64_t{front} << kItemBits) | end;
}

// Depth of items running on this thread: a parallel_for from inside an item runs serially (no deadlock: the
// nested caller would otherwise wait for helpers that may be the ones running the outer items).
thread_local int t_item_depth = 0;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until done(a.load()) holds: spins for at most `spin`, then sleeps on the futex of `a` (woken by
// notify_one after each change that may make done() true). Every 64 pauses (a few microseconds) the spin yields the
// CPU: on an idle machine sched_yield returns at once, on a busy one it lets a runnable thread of this CPU (maybe
// the very participant we wait for) run instead of our spinning.
template <class Done>
uint32_t await(const std::atomic<uint32_t>& a, std::chrono::nanoseconds spin, Done done) {
  uint32_t v = a.load(std::memory_order_acquire);
  if (done(v)) return v;
  if (spin.count() > 0) {
    const Clock::time_point deadline = Clock::now() + spin;
    for (unsigned i = 1;; ++i) {
      cpu_relax();
      v = a.load(std::memory_order_acquire);
      if (done(v)) return v;
      if (i % 64 == 0) {
        if (Clock::now() >= deadline) break;
        sched_yield();
      }
    }
  }
  while (!done(v)) {
    a.wait(v, std::memory_order_acquire);
    v = a.load(std::memory_order_acquire);
  }
  return v;
}

struct ItemDepth {
  ItemDepth() { ++t_item_depth; }
  ~ItemDepth() { --t_item_depth; }
  ItemDepth(const ItemDepth&) = delete;
  ItemDepth& operator=(const ItemDepth&) = delete;
};

}  // namespace

struct ThreadPool::Helper {
  std::atomic<uint32_t> wake{0};  // bumped (and notified) by the caller for each job this helper may join
  std::thread thread;
};

ThreadPool::Options::Options() : spin(kDefaultSpin) {}

ThreadPool::ThreadPool() : ThreadPool(Options()) {}
ThreadPool::ThreadPool(Options options)
    : options_(std::move(options)), claim_(job_word(0, 0, 0)), owner_pid_(static_cast<int>(::getpid())) {}

ThreadPool::~ThreadPool() {
  if (static_cast<int>(::getpid()) != owner_pid_) {  // a forked child: the helper threads do not exist here
    for (auto& h : helpers_) h->thread.detach();
    return;
  }
  stop_.store(true, std::memory_order_release);
  for (auto& h : helpers_) {
    h->wake.fetch_add(1, std::memory_order_release);
    h->wake.notify_one();
  }
  for (auto& h : helpers_) h->thread.join();
}

int ThreadPool::helpers() const { return static_cast<int>(helpers_.size()); }

void ThreadPool::start_helpers(int count) {
  while (static_cast<int>(helpers_.size()) < count) {
    auto h = std::make_unique<Helper>();
    const int worker = static_cast<int>(helpers_.size()) + 1;
    try {
      h->thread = std::thread([this, helper = h.get(), worker] { helper_main(*helper, worker); });
    } catch (const std::system_error&) {
      return;  // no more threads (a resource limit): the participants we have do every item
    }
    helpers_.push_back(std::move(h));
  }
}

void ThreadPool::run(int n_threads, size_t n_items, void* ctx, Call call) {
  if (n_items == 0) return;
  auto run_serially = [&] {
    const ItemDepth depth;
    for (size_t i = 0; i < n_items; ++i) call(ctx, i, 0);
  };
  if (n_threads <= 1 || n_items <= 1 || t_item_depth > 0 || busy_.exchange(true)) {
    run_serially();
    return;
  }
  struct Release {
    std::atomic<bool>& busy;
    ~Release() { busy.store(false, std::memory_order_release); }
  } release{busy_};
  if (serial_until_ != Clock::time_point{}) {  // backing off: a helper was preempted mid-item recently
    if (Clock::now() < serial_until_) {
      run_serially();
      return;
    }
    serial_until_ = Clock::time_point{};
  }
  if (n_items <= kMaxJobItems) {
    run_job(n_threads, static_cast<uint32_t>(n_items), ctx, call);
    return;
  }
  // More items than the claim word counts: consecutive jobs over slices of the index range.
  struct Slice {
    void* ctx;
    Call call;
    size_t first;
  };
  for (size_t first = 0; first < n_items; first += kMaxJobItems) {
    Slice slice{ctx, call, first};
    run_job(n_threads, static_cast<uint32_t>(std::min(kMaxJobItems, n_items - first)), &slice,
            [](void* s, size_t item, int worker) {
              const Slice& sl = *static_cast<Slice*>(s);
              sl.call(sl.ctx, sl.first + item, worker);
            });
  }
}

void ThreadPool::run_job(int n_threads, uint32_t n_items, void* ctx, Call call) {
  const int wanted = static_cast<int>(std::min<int64_t>(n_threads, n_items));  // never more threads than items
  start_helpers(wanted - 1);
  const int participants = std::min(wanted, helpers() + 1);

  // Publish: the descriptor first, then the claim word that makes it current (release: a helper that reads this
  // generation reads this descriptor or a later one, see claim_items).
  const uint32_t generation = static_cast<uint32_t>(claim_.load(std::memory_order_relaxed) >> 32) + 1;
  if (generation == 0) {
    // Generations wrap after 2^32 jobs. A helper that loaded the claim word before the wrap and was descheduled
    // ever since could otherwise see the very same word again; wait until no helper holds a loaded word.
    while (claiming_helpers_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }
  n_threads_.store(participants, std::memory_order_release);
  ctx_.store(ctx, std::memory_order_release);
  call_.store(call, std::memory_order_release);
  remaining_.store(n_items, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;  // no helper touches it now: every item of the last job finished before it returned
  claim_.store(job_word(generation, 0, n_items), std::memory_order_seq_cst);

  for (int i = 0; i + 1 < participants; ++i) {
    Helper& h = *helpers_[static_cast<size_t>(i)];
    h.wake.fetch_add(1, std::memory_order_release);
    h.wake.notify_one();  // a futex wake only if the helper sleeps (not while it spins)
  }
  const Clock::time_point started = Clock::now();
  claim_items(0);
  const Clock::time_point own_done = Clock::now();
  // Wait for the items the helpers claimed (not for the helpers: one that never woke claimed nothing).
  await(remaining_, options_.spin, [](uint32_t left) { return left == 0; });
  const Clock::time_point all_done = Clock::now();
  const Clock::duration waited = all_done - own_done, worked = own_done - started;
  if (waited > std::max<Clock::duration>(kBackoffWait, worked)) {
    backoff_window_ = std::min<Clock::duration>(std::max(2 * backoff_window_, waited), kMaxBackoff);
    serial_until_ = all_done + backoff_window_;
  } else if (waited < worked / 4) {
    backoff_window_ /= 2;
  }
  claim_.store(job_word(generation, 0, 0), std::memory_order_seq_cst);

  if (error_) {
    std::exception_ptr e = std::move(error_);
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

// Why a participant never runs an item of a job that has finished (the caller may have returned, and its fn with
// it), though helpers wake at any time:
//  1. A claim is a CAS of the claim word from (g, front, end) with front < end to (g, front + 1, end) (the caller)
//     or (g, front, end − 1) (a helper): it takes item front, or item end − 1.
//  2. The caller closes job g by storing (g, 0, 0) after its last item finished, and writes the next job's
//     descriptor only after that, each field with a release store; participants read the fields with acquire
//     loads after loading the claim word. So if any field read here comes from a later job, the close is visible
//     to this thread and the CAS (expecting (g, front, end), front < end) fails. If the CAS succeeds, every field
//     read was job g's, and the item taken was unclaimed: job g cannot finish before this participant finishes it
//     (completion counts items), so its fn and descriptor are alive until then.
//  3. ABA: within a job front only grows and end only shrinks, so a word never comes back; across jobs it could
//     only come back to (g, front, end) after 2^32 more jobs, which passes a generation wrap, where the caller
//     waits until no helper is between its claim_items entry and exit (claiming_helpers_, seq_cst both ways, so a
//     helper counted after the wait check loads a word at least as new as the close).
void ThreadPool::claim_items(int worker) {
  for (;;) {
    uint64_t word = claim_.load(std::memory_order_seq_cst);
    const uint32_t front = static_cast<uint32_t>(word >> kItemBits) & kItemMask;
    const uint32_t end = static_cast<uint32_t>(word) & kItemMask;
    const int n_threads = n_threads_.load(std::memory_order_acquire);
    void* ctx = ctx_.load(std::memory_order_acquire);
    const Call call = call_.load(std::memory_order_acquire);
    if (front >= end || worker >= n_threads) return;
    const bool from_front = worker == 0;
    const uint64_t claimed = from_front ? word + (uint64_t{1} << kItemBits) : word - 1;
    if (!claim_.compare_exchange_weak(word, claimed, std::memory_order_acq_rel, std::memory_order_relaxed))
      continue;
    finish_item(from_front ? front : end - 1, worker, ctx, call);
  }
}

void ThreadPool::finish_item(uint32_t item, int worker, void* ctx, Call call) {
  if (!failed_.load(std::memory_order_relaxed)) {
    const ItemDepth depth;
    try {
      call(ctx, item, worker);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  // The last touch of the job's state (acq_rel: the caller's acquire load of 0 sees every item's writes).
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_one();
}

void ThreadPool::helper_main(Helper& self, int worker) {
  uint32_t seen = 0;
  for (;;) {
    seen = await(self.wake, options_.spin, [seen](uint32_t v) { return v != seen; });
    if (stop_.load(std::memory_order_acquire)) return;
    if (options_.before_helper_claims) options_.before_helper_claims();
    claiming_helpers_.fetch_add(1, std::memory_order_seq_cst);
    claim_items(worker);
    claiming_helpers_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

int ThreadPool::wake_helpers(int n_threads, std::chrono::microseconds timeout) {
  if (n_threads <= 1) return 0;
  // A job of n_threads items, each waiting (below) until every helper has started one, or until the timeout.
  // So the job ends with each helper that took part just past its item, spinning.
  const size_t n = static_cast<size_t>(n_threads);
  // Counts helpers, not helper items: a helper past its item may take the caller's item before the caller does (a
  // descheduled caller), and a count of items would then report one helper more than there are.
  std::vector<std::atomic<bool>> arrived(n);
  std::atomic<int> helpers_in{0};
  const Clock::time_point deadline = Clock::now() + timeout;
  parallel_for(n_threads, n, [&](size_t, int worker) {
    // Every item waits until the helpers have all arrived, so no participant takes a second item while a helper
    // still wakes (a caller that did would end the job with that helper still waking).
    if (worker != 0 && !arrived[static_cast<size_t>(worker)].exchange(true, std::memory_order_acq_rel))
      helpers_in.fetch_add(1, std::memory_order_acq_rel);
    while (helpers_in.load(std::memory_order_acquire) < n_threads - 1 && Clock::now() < deadline) cpu_relax();
  });
  return helpers_in.load(std::memory_order_relaxed);
}

int wake_pool_helpers(int n_threads) { return n_threads <= 1 ? 0 : this_thread_pool().wake_helpers(n_threads); }

ThreadPool& this_thread_pool() {
  thread_local ThreadPool pool;
  return pool;
}

int resolve_threads(int n_threads) {
  if (n_threads > 0) return n_threads;
  // Read once (like the ISA choice): OMP_NUM_THREADS if it holds a positive count (its first entry), else the CPUs
  // this process may run on (sched_getaffinity: a taskset or container CPU set counts, offline cores do not).
  static const int default_threads = [] {
    if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const long n = std::strtol(env, &end, 10);
      if (end != env && n > 0 && n <= 4096 && (*end == '\0' || *end == ',')) return static_cast<int>(n);
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return default_threads;
}

}  // namespace sqrtdk
