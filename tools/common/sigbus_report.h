// A model file truncated while it is mapped: a clear message instead of a silent crash.
//
// sqrtdk maps model files read-only and, when the embedding is stored as f32, reads its rows from the mapping while
// it runs. If another process truncates or rewrites the file in place meanwhile, the kernel raises SIGBUS at the
// next read of a lost page, and the process dies without a word. A signal handler is process-wide state, so it
// belongs to the program, not the library: sqrtdk and sqrtdk-serve install this one before loading. It names the
// model file and exits with status 2 (a model error). Replace model files by writing a new file and renaming it
// over the old one (as `sqrtdk convert` does): a mapped file is then never truncated.
#pragma once

#include <csignal>
#include <cstring>
#include <string>

#include <unistd.h>

namespace sqrtdk::tools {

namespace sigbus_detail {
inline char model_path[1024];  // written before the handler is installed; read only by it
inline void write_all(const char* text) {
  for (size_t n = std::strlen(text); n > 0;) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}
inline void on_sigbus(int) {  // async-signal-safe: write() and _exit() only
  write_all("sqrtdk: fatal: SIGBUS reading the memory-mapped model file ");
  write_all(model_path);
  write_all(": it was truncated or rewritten in place while in use (replace model files by writing a new file and "
            "renaming it over the old one)\n");
  ::_exit(2);
}
}  // namespace sigbus_detail

// Reports SIGBUS as a truncated `model_path` from now on (the last call's path is named).
inline void report_sigbus_for_model(const std::string& model_path) {
  const size_t n = std::min(model_path.size(), sizeof sigbus_detail::model_path - 1);
  std::memcpy(sigbus_detail::model_path, model_path.data(), n);
  sigbus_detail::model_path[n] = '\0';
  struct sigaction sa {};
  sa.sa_handler = sigbus_detail::on_sigbus;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace sqrtdk::tools
