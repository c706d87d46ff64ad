// The C API (engine/include/sqrtdk/sqrtdk.h) over the C++ one. Every entry point catches everything: no exception
// crosses into C.
#include <sqrtdk/sqrtdk.h>

#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "engine/src/capi/c_api_internal.h"

#include <cstring>
#include <mutex>
#include <new>
#include <string>

struct sqrtdk_model {
  std::shared_ptr<const sqrtdk::Model> model;
  mutable std::mutex mutex;  // guards last_error: a model handle is shared between threads
  std::string last_error;
};

struct sqrtdk_session {
  std::shared_ptr<const sqrtdk::Model> model;
  sqrtdk::Session session;
  mutable std::mutex mutex;
  std::string last_error;
};

namespace sqrtdk::capi {

sqrtdk_status status_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::bad_input: return SQRTDK_ERR_INVALID_ARGUMENT;
    case ErrorKind::bad_file: return SQRTDK_ERR_BAD_FILE;
    case ErrorKind::context_full: return SQRTDK_ERR_CONTEXT_FULL;
    case ErrorKind::out_of_memory: return SQRTDK_ERR_OUT_OF_MEMORY;
    case ErrorKind::unsupported: return SQRTDK_ERR_UNSUPPORTED;
    case ErrorKind::internal: return SQRTDK_ERR_INTERNAL;
  }
  return SQRTDK_ERR_INTERNAL;
}

}  // namespace sqrtdk::capi

namespace {

size_t copy_message(const std::string& msg, char* buf, size_t size) {
  if (buf && size > 0) {
    const size_t n = std::min(msg.size(), size - 1);
    std::memcpy(buf, msg.data(), n);
    buf[n] = '\0';
  }
  return msg.size();
}

// Runs fn, mapping exceptions to a status (by the error's kind) and a message.
template <typename Fn>
sqrtdk_status guarded(std::string& message, Fn&& fn) {
  try {
    fn();
    return SQRTDK_OK;
  } catch (const std::bad_alloc&) {
    message = "out of memory";
    return SQRTDK_ERR_OUT_OF_MEMORY;
  } catch (const sqrtdk::Error& e) {
    message = e.what();
    return sqrtdk::capi::status_of(e.kind());
  } catch (const std::exception& e) {
    message = e.what();
    return SQRTDK_ERR_INTERNAL;
  } catch (...) {
    message = "unknown error";
    return SQRTDK_ERR_INTERNAL;
  }
}

sqrtdk_status session_call(sqrtdk_session* s, const std::function<void()>& fn) {
  std::string message;
  const sqrtdk_status st = guarded(message, fn);
  std::lock_guard<std::mutex> lock(s->mutex);
  s->last_error = st == SQRTDK_OK ? std::string() : message;
  return st;
}

sqrtdk::SamplingOptions to_options(const sqrtdk_sampling* sampling) {
  sqrtdk::SamplingOptions o;
  if (sampling) o = {sampling->temperature, sampling->top_k, sampling->top_p, sampling->seed};
  return o;
}

}  // namespace

