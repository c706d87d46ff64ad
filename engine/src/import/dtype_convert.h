// What the converters (HF, GGUF, .sqdk re-typing) share about output types: which type each tensor gets for
// `--dtype` / `--head-dtype`, and the encoding of f32 values into f32/f16/bf16/q8 bytes.
#pragma once

#include <sqrtdk/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sqrtdk::import_detail {

// The embeddings and the lm head (tok_emb, pos_emb, lm_head.weight): they take --head-dtype.
bool is_head_tensor(const std::string& name);

// The stored type of the .sqdk tensor `name` [shape] when converting to `dtype` with `head_dtype`:
//   embeddings and lm head: head_dtype;
//   1-D tensors (norms, biases): f32 when dtype is q8 (they are f32 at run time, and tiny), else dtype (as always);
//   everything else (linear weights): dtype.
DType output_dtype_for(const std::string& name, const std::vector<uint64_t>& shape, DType dtype, DType head_dtype);

// Checks that a tensor can be stored as `dtype`; for q8 the last dimension must be a multiple of 32. Throws
// sqrtdk::Error "<where>: tensor '<name>': shape [..] cannot be q8: ... (fix: ...)" naming the option to change.
void check_output_dtype(const std::string& where, const std::string& name, const std::vector<uint64_t>& shape,
                        DType dtype);

// Bytes that n elements take as `dtype` (q8: n a multiple of 32).
uint64_t encoded_bytes(DType dtype, uint64_t n);

// f32 values -> `to` (n elements; q8: n a multiple of 32, the run starting at a block boundary of its rows, as
// ops::quantize_row_q8). Returns how many finite values could not be represented: narrowed to Inf (f16/bf16), or in
// a q8 block whose scale max|x|/127 overflows f16. NaN or Inf in q8 input: sqrtdk::Error (quantize_row_q8's).
uint64_t encode_f32(const float* src, uint64_t n, DType to, unsigned char* dst);

// `from` bytes -> f32: n elements starting at src (q8: n a multiple of 32, src at a block).
void decode_to_f32(const unsigned char* src, DType from, uint64_t n, float* dst);

}  // namespace sqrtdk::import_detail
