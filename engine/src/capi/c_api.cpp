// The C API (engine/include/sqrtdk/sqrtdk.h) over the C++ one. Every entry point catches everything: no exception
// crosses into C.
#include <sqrtdk/sqrtdk.h>

#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/capi/c_api_internal.h"

#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>

struct sqrtdk_model {
  std::shared_ptr<const sqrtdk::Model> model;
  mutable std::mutex mutex;  // guards last_error: a model handle is shared between threads
  mutable std::string last_error;
};

struct sqrtdk_sampler {
  sqrtdk::Sampler sampler;
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

// Thrown inside a guarded call when the caller's buffer is too small (the status, not an error kind).
struct BufferTooSmall {};

// Runs fn, mapping exceptions to a status (by the error's kind) and a message.
template <typename Fn>
sqrtdk_status guarded(std::string& message, Fn&& fn) {
  try {
    fn();
    return SQRTDK_OK;
  } catch (const BufferTooSmall&) {
    message = "the output does not fit the buffer given (*n_out says how much is needed)";
    return SQRTDK_ERR_BUFFER_TOO_SMALL;
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

sqrtdk_status model_call(const sqrtdk_model* m, const std::function<void()>& fn) {
  std::string message;
  const sqrtdk_status st = guarded(message, fn);
  std::lock_guard<std::mutex> lock(m->mutex);
  m->last_error = st == SQRTDK_OK ? std::string() : message;
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
    case SQRTDK_ERR_BUFFER_TOO_SMALL: return "buffer too small";
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
          model->model->n_params(), model->model->tokenizer() ? 1 : 0};
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
  return session_call(s, [&] { s->session.reset(); });  // also clears the last error, as every successful call
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
    const auto out = sqrtdk::generate(s->session, std::span<const uint32_t>(prompt, n_prompt), options).tokens;
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

sqrtdk_status sqrtdk_tokenize(const sqrtdk_model* model, const char* text, size_t text_len, int add_special,
                              uint32_t* out, size_t capacity, size_t* n_out) {
  if (!model) return SQRTDK_ERR_INVALID_ARGUMENT;
  return model_call(model, [&] {
    if ((!text && text_len > 0) || !n_out || (!out && capacity > 0))
      throw sqrtdk::Error("sqrtdk_tokenize: text, out and n_out must not be NULL");
    *n_out = 0;
    const auto ids = model->model->require_tokenizer().encode(std::string_view(text ? text : "", text_len),
                                                              add_special != 0);
    *n_out = ids.size();
    if (ids.size() > capacity) throw BufferTooSmall{};
    std::copy(ids.begin(), ids.end(), out);
  });
}

sqrtdk_status sqrtdk_detokenize(const sqrtdk_model* model, const uint32_t* ids, size_t n_ids, int skip_special,
                                char* out, size_t capacity, size_t* n_out) {
  if (!model) return SQRTDK_ERR_INVALID_ARGUMENT;
  return model_call(model, [&] {
    if ((!ids && n_ids > 0) || !n_out || (!out && capacity > 0))
      throw sqrtdk::Error("sqrtdk_detokenize: ids, out and n_out must not be NULL");
    *n_out = 0;
    const std::string text = model->model->require_tokenizer().decode(std::span<const uint32_t>(ids, n_ids),
                                                                      skip_special != 0);
    *n_out = text.size();
    if (text.size() + 1 > capacity) throw BufferTooSmall{};
    std::memcpy(out, text.data(), text.size());
    out[text.size()] = '\0';
  });
}

sqrtdk_status sqrtdk_sampler_create(const sqrtdk_sampling* sampling, sqrtdk_sampler** out) {
  if (!out) return SQRTDK_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  std::string message;
  return guarded(message, [&] { *out = new sqrtdk_sampler{sqrtdk::Sampler(to_options(sampling))}; });
}

sqrtdk_status sqrtdk_sampler_sample(sqrtdk_sampler* sampler, const float* logits, size_t n_vocab, uint32_t* out) {
  if (!sampler || !logits || n_vocab == 0 || !out) return SQRTDK_ERR_INVALID_ARGUMENT;
  std::string message;
  return guarded(message, [&] { *out = sampler->sampler.sample(std::span<const float>(logits, n_vocab)); });
}

void sqrtdk_sampler_free(sqrtdk_sampler* sampler) { delete sampler; }

static_assert(SQRTDK_STOP_MAX_TOKENS == static_cast<int>(sqrtdk::StopReason::max_tokens) &&
              SQRTDK_STOP_EOS == static_cast<int>(sqrtdk::StopReason::eos) &&
              SQRTDK_STOP_TOKEN == static_cast<int>(sqrtdk::StopReason::stop_token) &&
              SQRTDK_STOP_STRING == static_cast<int>(sqrtdk::StopReason::stop_string) &&
              SQRTDK_STOP_CONTEXT_FULL == static_cast<int>(sqrtdk::StopReason::context_full) &&
              SQRTDK_STOP_CALLBACK == static_cast<int>(sqrtdk::StopReason::callback));

sqrtdk_status sqrtdk_session_generate_ex(sqrtdk_session* s, const uint32_t* prompt, size_t n_prompt,
                                         const sqrtdk_generate_options* options, uint32_t* out_tokens,
                                         size_t capacity, size_t* n_out, sqrtdk_stop_reason* reason) {
  if (!s) return SQRTDK_ERR_INVALID_ARGUMENT;
  if (n_out) *n_out = 0;
  return session_call(s, [&] {
    if (!options || !n_out || (!prompt && n_prompt > 0) || (!out_tokens && capacity > 0))
      throw sqrtdk::Error("sqrtdk_session_generate_ex: prompt, options, out_tokens and n_out must not be NULL");
    if (capacity < options->max_new_tokens)
      throw sqrtdk::Error("sqrtdk_session_generate_ex: capacity " + std::to_string(capacity) +
                          " is below max_new_tokens " + std::to_string(options->max_new_tokens));
    if ((!options->stop_tokens && options->n_stop_tokens > 0) ||
        (!options->stop_strings && options->n_stop_strings > 0))
      throw sqrtdk::Error("sqrtdk_session_generate_ex: stop_tokens / stop_strings are NULL with a nonzero count");
    sqrtdk::GenerateOptions o;
    o.sampling = to_options(&options->sampling);
    o.max_new_tokens = options->max_new_tokens;
    o.stop_at_eos = options->ignore_eos == 0;
    o.stop_tokens.assign(options->stop_tokens, options->stop_tokens + options->n_stop_tokens);
    for (size_t i = 0; i < options->n_stop_strings; ++i) {
      if (!options->stop_strings[i]) throw sqrtdk::Error("sqrtdk_session_generate_ex: stop_strings[i] is NULL");
      o.stop_strings.emplace_back(options->stop_strings[i]);
    }
    // With a tokenizer the callback is called from on_text (once per token: the text that became final with it);
    // without one from on_token.
    uint32_t last = 0;
    if (options->on_token) {
      if (s->model->tokenizer()) {
        o.on_token = [&](uint32_t t) {
          last = t;
          return true;
        };
        o.on_text = [&](std::string_view text) {
          return options->on_token(options->user_data, last, text.data(), text.size()) != 0;
        };
      } else {
        o.on_token = [&](uint32_t t) { return options->on_token(options->user_data, t, nullptr, 0) != 0; };
      }
    }
    const sqrtdk::GenerateResult r = sqrtdk::generate(s->session, std::span<const uint32_t>(prompt, n_prompt), o);
    std::copy(r.tokens.begin(), r.tokens.end(), out_tokens);
    *n_out = r.tokens.size();
    if (reason) *reason = static_cast<sqrtdk_stop_reason>(r.stop_reason);
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
