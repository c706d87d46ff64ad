// sqrtdk::Error: the one exception type the library throws.
//
// Messages name what was wrong and where: the file, the tensor, the shape, and what was expected, e.g.
//   "model.sqdk: tensor 'blk.0.attn_qkv.weight': shape [768, 2304] has 1769472 elements but size 1000 bytes
//    (expected 7077888 bytes for f32)".
// Kernels never throw (they assert their preconditions); checks and throws happen at the boundary: the loader,
// the public API, and each op's entry point.
//
// Each error also carries a kind: what went wrong, for code (the C API maps it to a status; callers may retry or
// report by it). The message is for people; never parse it. A site that wraps an error it caught keeps the cause's
// kind: `throw Error(e.kind(), "Session: ..." + std::string(e.what()))`.
#pragma once

#include <stdexcept>
#include <string>

namespace sqrtdk {

enum class ErrorKind {
  bad_input,      // the caller's arguments or options: a token id out of range, an empty prompt, a bad setting
  bad_file,       // a file's contents: missing, truncated, corrupt or invalid (a .sqdk or safetensors file)
  context_full,   // the tokens do not fit in the session's context
  out_of_memory,  // an allocation failed (the message names its size)
  unsupported,    // valid, but not something this build or this CPU can do (e.g. a forced ISA the CPU lacks)
  internal,       // a bug in sqrtdk: an invariant broke
};

// The kind's name as written above, e.g. "bad_file" (static storage).
constexpr const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::bad_input: return "bad_input";
    case ErrorKind::bad_file: return "bad_file";
    case ErrorKind::context_full: return "context_full";
    case ErrorKind::out_of_memory: return "out_of_memory";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::internal: return "internal";
  }
  return "unknown";
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  // Untagged sites: bad input, the most common cause at the boundary where checks happen.
  explicit Error(const std::string& message) : Error(ErrorKind::bad_input, message) {}

  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace sqrtdk