extern "C" {

const char* sqrtdk_version(void) { return SQRTDK_VERSION_STRING; }

const char* sqrtdk_status_string(sqrtdk_status status) {
  switch (status) {
    case SQRTDK_OK: return "ok";
    case SQRTDK_ERR_INVALID_ARGUMENT: return "invalid argument";
    case SQRTDK_ERR_BAD_FILE: return "bad model file";
    case SQRTDK_ERR_CONTEXT_FULL: return "context full";
    case SQRTDK_ERR_OUT_OF_MEMORY: return "out of memory";
    case SQRTDK_ERR_INTERNAL: return "internal error";
    case SQRTDK_ERR_UNSUPPORTED: return "unsupported";
  }
  return "unknown status";
}

sqrtdk_status sqrtdk_model_load(const char* path, int verify_checksums, sqrtdk_model** out, char* error,
                                size_t error_size) {
  std::string message;
  if (out) *out = nullptr;
  if (!path || !out) {
    copy_message("sqrtdk_model_load: path and out must not be NULL", error, error_size);
    return SQRTDK_ERR_INVALID_ARGUMENT;
  }
  const sqrtdk_status st = guarded(message, [&] {
    sqrtdk::ModelOptions options;
    options.load.verify_checksums = verify_checksums != 0;
    auto handle = std::make_unique<sqrtdk_model>();
    handle->model = sqrtdk::Model::load(path, options);
    *out = handle.release();
  });
  copy_message(message, error, error_size);
  return st;
}

void sqrtdk_model_free(sqrtdk_model* model) { delete model; }

sqrtdk_status sqrtdk_model_get_config(const sqrtdk_model* model, sqrtdk_model_config* out) {
  if (!model || !out) return SQRTDK_ERR_INVALID_ARGUMENT;
  const auto& c = model->model->config();
  *out = {sqrtdk::arch_name(c.arch), c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff,
          c.n_vocab, c.max_seq, c.bos_id, c.eos_id, c.tokenizer == sqrtdk::TokenizerKind::byte_level ? 1 : 0,
          model->model->n_params()};
  return SQRTDK_OK;
}

sqrtdk_status sqrtdk_session_create(sqrtdk_model* model, size_t max_context, int n_threads, sqrtdk_session** out,
                                    char* error, size_t error_size) {
  if (out) *out = nullptr;
  if (!model || !out || n_threads < 0) {
    copy_message("sqrtdk_session_create: model and out must not be NULL, n_threads >= 0", error, error_size);
    return SQRTDK_ERR_INVALID_ARGUMENT;
  }
  std::string message;
  const sqrtdk_status st = guarded(message, [&] {
    sqrtdk::SessionOptions options;
    options.max_context = max_context;
    options.n_threads = n_threads;
    *out = new sqrtdk_session{model->model, sqrtdk::Session(model->model, options), {}, {}};
  });
  copy_message(message, error, error_size);
  if (st != SQRTDK_OK) {
    std::lock_guard<std::mutex> lock(model->mutex);
    model->last_error = message;
  }
  return st;
}

void sqrtdk_session_free(sqrtdk_session* session) { delete session; }

sqrtdk_status sqrtdk_session_prefill(sqrtdk_session* s, const uint32_t* tokens, size_t n_tokens,
                                     const float** logits) {
  if (!s) return SQRTDK_ERR_INVALID_ARGUMENT;
  if (!tokens && n_tokens > 0) {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->last_error = "sqrtdk_session_prefill: tokens is NULL";
    return SQRTDK_ERR_INVALID_ARGUMENT;
  }
  return session_call(s, [&] {
    auto out = s->session.prefill(std::span<const uint32_t>(tokens, n_tokens));
    if (logits) *logits = out.data();
  });
}

sqrtdk_status sqrtdk_session_decode(sqrtdk_session* s, uint32_t token, const float** logits) {
  return sqrtdk_session_prefill(s, &token, 1, logits);
}

sqrtdk_status sqrtdk_session_reset(sqrtdk_session* s) {
  if (!s) return SQRTDK_ERR_INVALID_ARGUMENT;
  s->session.reset();
  return SQRTDK_OK;
}

size_t sqrtdk_session_n_past(const sqrtdk_session* s) { return s ? s->session.n_past() : 0; }

sqrtdk_status sqrtdk_session_generate(sqrtdk_session* s, const uint32_t* prompt, size_t n_prompt,
                                      const sqrtdk_sampling* sampling, size_t max_new_tokens, uint32_t* out_tokens,
                                      size_t* n_out) {
  if (!s) return SQRTDK_ERR_INVALID_ARGUMENT;
  if (n_out) *n_out = 0;
  if ((!prompt && n_prompt > 0) || (!out_tokens && max_new_tokens > 0) || !n_out) {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->last_error = "sqrtdk_session_generate: prompt, out_tokens and n_out must not be NULL";
    return SQRTDK_ERR_INVALID_ARGUMENT;
  }
  return session_call(s, [&] {
    sqrtdk::GenerateOptions options;
    options.sampling = to_options(sampling);
    options.max_new_tokens = max_new_tokens;
    const auto& c = s->model->config();
    if (c.eos_id != sqrtdk::kNoToken) options.stop_tokens.push_back(c.eos_id);
    const auto out = sqrtdk::generate(s->session, std::span<const uint32_t>(prompt, n_prompt), options);
    std::copy(out.begin(), out.end(), out_tokens);
    *n_out = out.size();
  });
}

sqrtdk_status sqrtdk_sample(const float* logits, size_t n_vocab, const sqrtdk_sampling* sampling, uint32_t* out) {
  if (!logits || n_vocab == 0 || !out) return SQRTDK_ERR_INVALID_ARGUMENT;
  std::string message;
  return guarded(message, [&] {
    sqrtdk::Sampler sampler(to_options(sampling));
    *out = sampler.sample(std::span<const float>(logits, n_vocab));
  });
}

size_t sqrtdk_model_last_error(const sqrtdk_model* model, char* buf, size_t size) {
  if (!model) return copy_message("", buf, size);
  std::lock_guard<std::mutex> lock(model->mutex);
  return copy_message(model->last_error, buf, size);
}

size_t sqrtdk_session_last_error(const sqrtdk_session* s, char* buf, size_t size) {
  if (!s) return copy_message("", buf, size);
  std::lock_guard<std::mutex> lock(s->mutex);
  return copy_message(s->last_error, buf, size);
}

}  // extern "C"
