// The f32 GEMM's block sizes from the machine's caches (the model is described in gemm_blocking.h).
#include "ops/gemm/gemm_blocking.h"

#include <sqrtdk/error.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace sqrtdk::ops::gemm_detail {

namespace {

size_t round_down(size_t a, size_t b) { return a / b * b; }

}  // namespace

BlockSizes derive_block_sizes(size_t mr, size_t nr, const roofs::CacheSizes& caches) {
  const size_t l1d = caches.l1d ? caches.l1d : kAssumedL1d;
  const size_t l2 = caches.l2 ? caches.l2 : kAssumedL2;
  const size_t panel_row = nr * sizeof(float);  // bytes of one k step of the B micro-panel
  // kc: the micro-panel in the L1d if it fits there at kMinKc or more (kept to a multiple of 64 k), else a fifth
  // of the L2.
  size_t kc = round_down(l1d / panel_row, 64);
  if (kc < kMinKc) kc = round_down(l2 / 5 / panel_row, 64);
  kc = std::clamp<size_t>(kc, kMinKc, kMaxKc);
  // mc: the A block (mc rows of kc floats) in 30% of the L2, at least two tiles; nc: the C block likewise.
  const size_t share = l2 * 3 / 10;
  const size_t mc = std::max(2 * mr, round_down(share / (kc * sizeof(float)), mr));
  const size_t nc = std::max(nr, round_down(share / (mc * sizeof(float)), nr));
  return {mr, nr, kc, mc, nc};
}

BlockSizes apply_blocking_override(BlockSizes bs, const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorKind::bad_input, "SQRTDK_GEMM_BLOCKING='" + text + "': " + why +
                                                  " (expected e.g. kc=768,mc=96,nc=768; any of the three)");
  };
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw bad("'" + item + "' is not name=value");
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v == 0 || v > (1u << 20)) throw bad("'" + value + "' is not a size in 1..2^20");
    if (name == "kc")
      bs.kc = std::max<size_t>(16, round_down(v, 16));
    else if (name == "mc")
      bs.mc = std::max(bs.mr, round_down(v, bs.mr));
    else if (name == "nc")
      bs.nc = std::max(bs.nr, round_down(v, bs.nr));
    else
      throw bad("unknown name '" + name + "'");
  }
  return bs;
}

BlockSizes machine_block_sizes(size_t mr, size_t nr, std::string* why) {
  const roofs::CacheSizes caches = roofs::detect_cache_sizes();
  BlockSizes bs = derive_block_sizes(mr, nr, caches);
  auto level = [](const char* name, size_t bytes, size_t assumed) {
    return std::string(name) + " " + std::to_string((bytes ? bytes : assumed) >> 10) + " KiB" +
           (bytes ? "" : " (not reported: assumed)");
  };
  std::string source = "from the caches (" + level("L1d", caches.l1d, kAssumedL1d) + ", " +
                       level("L2", caches.l2, kAssumedL2) + "; " + caches.source + ")";
  if (const char* env = std::getenv("SQRTDK_GEMM_BLOCKING"); env && *env) {
    bs = apply_blocking_override(bs, env);
    source = std::string("SQRTDK_GEMM_BLOCKING=") + env;
  }
  if (why) *why = source;
  return bs;
}

}  // namespace sqrtdk::ops::gemm_detail
