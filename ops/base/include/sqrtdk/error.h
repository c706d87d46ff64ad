// sqrtdk::Error: the one exception type the library throws.
//
// Messages name what was wrong and where: the file, the tensor, the shape, and what was expected, e.g.
//   "model.sqdk: tensor 'blk.0.attn_qkv.weight': shape [768, 2304] has 1769472 elements but size 1000 bytes
//    (expected 7077888 bytes for f32)".
// Kernels never throw (they assert their preconditions); checks and throws happen at the boundary: the loader,
// the public API, and each op's entry point.
#pragma once

#include <stdexcept>
#include <string>

namespace sqrtdk {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace sqrtdk
