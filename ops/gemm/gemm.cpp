// GEMM driver (baseline ISA): argument checks, weight packing, the thread split and dispatch through the kernel
// table (defined here: gemm_avx512.cpp, gemm_avx2.cpp, gemm_ref.cpp), and gemm_unpacked for attention.
//
// Thread split: the output is cut into a tm × tn grid of regions whose borders fall on the kernel's tile grid
// (multiples of mr rows and nr columns), so every element is computed by the same kernel in the same K order for
// any thread count: results are bit-identical. M ≤ 16 (decode, small batch) splits N only, so each thread streams
// its own share of the weights once.
// Scratch: thread_local buffers (copies of epilogue operands that alias dst) that grow on first use
// and are then reused: no allocation in the hot path once warm. OpenMP pool threads keep them across calls.
#include "ops/gemm/gemm.h"

#include "ops/base/aligned_buffer.h"
#include "ops/base/threading.h"
#include "ops/gemm/gemm_kernels.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace sqrtdk::ops {

using gemm_detail::BlockSizes;
using gemm_detail::GemmCall;

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::none: return "none";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::silu: return "silu";
  }
  return "unknown";
}

namespace {

using gemm_detail::GemmKernels;

const GemmKernels& kernels_for(Isa isa) { return select_kernel(gemm_detail::gemm_kernels(), isa).kernels; }

void check_isa(const char* where, Isa isa) {
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported, std::string(where) + ": this CPU does not support ISA " + isa_name(isa));
}

std::string dims(size_t a, size_t b) {
  std::string s = "[";
  s.append(std::to_string(a)).append(", ").append(std::to_string(b)).append("]");
  return s;
}

// Whether the address ranges of matrices a [a_rows, a_cols] (stride lda) and b [b_rows, b_cols] (stride ldb)
// overlap (conservative: compares first-to-last element spans).
bool overlaps(const float* a, size_t lda, size_t a_rows, size_t a_cols, const float* b, size_t ldb, size_t b_rows,
              size_t b_cols) {
  if (a == nullptr || b == nullptr || a_rows == 0 || a_cols == 0 || b_rows == 0 || b_cols == 0) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  const uintptr_t a1 = a0 + ((a_rows - 1) * lda + a_cols) * sizeof(float);
  const uintptr_t b1 = b0 + ((b_rows - 1) * ldb + b_cols) * sizeof(float);
  return a0 < b1 && b0 < a1;
}

// Whether matrices a and b [rows, cols] (strides lda, ldb ≥ cols) share an element. Exact when the strides are
// equal and the pointers a whole number of floats apart (b's rows then fall on a's row grid, each cut at most once
// by a row end); otherwise conservative (the spans intersect).
bool shares_elements(const float* a, size_t lda, const float* b, size_t ldb, size_t rows, size_t cols) {
  if (!overlaps(a, lda, rows, cols, b, ldb, rows, cols)) return false;
  if (lda != ldb) return true;
  auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  if (b0 < a0) std::swap(a0, b0);
  if ((b0 - a0) % sizeof(float) != 0) return true;
  const size_t d = (b0 - a0) / sizeof(float), q = d / lda, r = d % lda;
  // b's element (i, j) is a's (q + i, r + j) while r + j < ld, else a's (q + i + 1, r + j − ld).
  if (q < rows && r < cols) return true;  // the unwrapped part meets a's columns [0, cols) from row q
  return r + cols > lda && q + 1 < rows;  // the wrapped part: columns [0, r + cols − ld) from row q + 1
}

void grow(AlignedBuffer<float>& buffer, size_t count) {
  if (buffer.size() < count) buffer.allocate(count);
}

