// Instruction-set selection: one binary runs on any x86-64 and picks its kernels at run time.
//
//   ref     plain scalar C++ (the specification every SIMD path is tested against; always available)
//   avx2    AVX2 + FMA (Haswell and later)
//   avx512       AVX-512 F/BW/DQ/VL (Skylake-X, Ice Lake, Zen 4/5)
//   avx512_vnni  + AVX512-VNNI (vpdpbusd: int8 dot products; Cascade Lake, Ice Lake, Zen 4/5): the q8 GEMM
//   avx512_bf16  + AVX512-BF16 (vdpbf16ps; Cooper Lake, Sapphire/Emerald Rapids, Zen 4/5): the bf16 GEMM. Every
//                CPU with AVX512-BF16 has AVX512-VNNI too, so the levels stay a chain.
// An op with no kernel for a level uses the next lower one (ops/base/kernel_table.h): the f32 kernels are avx512's
// at all three AVX-512 levels. AVX-VNNI (the VEX form on AVX2-only CPUs) is not a level: it would break the chain
// (Skylake-X has AVX-512 and no AVX-VNNI); those CPUs run the q8 GEMM's AVX2 kernel.
//
// The default is the best ISA the CPU (and OS) supports, detected once with __builtin_cpu_supports.
// SQRTDK_ISA=ref|avx2|avx512|avx512_vnni|avx512_bf16 forces one; forcing an ISA the CPU lacks is an error, not a silent fallback.
// SQRTDK_VERBOSE=1 prints the choice (and later, the path each op takes) once to stderr.
#pragma once

#include <string_view>
#include <vector>

namespace sqrtdk {

enum class Isa { ref = 0, avx2 = 1, avx512 = 2, avx512_vnni = 3, avx512_bf16 = 4 };
inline constexpr Isa kHighestIsa = Isa::avx512_bf16;  // the last level of the chain (range checks)

// "ref", "avx2", "avx512", "avx512_vnni", "avx512_bf16".
const char* isa_name(Isa isa);

// Parses those names; throws sqrtdk::Error naming the bad value otherwise.
Isa parse_isa(std::string_view name);

// Whether this CPU and OS can run the ISA's kernels.
bool cpu_supports(Isa isa);

// The best ISA this machine supports.
Isa best_isa();

// The ISA the engine uses when none is given: SQRTDK_ISA if set (throws sqrtdk::Error if the CPU lacks it),
// else best_isa(). Computed once; the value never changes while the process runs.
Isa default_isa();

// Every ISA this machine can run, ref first. Tests loop over it so every path the machine has is covered.
std::vector<Isa> supported_isas();

// All levels, ref first (what a CLI lists, whether or not this CPU has them).
std::vector<Isa> all_isas();

// Whether SQRTDK_VERBOSE is set to something other than "" or "0". Read once.
bool verbose();

}  // namespace sqrtdk
