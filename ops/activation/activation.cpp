// Activations: argument checks, split over threads, dispatch on Isa.
#include "ops/activation/activation.h"

#include "ops/base/threading.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <initializer_list>
#include <string>

namespace sqrtdk::ops {
namespace {

// Chunks of 64 floats (a multiple of every vector width) so only the last chunk has a tail. Below 16 Ki floats a
// second thread costs more to wake than it saves (an estimate: ~5 us of OpenMP wake-up against ~2 us of work).
constexpr size_t kGranule = 64;
constexpr size_t kMinPerThread = 16384;

template <class F>
void for_chunks(size_t n, int n_threads, F fn) {
  const size_t by_size = std::max<size_t>(1, n / kMinPerThread);
  const int threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(resolve_threads(n_threads)), by_size));
  if (threads <= 1) {
    fn(size_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const Range r = split_range(n, static_cast<size_t>(threads), static_cast<size_t>(omp_get_thread_num()), kGranule);
    if (r.end > r.begin) fn(r.begin, r.end);
  }
}

void check_ptrs(const char* op, size_t n, std::initializer_list<const float*> ptrs) {
  if (n == 0) return;
  for (const float* p : ptrs)
    if (p == nullptr) throw Error(std::string(op) + ": null pointer for " + std::to_string(n) + " elements");
}

}  // namespace

void gelu_tanh(Isa isa, const float* src, float* dst, size_t n, int n_threads) {
  check_ptrs("gelu_tanh", n, {src, dst});
  for_chunks(n, n_threads, [&](size_t b, size_t e) {
    switch (isa) {
      case Isa::avx512: gelu_tanh_avx512(src + b, dst + b, e - b); break;
      case Isa::avx2: gelu_tanh_avx2(src + b, dst + b, e - b); break;
      case Isa::ref: gelu_tanh_ref(src + b, dst + b, e - b); break;
    }
  });
}

void silu(Isa isa, const float* src, float* dst, size_t n, int n_threads) {
  check_ptrs("silu", n, {src, dst});
  for_chunks(n, n_threads, [&](size_t b, size_t e) {
    switch (isa) {
      case Isa::avx512: silu_avx512(src + b, dst + b, e - b); break;
      case Isa::avx2: silu_avx2(src + b, dst + b, e - b); break;
      case Isa::ref: silu_ref(src + b, dst + b, e - b); break;
    }
  });
}

void gelu_tanh(Isa isa, float* x, size_t n, int n_threads) { gelu_tanh(isa, x, x, n, n_threads); }
void silu(Isa isa, float* x, size_t n, int n_threads) { silu(isa, x, x, n, n_threads); }

void swiglu(Isa isa, const float* gate, const float* up, float* dst, size_t n, int n_threads) {
  check_ptrs("swiglu", n, {gate, up, dst});
  for_chunks(n, n_threads, [&](size_t b, size_t e) {
    switch (isa) {
      case Isa::avx512: swiglu_avx512(gate + b, up + b, dst + b, e - b); break;
      case Isa::avx2: swiglu_avx2(gate + b, up + b, dst + b, e - b); break;
      case Isa::ref: swiglu_ref(gate + b, up + b, dst + b, e - b); break;
    }
  });
}

void add(Isa isa, const float* a, const float* b, float* dst, size_t n, int n_threads) {
  check_ptrs("add", n, {a, b, dst});
  for_chunks(n, n_threads, [&](size_t lo, size_t hi) {
    switch (isa) {
      case Isa::avx512: add_avx512(a + lo, b + lo, dst + lo, hi - lo); break;
      case Isa::avx2: add_avx2(a + lo, b + lo, dst + lo, hi - lo); break;
      case Isa::ref: add_ref(a + lo, b + lo, dst + lo, hi - lo); break;
    }
  });
}

}  // namespace sqrtdk::ops