// Runs body(t) for t in [0, nt) on nt OpenMP threads (directly when nt == 1); rethrows the first exception.
template <class Body>
void run_threads(int nt, const Body& body) {
  if (nt <= 1) {
    body(0);
    return;
  }
  std::vector<std::exception_ptr> errors(nt);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    try {
      body(t);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

struct Grid {
  size_t tm, tn;
};

// Picks the tm × tn split of nt threads that minimises the largest region (in tiles); ties prefer splitting N
// (measured at 2 threads, quiet machine: splitting N gave 0.83–0.95× oneDNN on the prefill shapes, splitting M
// 0.80–0.88×).
Grid choose_grid(size_t M, size_t N, const BlockSizes& bs, int nt) {
  const size_t m_tiles = (M + bs.mr - 1) / bs.mr, n_panels = (N + bs.nr - 1) / bs.nr;
  if (M <= 16) return {1, std::min<size_t>(nt, n_panels)};
  Grid best{1, 1};
  size_t best_cost = SIZE_MAX;
  for (size_t tm = static_cast<size_t>(nt); tm >= 1; --tm) {
    if (nt % tm != 0) continue;
    const size_t tn = nt / tm;
    if (tm > m_tiles || tn > n_panels) continue;
    const size_t cost = ((m_tiles + tm - 1) / tm) * bs.mr * ((n_panels + tn - 1) / tn) * bs.nr;
    if (cost <= best_cost) {
      best_cost = cost;
      best = {tm, tn};
    }
  }
  return best;
}

// The blocked/decode kernels over a tm × tn grid of regions of `call`, with thread-local scratch.
void run_blocked(const GemmKernels& kern, const GemmCall& call, int n_threads) {
  const BlockSizes& bs = kern.bs;
  const int nt = resolve_threads(n_threads);
  const Grid grid = choose_grid(call.M, call.N, bs, nt);
  const size_t k_block = std::min(gemm_detail::k_slice(bs, call.M, call.K), call.K);
  // gemm() admits one kind of sharing between an epilogue operand and dst: the operand IS dst (same stride). With
  // one K slice each element is read before it is written; with several, dst holds partial sums first, so the
  // operand is copied per region before the kernel runs. Each region copies exactly the elements it writes, so no
  // thread reads what another writes (a partial overlap would break that: gemm() rejects it).
  const bool sliced = k_block < call.K;
  const bool copy_multiply = sliced && call.multiply == call.dst;
  const bool copy_residual = sliced && call.residual == call.dst;

  run_threads(static_cast<int>(grid.tm * grid.tn), [&](int t) {
    static thread_local AlignedBuffer<float> multiply_copy, residual_copy;
    const size_t tmi = static_cast<size_t>(t) / grid.tn, tni = static_cast<size_t>(t) % grid.tn;
    const Range mr = split_range(call.M, grid.tm, tmi, bs.mr);
    const Range nr = split_range(call.N, grid.tn, tni, bs.nr);
    if (mr.begin >= mr.end || nr.begin >= nr.end) return;
    GemmCall local = call;
    const size_t rows_t = mr.end - mr.begin, cols_t = nr.end - nr.begin;
    auto copy_region = [&](AlignedBuffer<float>& buf, const float* p, size_t ld, const float*& out_p,
                           size_t& out_ld, size_t& out_m0, size_t& out_n0) {
      grow(buf, rows_t * cols_t);
      for (size_t i = 0; i < rows_t; ++i)
        std::memcpy(buf.data() + i * cols_t, p + (mr.begin + i) * ld + nr.begin, cols_t * sizeof(float));
      out_p = buf.data();
      out_ld = cols_t;
      out_m0 = mr.begin;
      out_n0 = nr.begin;
    };
    if (copy_multiply)
      copy_region(multiply_copy, call.multiply, call.ld_multiply, local.multiply, local.ld_multiply,
                  local.multiply_m0, local.multiply_n0);
    if (copy_residual)
      copy_region(residual_copy, call.residual, call.ld_residual, local.residual, local.ld_residual,
                  local.residual_m0, local.residual_n0);
    // No barrier between the copies and the kernels: a region's copy reads only the elements that region writes.
    kern.region(local, mr.begin, mr.end, nr.begin, nr.end);
  });
}

}  // namespace

std::span<const KernelEntry<GemmKernels>> gemm_detail::gemm_kernels() {
  // Filled on first use (thread-safe): the block sizes are data returned by each ISA's TU, measured there.
  static const KernelEntry<GemmKernels> table[] = {
      {Isa::avx512, "gemm_ukernel_6x64_avx512",
       {gemm_detail::gemm_block_sizes_avx512(), gemm_detail::gemm_region_avx512, gemm_detail::pack_panels_avx512,
        gemm_detail::gemm_direct_avx512}},
      {Isa::avx2, "gemm_ukernel_4x24_avx2",
       {gemm_detail::gemm_block_sizes_avx2(), gemm_detail::gemm_region_avx2, gemm_detail::pack_panels_avx2,
        gemm_detail::gemm_direct_avx2}},
      {Isa::ref, "gemm_ref_f64",
       {{1, 1, 1, 1, 1}, gemm_detail::gemm_region_ref, gemm_detail::pack_panels_ref, gemm_detail::gemm_direct_ref}},
  };
  return table;
}

GemmBlocking gemm_blocking(Isa isa) {
  const BlockSizes bs = kernels_for(isa).bs;
  return {bs.mr, bs.nr, bs.kc, bs.mc, bs.nc};
}

// ---------------------------------------------------------------------------------------------------------------
// PackedWeights

struct PackedWeights::Impl {
  size_t N = 0, K = 0, nr = 0;
  Isa isa = Isa::ref;
  AlignedBuffer<float> data;  // panels (SIMD) or a [N][K] copy (ref)
};

PackedWeights::PackedWeights() = default;
PackedWeights::PackedWeights(PackedWeights&&) noexcept = default;
PackedWeights& PackedWeights::operator=(PackedWeights&&) noexcept = default;
PackedWeights::~PackedWeights() = default;

size_t PackedWeights::N() const { return impl_ ? impl_->N : 0; }
size_t PackedWeights::K() const { return impl_ ? impl_->K : 0; }
Isa PackedWeights::isa() const { return impl_ ? impl_->isa : Isa::ref; }
size_t PackedWeights::nr() const { return impl_ ? impl_->nr : 0; }
size_t PackedWeights::bytes() const { return impl_ ? impl_->data.size() * sizeof(float) : 0; }

PackedWeights PackedWeights::pack(const float* weights, size_t N, size_t K, size_t ld_weights, Isa isa,
                                  const std::function<void(size_t, size_t)>& rows_consumed) {
  const std::string where = "PackedWeights::pack(weights " + dims(N, K) + ", ld_weights " +
                            std::to_string(ld_weights) + ", isa " + isa_name(isa) + ")";
  if (N == 0 || K == 0) throw Error(where + ": N and K must be ≥ 1");
  if (weights == nullptr) throw Error(where + ": weights is null");
  if (ld_weights < K) throw Error(where + ": ld_weights must be ≥ K");
  check_isa(where.c_str(), isa);
  PackedWeights out;
  out.impl_ = std::make_unique<Impl>();
  Impl& p = *out.impl_;
  p.N = N;
  p.K = K;
  p.isa = isa;
  const GemmKernels& kern = kernels_for(isa);
  p.nr = kern.bs.nr;
  const size_t n_panels = (N + p.nr - 1) / p.nr;
  p.data.allocate(n_panels * p.nr * K);
  // In chunks of whole panels (~4 MiB of source), reporting each chunk's rows as consumed.
  const size_t chunk = std::max<size_t>(1, (size_t{4} << 20) / (K * sizeof(float) * p.nr)) * p.nr;
  for (size_t n0 = 0; n0 < N; n0 += chunk) {
    const size_t n1 = std::min(N, n0 + chunk);
    kern.pack(weights, ld_weights, false, N, K, n0, n1, p.data.data());
    if (rows_consumed) rows_consumed(n0, n1);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// gemm

void gemm(const float* src, size_t M, size_t lda, const PackedWeights& weights, float* dst, size_t ldc,
          const GemmEpilogue& epilogue, int n_threads) {
  const size_t N = weights.N(), K = weights.K();
  auto where = [&] {
    return "gemm(src " + dims(M, K) + " lda " + std::to_string(lda) + ", weights " + dims(N, K) + " (" +
           isa_name(weights.isa()) + "), dst ldc " +
           std::to_string(ldc) + ")";
  };
  if (N == 0) throw Error(where() + ": weights are empty (not packed)");
  if (M == 0) return;
  if (src == nullptr || dst == nullptr) throw Error(where() + ": src or dst is null");
  if (lda < K) throw Error(where() + ": lda must be ≥ K");
  if (ldc < N) throw Error(where() + ": ldc must be ≥ N");
  if (epilogue.multiply && epilogue.ld_multiply < N) throw Error(where() + ": epilogue.ld_multiply must be ≥ N");
  if (epilogue.residual && epilogue.ld_residual < N) throw Error(where() + ": epilogue.ld_residual must be ≥ N");
  if (overlaps(src, lda, M, K, dst, ldc, M, N)) throw Error(where() + ": src overlaps dst");
  if (overlaps(epilogue.bias, N, 1, N, dst, ldc, M, N)) throw Error(where() + ": epilogue.bias overlaps dst");
  // multiply/residual may be dst itself, nothing else of it (gemm.h, "Aliasing").
  auto check_operand = [&](const char* name, const float* p, size_t ld) {
    if (p == nullptr || (p == dst && ld == ldc) || !shares_elements(p, ld, dst, ldc, M, N)) return;
    throw Error(where() + ": epilogue." + name + " (ld " + std::to_string(ld) + ", " +
                std::to_string(reinterpret_cast<intptr_t>(p) - reinterpret_cast<intptr_t>(dst)) +
                " bytes from dst) partly overlaps dst; it may only be dst itself with the same stride, or share no "
                "element with it");
  };
  check_operand("multiply", epilogue.multiply, epilogue.ld_multiply);
  check_operand("residual", epilogue.residual, epilogue.ld_residual);
  if (n_threads < 0) throw Error(where() + ": n_threads must be ≥ 0");

  const PackedWeights::Impl& p = weights.impl();
  const GemmKernels& kern = kernels_for(p.isa);
  GemmCall call{src, lda, M, N, K, p.data.data(), dst, ldc, 1.0f, epilogue.bias, epilogue.activation,
                epilogue.multiply, epilogue.ld_multiply, epilogue.residual, epilogue.ld_residual, 0, 0, 0, 0};
  run_blocked(kern, call, n_threads);
}

// ---------------------------------------------------------------------------------------------------------------
// gemm_unpacked

struct GemmWorkspace::Impl {
  AlignedBuffer<float> panels;  // B packed as ceil(N/nr) × [K][nr]
};
GemmWorkspace::GemmWorkspace() : impl_(std::make_unique<Impl>()) {}
GemmWorkspace::GemmWorkspace(GemmWorkspace&&) noexcept = default;
GemmWorkspace& GemmWorkspace::operator=(GemmWorkspace&&) noexcept = default;
GemmWorkspace::~GemmWorkspace() = default;
size_t GemmWorkspace::bytes() const { return impl_ ? impl_->panels.size() * sizeof(float) : 0; }

void gemm_unpacked(Isa isa, size_t M, size_t N, size_t K, float alpha, const float* A, size_t lda, const float* B,
                   size_t ldb, BLayout b_layout, float* C, size_t ldc, GemmWorkspace& ws, int n_threads) {
  const bool kn = b_layout == BLayout::kn;
  auto where = [&] {
    return std::string("gemm_unpacked(") + isa_name(isa) + ", A " + dims(M, K) + " lda " + std::to_string(lda) +
           ", B " + (kn ? dims(K, N) : dims(N, K)) + " ldb " + std::to_string(ldb) + ", C ldc " +
           std::to_string(ldc) + ")";
  };
  check_isa(where().c_str(), isa);
  if (M == 0 || N == 0) return;
  if (A == nullptr && K > 0) throw Error(where() + ": A is null");
  if ((B == nullptr && K > 0) || C == nullptr) throw Error(where() + ": B or C is null");
  if (lda < K) throw Error(where() + ": lda must be ≥ K");
  if (ldb < (kn ? N : K)) throw Error(where() + ": ldb must be ≥ " + (kn ? std::string("N") : std::string("K")));
  if (ldc < N) throw Error(where() + ": ldc must be ≥ N");
  if (n_threads < 0) throw Error(where() + ": n_threads must be ≥ 0");
  if (K == 0) {
    for (size_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.0f);
    return;
  }
  if (overlaps(A, lda, M, K, C, ldc, M, N) || (kn ? overlaps(B, ldb, K, N, C, ldc, M, N)
                                                   : overlaps(B, ldb, N, K, C, ldc, M, N)))
    throw Error(where() + ": C overlaps A or B");
  const GemmKernels& kern = kernels_for(isa);
  const int nt = resolve_threads(n_threads);
  if (M <= 4) {
    // Split N in chunks that keep the direct kernel's vector blocks whole (64 columns).
    const int parts = static_cast<int>(std::min<size_t>(nt, (N + 63) / 64));
    run_threads(parts, [&](int t) {
      const Range r = split_range(N, parts, t, 64);
      if (r.begin < r.end) kern.direct(M, N, K, alpha, A, lda, B, ldb, kn, C, ldc, r.begin, r.end);
    });
    return;
  }
  const size_t nr = kern.bs.nr, n_panels = (N + nr - 1) / nr;
  grow(ws.impl().panels, n_panels * nr * K);
  float* panels = ws.impl().panels.data();
  const int pack_parts = static_cast<int>(std::min<size_t>(nt, n_panels));
  run_threads(pack_parts, [&](int t) {
    const Range r = split_range(N, pack_parts, t, nr);
    if (r.begin < r.end) kern.pack(B, ldb, kn, N, K, r.begin, r.end, panels);
  });
  GemmCall call{A, lda, M, N, K, panels, C, ldc, alpha, nullptr, Activation::none, nullptr, 0, nullptr, 0, 0, 0, 0, 0};
  run_blocked(kern, call, n_threads);
}

}  // namespace sqrtdk::ops
