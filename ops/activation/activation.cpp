// Activations: argument checks, split over threads, dispatch through the kernel table (defined here).
#include "ops/activation/activation.h"

#include "ops/activation/activation_kernels.h"

#include "ops/base/threading.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <initializer_list>
#include <string>

namespace sqrtdk::ops {
namespace {

// Items of kChunk floats (a multiple of every vector width, so only the last item has a tail), claimed by the
// participants as they come; the boundaries depend on n only. Below two chunks one thread: a second thread costs
// more to wake than it saves (an estimate: ~5 us of wake-up against ~2 us of work per 16 Ki floats).
constexpr size_t kChunk = 16384;

template <class F>
void for_chunks(size_t n, int n_threads, F fn) {
  const size_t n_items = chunk_count(n, kChunk);
  const int threads = n_items < 2 ? 1 : resolve_threads(n_threads);
  if (threads <= 1) {
    fn(size_t{0}, n);
    return;
  }
  parallel_for(threads, n_items, [&](size_t item, int) {
    const Range r = chunk_range(n, kChunk, item);
    fn(r.begin, r.end);
  });
}

void check_ptrs(const char* op, size_t n, std::initializer_list<const float*> ptrs) {
  if (n == 0) return;
  for (const float* p : ptrs)
    if (p == nullptr) throw Error(std::string(op) + ": null pointer for " + std::to_string(n) + " elements");
}

}  // namespace

std::span<const KernelEntry<ActivationKernels>> activation_kernels() {
  // Static casts pick the out-of-place overloads of the references.
  using Unary = void (*)(const float*, float*, size_t);
  static constexpr KernelEntry<ActivationKernels> table[] = {
      {Isa::avx512, "activation_avx512_rr2_p5", {gelu_tanh_avx512, silu_avx512, swiglu_avx512, add_avx512}},
      {Isa::avx2, "activation_avx2_rr2_p5", {gelu_tanh_avx2, silu_avx2, swiglu_avx2, add_avx2}},
      {Isa::ref, "activation_ref_f64",
       {static_cast<Unary>(gelu_tanh_ref), static_cast<Unary>(silu_ref), swiglu_ref, add_ref}},
  };
  return table;
}

void gelu_tanh(Isa isa, const float* src, float* dst, size_t n, int n_threads) {
  const ActivationKernels& kernels = select_kernel(activation_kernels(), isa).kernels;
  check_ptrs("gelu_tanh", n, {src, dst});
  for_chunks(n, n_threads, [&](size_t b, size_t e) {
    kernels.gelu_tanh(src + b, dst + b, e - b);
  });
}

void silu(Isa isa, const float* src, float* dst, size_t n, int n_threads) {
  const ActivationKernels& kernels = select_kernel(activation_kernels(), isa).kernels;
  check_ptrs("silu", n, {src, dst});
  for_chunks(n, n_threads, [&](size_t b, size_t e) {
    kernels.silu(src + b, dst + b, e - b);
  });
}

void gelu_tanh(Isa isa, float* x, size_t n, int n_threads) { gelu_tanh(isa, x, x, n, n_threads); }
void silu(Isa isa, float* x, size_t n, int n_threads) { silu(isa, x, x, n, n_threads); }

void swiglu(Isa isa, const float* gate, const float* up, float* dst, size_t n, int n_threads) {
  const ActivationKernels& kernels = select_kernel(activation_kernels(), isa).kernels;
  check_ptrs("swiglu", n, {gate, up, dst});
  for_chunks(n, n_threads, [&](size_t b, size_t e) {
    kernels.swiglu(gate + b, up + b, dst + b, e - b);
  });
}

void add(Isa isa, const float* a, const float* b, float* dst, size_t n, int n_threads) {
  const ActivationKernels& kernels = select_kernel(activation_kernels(), isa).kernels;
  check_ptrs("add", n, {a, b, dst});
  for_chunks(n, n_threads, [&](size_t lo, size_t hi) {
    kernels.add(a + lo, b + lo, dst + lo, hi - lo);
  });
}

}  // namespace sqrtdk::ops
