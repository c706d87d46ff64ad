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
  SQRTDK_ERR_UNSUPPORTED = 6,      /* valid, but not something this build or this CPU can do */
  SQRTDK_ERR_BUFFER_TOO_SMALL = 7  /* the output did not fit the caller's buffer: *n_out says how much it needs */
} sqrtdk_status;

typedef struct sqrtdk_model sqrtdk_model;
typedef struct sqrtdk_session sqrtdk_session;

typedef struct sqrtdk_model_config {
  const char* arch; /* "gpt2" or "llama" (static storage) */
  uint32_t d_model, n_layers, n_heads, n_kv_heads, head_dim, d_ff, n_vocab, max_seq;
  uint32_t bos_id, eos_id; /* 0xFFFFFFFF: none */
  int byte_level;          /* 1 if ids 0..255 are bytes */
  uint64_t n_params;
  int has_tokenizer;       /* 1 if sqrtdk_tokenize / sqrtdk_detokenize / stop strings work on this model */
} sqrtdk_model_config;

/* Where a function takes `const sqrtdk_sampling*`, NULL means the C++ defaults (<sqrtdk/generate.h>
 * SamplingOptions: temperature 0.8, top_k 40, top_p 0.95, seed 42). */
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

/* ---- text ----
 * Text -> ids with the model's tokenizer (add_special 1: BOS/EOS as the tokenizer adds them, Hugging Face's
 * add_special_tokens). *n_out receives the number of ids; if it exceeds capacity nothing is written and the status
 * is SQRTDK_ERR_BUFFER_TOO_SMALL (call again with a buffer of *n_out). A model without a tokenizer:
 * SQRTDK_ERR_INVALID_ARGUMENT. The message goes to sqrtdk_model_last_error. */
sqrtdk_status sqrtdk_tokenize(const sqrtdk_model* model, const char* text, size_t text_len, int add_special,
                              uint32_t* out, size_t capacity, size_t* n_out);
/* Ids -> UTF-8 text (invalid byte sequences become U+FFFD, as Hugging Face decodes), NUL-terminated: *n_out
 * receives the length without the NUL; capacity must be at least *n_out + 1, else SQRTDK_ERR_BUFFER_TOO_SMALL. */
sqrtdk_status sqrtdk_detokenize(const sqrtdk_model* model, const uint32_t* ids, size_t n_ids, int skip_special,
                                char* out, size_t capacity, size_t* n_out);

/* ---- sampling with state ----
 * A sampler draws from its own random generator, seeded once at creation: each call advances it, so a
 * token-by-token loop (prefill, sample, decode, sample, ...) gives exactly what sqrtdk_session_generate_ex gives
 * with the same sampling and seed. (sqrtdk_sample above reseeds on every call: same seed, same draw.) */
typedef struct sqrtdk_sampler sqrtdk_sampler;
sqrtdk_status sqrtdk_sampler_create(const sqrtdk_sampling* sampling, sqrtdk_sampler** out);
sqrtdk_status sqrtdk_sampler_sample(sqrtdk_sampler* sampler, const float* logits, size_t n_vocab, uint32_t* out);
void sqrtdk_sampler_free(sqrtdk_sampler* sampler);

/* ---- generation with stop rules, streaming and the reason it stopped ---- */
typedef enum sqrtdk_stop_reason {
  SQRTDK_STOP_MAX_TOKENS = 0,   /* max_new_tokens were generated */
  SQRTDK_STOP_EOS = 1,          /* the model's end token (EOS or an end-of-turn marker) */
  SQRTDK_STOP_TOKEN = 2,        /* one of stop_tokens */
  SQRTDK_STOP_STRING = 3,       /* the text reached one of stop_strings (cut from the text) */
  SQRTDK_STOP_CONTEXT_FULL = 4, /* the session's context is full */
  SQRTDK_STOP_CALLBACK = 5      /* the callback returned 0 */
} sqrtdk_stop_reason;

/* Called once per generated token, in order: the token and the text that became final with it (whole UTF-8
 * characters, never part of a stop string; may be empty; NULL/0 for models without a tokenizer). Return nonzero
 * to continue, 0 to stop. */
typedef int (*sqrtdk_token_callback)(void* user_data, uint32_t token, const char* text, size_t text_len);

typedef struct sqrtdk_generate_options {
  sqrtdk_sampling sampling;
  size_t max_new_tokens;
  int ignore_eos;                   /* 0: stop at the model's end tokens (the default) */
  const uint32_t* stop_tokens;      /* may be NULL */
  size_t n_stop_tokens;
  const char* const* stop_strings;  /* NUL-terminated UTF-8; need a tokenizer; may be NULL */
  size_t n_stop_strings;
  sqrtdk_token_callback on_token;   /* may be NULL */
  void* user_data;
} sqrtdk_generate_options;

/* Prefills the prompt, then generates into out_tokens (capacity >= options->max_new_tokens). *n_out receives the
 * count and *reason (may be NULL) why it stopped. */
sqrtdk_status sqrtdk_session_generate_ex(sqrtdk_session* session, const uint32_t* prompt, size_t n_prompt,
                                         const sqrtdk_generate_options* options, uint32_t* out_tokens,
                                         size_t capacity, size_t* n_out, sqrtdk_stop_reason* reason);

/* Copies the handle's last error message (empty if none) into buf (NUL-terminated, truncated to size); returns
 * the full message length. */
size_t sqrtdk_model_last_error(const sqrtdk_model* model, char* buf, size_t size);
size_t sqrtdk_session_last_error(const sqrtdk_session* session, char* buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* SQRTDK_SQRTDK_H */
