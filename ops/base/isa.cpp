#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace sqrtdk {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::ref: return "ref";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_vnni: return "avx512_vnni";
    case Isa::avx512_bf16: return "avx512_bf16";
  }
  return "unknown";
}

Isa parse_isa(std::string_view name) {
  if (name == "ref") return Isa::ref;
  if (name == "avx2") return Isa::avx2;
  if (name == "avx512") return Isa::avx512;
  if (name == "avx512_vnni") return Isa::avx512_vnni;
  if (name == "avx512_bf16") return Isa::avx512_bf16;
  throw Error("unknown ISA '" + std::string(name) + "' (expected ref, avx2, avx512, avx512_vnni or avx512_bf16)");
}

bool cpu_supports(Isa isa) {
  // libgcc's __builtin_cpu_supports checks XCR0 through xgetbv too, so an OS that disabled AVX state reads false.
  switch (isa) {
    case Isa::ref: return true;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma");
    case Isa::avx512_vnni: return cpu_supports(Isa::avx512) && __builtin_cpu_supports("avx512vnni");
    case Isa::avx512_bf16: return cpu_supports(Isa::avx512_vnni) && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}

Isa best_isa() {
  const std::vector<Isa> all = all_isas();
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (cpu_supports(*it)) return *it;
  return Isa::ref;
}

std::vector<Isa> all_isas() { return {Isa::ref, Isa::avx2, Isa::avx512, Isa::avx512_vnni, Isa::avx512_bf16}; }

bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("SQRTDK_VERBOSE");
    return v != nullptr && v[0] != '\0' && std::string(v) != "0";
  }();
  return on;
}

namespace {
Isa choose_default_isa() {
  const char* forced = std::getenv("SQRTDK_ISA");
  Isa isa = best_isa();
  if (forced != nullptr && forced[0] != '\0') {
    isa = parse_isa(forced);
    if (!cpu_supports(isa))
      throw Error(ErrorKind::unsupported, std::string("SQRTDK_ISA=") + forced + ": this CPU does not support " +
                                              isa_name(isa) + " (best available: " + isa_name(best_isa()) + ")");
  }
  if (verbose())
    std::fprintf(stderr, "sqrtdk: ISA %s (%s; best on this CPU: %s)\n", isa_name(isa),
                 forced && forced[0] ? "forced by SQRTDK_ISA" : "detected", isa_name(best_isa()));
  return isa;
}
}  // namespace

Isa default_isa() {
  // A function-local constant: initialized once (thread-safe), never mutated afterwards.
  static const Isa isa = choose_default_isa();
  return isa;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : all_isas())
    if (cpu_supports(isa)) out.push_back(isa);
  return out;
}

}  // namespace sqrtdk
