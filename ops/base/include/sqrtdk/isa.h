// Instruction-set selection: one binary runs on any x86-64 and picks its kernels at run time.
//
//   ref     plain scalar C++ (the specification every SIMD path is tested against; always available)
//   avx2    AVX2 + FMA (Haswell and later)
//   avx512  AVX-512 F/BW/DQ/VL (Skylake-X, Ice Lake, Zen 4/5)
//
// The default is the best ISA the CPU (and OS) supports, detected once with __builtin_cpu_supports.
// SQRTDK_ISA=ref|avx2|avx512 forces one; forcing an ISA the CPU lacks is an error, not a silent fallback.
// SQRTDK_VERBOSE=1 prints the choice (and later, the path each op takes) once to stderr.
#pragma once

#include <string_view>
#include <vector>

namespace sqrtdk {

enum class Isa { ref = 0, avx2 = 1, avx512 = 2 };
inline constexpr Isa kHighestIsa = Isa::avx512;  // the last level of the chain (range checks)

// "ref", "avx2", "avx512".
const char* isa_name(Isa isa);

// Parses "ref" | "avx2" | "avx512"; throws sqrtdk::Error naming the bad value otherwise.
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

// Whether SQRTDK_VERBOSE is set to something other than "" or "0". Read once.
bool verbose();

}  // namespace sqrtdk
