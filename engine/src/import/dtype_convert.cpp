#include "engine/src/import/dtype_convert.h"

#include <sqrtdk/error.h>

#include "engine/src/format/format_internal.h"
#include "ops/gemm/gemm.h"

#include <cmath>
#include <cstring>

namespace sqrtdk::import_detail {

bool is_head_tensor(const std::string& name) {
  return name == "tok_emb" || name == "pos_emb" || name == "lm_head.weight";
}

DType output_dtype_for(const std::string& name, const std::vector<uint64_t>& shape, DType dtype, DType head_dtype) {
  if (is_head_tensor(name)) return head_dtype;
  if (shape.size() == 1) return dtype == DType::q8 ? DType::f32 : dtype;
  return dtype;
}

void check_output_dtype(const std::string& where, const std::string& name, const std::vector<uint64_t>& shape,
                        DType dtype) {
  uint64_t bytes = 0;
  const std::string problem = tensor_bytes_problem(dtype, shape, bytes);
  if (problem.empty()) return;
  TensorInfo t;
  t.shape = shape;
  std::string fix;
  if (dtype == DType::q8)
    fix = is_head_tensor(name) ? " (fix: keep the embeddings and lm head in another type, e.g. --head-dtype bf16)"
                               : " (fix: convert this model with --dtype bf16 or f32: its linear layers cannot be q8)";
  throw Error(where + ": tensor '" + format_detail::quote_name(name) + "': shape " + t.shape_string() + " cannot be " +
              dtype_name(dtype) + ": " + problem + fix);
}

uint64_t encoded_bytes(DType dtype, uint64_t n) {
  return dtype == DType::q8 ? n / kQ8BlockElements * kQ8BlockBytes : n * dtype_size(dtype);
}

uint64_t encode_f32(const float* src, uint64_t n, DType to, unsigned char* dst) {
  uint64_t overflowed = 0;
  switch (to) {
    case DType::f32: std::memcpy(dst, src, n * 4); break;
    case DType::f16:
    case DType::bf16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = to == DType::f16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
        overflowed += std::isfinite(src[i]) && (h & 0x7FFFu) == (to == DType::f16 ? 0x7C00u : 0x7F80u);
      }
      break;
    case DType::q8: {
      auto* blocks = reinterpret_cast<ops::Q8Block*>(dst);  // callers' buffers come from std::vector (aligned ≥ 2)
      ops::quantize_row_q8(src, n, blocks);
      for (uint64_t b = 0; b < n / kQ8BlockElements; ++b)  // max|x|/127 past f16's 65504: the block cannot hold it
        overflowed += (blocks[b].scale_f16 & 0x7C00u) == 0x7C00u ? kQ8BlockElements : 0;
      break;
    }
  }
  return overflowed;
}

void decode_to_f32(const unsigned char* src, DType from, uint64_t n, float* dst) {
  switch (from) {
    case DType::f32: std::memcpy(dst, src, n * 4); break;
    case DType::f16:
    case DType::bf16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = from == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    case DType::q8:
      for (uint64_t b = 0; b < n / kQ8BlockElements; ++b) {  // memcpy: src need not be 2-aligned
        ops::Q8Block block;
        std::memcpy(&block, src + b * kQ8BlockBytes, kQ8BlockBytes);
        ops::dequantize_row_q8(&block, kQ8BlockElements, dst + b * kQ8BlockElements);
      }
      break;
  }
}

}  // namespace sqrtdk::import_detail
