/* sqrtdk C API: load a model, create sessions, prefill/decode/generate, sample, free.
 *
 * Opaque handles; every call returns a status code (SQRTDK_OK = 0). No C++ types or exceptions cross this API.
 * Threading: a model is immutable and may be shared by any number of threads; a session belongs to one caller at a
 * time. Error messages: sqrtdk_model_load and sqrtdk_session_create write theirs into the caller's buffer (there is
 * no handle yet); afterwards each handle keeps its own last error, copied out by sqrtdk_*_last_error (thread-safe).
 * Statuses come from the error's kind (sqrtdk::ErrorKind in C++), never from its message: the message is for people.
 * New statuses are only ever appended.
 */
#ifndef SQRTDK_SQRTDK_H
#define SQRTDK_SQRTDK_H

#include <stddef.h>
#include <stdint.h>

#include "sqrtdk/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sqrtdk_status {
  SQRTDK_OK = 0,
  SQRTDK_ERR_INVALID_ARGUMENT = 1, /* a null pointer, a bad option, a token id out of range, an empty prompt */
  SQRTDK_ERR_BAD_FILE = 2,         /* the model file is missing, truncated, corrupt or invalid */
  SQRTDK_ERR_CONTEXT_FULL = 3,     /* the tokens do not fit in the session's context */
  SQRTDK_ERR_OUT_OF_MEMORY = 4,    /* an allocation failed, e.g. a session's KV cache for a long max_context */
  SQRTDK_ERR_INTERNAL = 5,         /* a bug in sqrtdk */
  SQRTDK_ERR_UNSUPPORTED = 6       /* valid, but not something this build or this CPU can do */
} sqrtdk_status;

typedef struct sqrtdk_model sqrtdk_model;
typedef struct sqrtdk_session sqrtdk_session;

typedef struct sqrtdk_model_config {
  const char* arch; /* "gpt2" or "llama" (static storage) */
  uint32_t d_model, n_layers, n_heads, n_kv_heads, head_dim, d_ff, n_vocab, max_seq;
  uint32_t bos_id, eos_id; /* 0xFFFFFFFF: none */
  int byte_level;          /* 1 if ids 0..255 are bytes */
  uint64_t n_params;
} sqrtdk_model_config;

typedef struct sqrtdk_sampling {
  float temperature; /* 0: greedy */
  uint32_t top_k;    /* 0: all */
  float top_p;       /* 1: all */
  uint64_t seed;
} sqrtdk_sampling;

/* The library version, e.g. "0.1.0". */
const char* sqrtdk_version(void);
/* A static, readable name for a status. */
const char* sqrtdk_status_string(sqrtdk_status status);

/* Loads a .sqdk model. verify_checksums: 1 to check each tensor's CRC-32 (recommended), 0 to skip.
 * On failure *out is NULL and the message goes to error[0..error_size) (may be NULL). */
sqrtdk_status sqrtdk_model_load(const char* path, int verify_checksums, sqrtdk_model** out, char* error,
                                size_t error_size);
void sqrtdk_model_free(sqrtdk_model* model); /* NULL is a no-op; sessions keep the model alive until freed */
sqrtdk_status sqrtdk_model_get_config(const sqrtdk_model* model, sqrtdk_model_config* out);

/* A session on a model: max_context 0 = the model's max_seq; n_threads 0 = all cores. */
sqrtdk_status sqrtdk_session_create(sqrtdk_model* model, size_t max_context, int n_threads, sqrtdk_session** out,
                                    char* error, size_t error_size);
void sqrtdk_session_free(sqrtdk_session* session);
/* Appends tokens and runs them; *logits (may be NULL) points to the last position's n_vocab logits, valid until the
 * next call on this session. On error the session is unchanged and still usable. */
sqrtdk_status sqrtdk_session_prefill(sqrtdk_session* session, const uint32_t* tokens, size_t n_tokens,
                                     const float** logits);
sqrtdk_status sqrtdk_session_decode(sqrtdk_session* session, uint32_t token, const float** logits);
sqrtdk_status sqrtdk_session_reset(sqrtdk_session* session);
size_t sqrtdk_session_n_past(const sqrtdk_session* session);
/* Prefills the prompt, then samples up to max_new_tokens into out_tokens (capacity max_new_tokens); stops after
 * the model's EOS. *n_out receives the count. */
sqrtdk_status sqrtdk_session_generate(sqrtdk_session* session, const uint32_t* prompt, size_t n_prompt,
                                      const sqrtdk_sampling* sampling, size_t max_new_tokens, uint32_t* out_tokens,
                                      size_t* n_out);
/* One token from logits[n_vocab] with the given sampling (the seed is used as is: same seed, same token).
 * +Inf logits share the probability equally, -Inf ones are never picked; NaN anywhere (or all -Inf) is
 * SQRTDK_ERR_INVALID_ARGUMENT (see <sqrtdk/generate.h>). */
sqrtdk_status sqrtdk_sample(const float* logits, size_t n_vocab, const sqrtdk_sampling* sampling, uint32_t* out);

/* Copies the handle's last error message (empty if none) into buf (NUL-terminated, truncated to size); returns
 * the full message length. */
size_t sqrtdk_model_last_error(const sqrtdk_model* model, char* buf, size_t size);
size_t sqrtdk_session_last_error(const sqrtdk_session* session, char* buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* SQRTDK_SQRTDK_H */
