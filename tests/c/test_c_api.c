/* The C API, exercised from C (compiled as C11): load, config, sessions, prefill/decode, generate, sampling,
 * and the error paths (missing, corrupt and truncated files, NULLs, out-of-range ids, full context), each leaving
 * handles usable. Usage: test_c_api MODEL.sqdk. Prints "N passed, M failed" and exits non-zero on any failure. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fdopen, close, unlink */

#include <sqrtdk/sqrtdk.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int passed = 0, failed = 0;

/* Writes the first n bytes of src (all of it if src is shorter), or n bytes of 'x' if src is NULL, to a new
 * temporary file; its path goes to path[64]. Returns 0 on success. */
static int write_temp(const char* src, size_t n, char path[64]) {
  strcpy(path, "/tmp/sqrtdk-c-api-XXXXXX");
  const int fd = mkstemp(path);
  if (fd < 0) return -1;
  FILE* out = fdopen(fd, "wb");
  if (!out) {
    close(fd);
    return -1;
  }
  FILE* in = src ? fopen(src, "rb") : NULL;
  if (src && !in) {
    fclose(out);
    return -1;
  }
  for (size_t i = 0; i < n; ++i) {
    int c = 'x';
    if (in && (c = fgetc(in)) == EOF) break;
    fputc(c, out);
  }
  if (in) fclose(in);
  return fclose(out) == 0 ? 0 : -1;
}
#define CHECK(cond)                                                  \
  do {                                                               \
    if (cond) {                                                      \
      passed++;                                                      \
    } else {                                                         \
      failed++;                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                \
  } while (0)

struct SeenText {
  size_t calls;
  char text[512];
  size_t len;
};
/* Appends the streamed text; counts calls. */
static int record_text(void* user, uint32_t token, const char* text, size_t len) {
  struct SeenText* seen = (struct SeenText*)user;
  (void)token;
  seen->calls++;
  if (seen->len + len < sizeof seen->text) {
    memcpy(seen->text + seen->len, text, len);
    seen->len += len;
    seen->text[seen->len] = 0;
  }
  return 1;
}
static int stop_at_third(void* user, uint32_t token, const char* text, size_t len) {
  struct SeenText* seen = (struct SeenText*)user;
  (void)token, (void)text, (void)len;
  return ++seen->calls < 3;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL.sqdk\n", argv[0]);
    return 2;
  }
  char err[512];
  sqrtdk_model* model = NULL;

  CHECK(strlen(sqrtdk_version()) > 0);
  CHECK(sqrtdk_model_load("/nonexistent/model.sqdk", 1, &model, err, sizeof err) == SQRTDK_ERR_BAD_FILE);
  CHECK(model == NULL);
  CHECK(strstr(err, "/nonexistent/model.sqdk") != NULL);
  CHECK(sqrtdk_model_load(NULL, 1, &model, err, sizeof err) == SQRTDK_ERR_INVALID_ARGUMENT);
  /* A file that is not a model, and the real model cut short: both BAD_FILE, with a message naming the file. */
  char tmp[64];
  CHECK(write_temp(NULL, 300, tmp) == 0);
  CHECK(sqrtdk_model_load(tmp, 1, &model, err, sizeof err) == SQRTDK_ERR_BAD_FILE);
  CHECK(model == NULL && strstr(err, tmp) != NULL && strstr(err, "bad magic") != NULL);
  unlink(tmp);
  CHECK(write_temp(argv[1], 1000, tmp) == 0);
  CHECK(sqrtdk_model_load(tmp, 1, &model, err, sizeof err) == SQRTDK_ERR_BAD_FILE);
  CHECK(model == NULL && strstr(err, "truncated") != NULL);
  unlink(tmp);

  CHECK(sqrtdk_model_load(argv[1], 1, &model, err, sizeof err) == SQRTDK_OK);
  if (!model) {
    fprintf(stderr, "cannot load %s: %s\n", argv[1], err);
    return 1;
  }
  sqrtdk_model_config cfg;
  CHECK(sqrtdk_model_get_config(model, &cfg) == SQRTDK_OK);
  CHECK(cfg.n_vocab > 0 && cfg.d_model > 0 && cfg.n_params > 0);

  sqrtdk_session* s = NULL;
  CHECK(sqrtdk_session_create(model, cfg.max_seq + 1, 1, &s, err, sizeof err) == SQRTDK_ERR_INVALID_ARGUMENT);
  CHECK(s == NULL);
  CHECK(sqrtdk_session_create(model, 16, 1, &s, err, sizeof err) == SQRTDK_OK);

  const uint32_t prompt[3] = {1, 2, 3};
  const float* logits = NULL;
  CHECK(sqrtdk_session_prefill(s, prompt, 3, &logits) == SQRTDK_OK);
  CHECK(logits != NULL);
  float first = logits ? logits[0] : NAN;
  CHECK(isfinite(first));
  CHECK(sqrtdk_session_n_past(s) == 3);

  /* Errors leave the session as it was, with a message on the handle. */
  const uint32_t bad[2] = {1, cfg.n_vocab};
  CHECK(sqrtdk_session_prefill(s, bad, 2, &logits) == SQRTDK_ERR_INVALID_ARGUMENT);
  CHECK(sqrtdk_session_last_error(s, err, sizeof err) > 0);
  CHECK(strstr(err, "outside the vocabulary") != NULL);
  CHECK(sqrtdk_session_n_past(s) == 3);
  CHECK(sqrtdk_session_prefill(s, prompt, 0, &logits) == SQRTDK_ERR_INVALID_ARGUMENT);
  CHECK(sqrtdk_session_prefill(s, NULL, 2, &logits) == SQRTDK_ERR_INVALID_ARGUMENT);
  uint32_t many[16] = {0};
  CHECK(sqrtdk_session_prefill(s, many, 16, &logits) == SQRTDK_ERR_CONTEXT_FULL);
  CHECK(sqrtdk_session_decode(s, 4, &logits) == SQRTDK_OK);
  CHECK(sqrtdk_session_last_error(s, err, sizeof err) == 0);
  CHECK(sqrtdk_session_n_past(s) == 4);

  /* Same prompt, same first logit after a reset (deterministic). */
  CHECK(sqrtdk_session_reset(s) == SQRTDK_OK);
  CHECK(sqrtdk_session_prefill(s, prompt, 3, &logits) == SQRTDK_OK);
  CHECK(logits && logits[0] == first);

  /* Greedy generation twice gives the same tokens; sampling with a seed is reproducible. */
  sqrtdk_sampling greedy = {0.0f, 0, 1.0f, 1};
  uint32_t out1[8], out2[8];
  size_t n1 = 0, n2 = 0;
  CHECK(sqrtdk_session_reset(s) == SQRTDK_OK);
  CHECK(sqrtdk_session_generate(s, prompt, 3, &greedy, 8, out1, &n1) == SQRTDK_OK);
  CHECK(sqrtdk_session_reset(s) == SQRTDK_OK);
  CHECK(sqrtdk_session_generate(s, prompt, 3, &greedy, 8, out2, &n2) == SQRTDK_OK);
  CHECK(n1 > 0 && n1 == n2 && memcmp(out1, out2, n1 * sizeof(uint32_t)) == 0);
  CHECK(sqrtdk_session_generate(s, prompt, 3, &greedy, 8, NULL, &n1) == SQRTDK_ERR_INVALID_ARGUMENT);
  /* A reset that succeeds clears the last error, as every successful call does (it kept the stale text). */
  CHECK(sqrtdk_session_last_error(s, err, sizeof err) > 0);
  CHECK(sqrtdk_session_reset(s) == SQRTDK_OK);
  CHECK(sqrtdk_session_last_error(s, err, sizeof err) == 0);
  /* max_new_tokens = 0 prefills the prompt (checked, in the context) and makes no token. */
  CHECK(sqrtdk_session_generate(s, prompt, 3, &greedy, 0, NULL, &n1) == SQRTDK_OK && n1 == 0);
  CHECK(sqrtdk_session_n_past(s) == 3);
  CHECK(sqrtdk_session_reset(s) == SQRTDK_OK);

  float toy[4] = {0.0f, 3.0f, 1.0f, 3.0f};
  uint32_t tok = 99;
  CHECK(sqrtdk_sample(toy, 4, &greedy, &tok) == SQRTDK_OK && tok == 1);
  sqrtdk_sampling hot = {1.0f, 0, 1.0f, 7};
  uint32_t a = 0, b = 1;
  CHECK(sqrtdk_sample(toy, 4, &hot, &a) == SQRTDK_OK && sqrtdk_sample(toy, 4, &hot, &b) == SQRTDK_OK && a == b);
  sqrtdk_sampling invalid = {-1.0f, 0, 1.0f, 7};
  CHECK(sqrtdk_sample(toy, 4, &invalid, &a) == SQRTDK_ERR_INVALID_ARGUMENT);
  CHECK(sqrtdk_sample(NULL, 4, &hot, &a) == SQRTDK_ERR_INVALID_ARGUMENT);

  /* Text: tokenize / detokenize (the bundled model's byte tokenizer adds BOS 256), buffer sizing. */
  CHECK(cfg.has_tokenizer == 1);
  uint32_t ids[32];
  size_t n_ids = 0;
  CHECK(sqrtdk_tokenize(model, "In the", 6, 1, ids, 32, &n_ids) == SQRTDK_OK);
  CHECK(n_ids == 7 && ids[0] == 256 && ids[1] == 'I' && ids[6] == 'e');
  CHECK(sqrtdk_tokenize(model, "In the", 6, 0, ids, 32, &n_ids) == SQRTDK_OK && n_ids == 6 && ids[0] == 'I');
  CHECK(sqrtdk_tokenize(model, "In the", 6, 1, ids, 3, &n_ids) == SQRTDK_ERR_BUFFER_TOO_SMALL && n_ids == 7);
  CHECK(sqrtdk_model_last_error(model, err, sizeof err) > 0);
  char text[16];
  size_t n_text = 0;
  CHECK(sqrtdk_detokenize(model, ids, 6, 1, text, sizeof text, &n_text) == SQRTDK_OK);
  CHECK(n_text == 6 && strcmp(text, "In the") == 0);
  CHECK(sqrtdk_detokenize(model, ids, 6, 1, text, 6, &n_text) == SQRTDK_ERR_BUFFER_TOO_SMALL && n_text == 6);
  const uint32_t bad_id[1] = {999999};
  CHECK(sqrtdk_detokenize(model, bad_id, 1, 1, text, sizeof text, &n_text) == SQRTDK_ERR_INVALID_ARGUMENT);
  CHECK(sqrtdk_tokenize(model, NULL, 3, 1, ids, 32, &n_ids) == SQRTDK_ERR_INVALID_ARGUMENT);

  /* A stateful sampler: a token-by-token loop reproduces generate_ex with the same seed (sqrtdk_sample reseeds
   * every call and could not). */
  {
    sqrtdk_session* g = NULL;
    CHECK(sqrtdk_session_create(model, 64, 1, &g, err, sizeof err) == SQRTDK_OK);
    sqrtdk_generate_options go;
    memset(&go, 0, sizeof go);
    go.sampling = hot;
    go.max_new_tokens = 12;
    go.ignore_eos = 1;
    uint32_t gen[12];
    size_t n_gen = 0;
    sqrtdk_stop_reason why = SQRTDK_STOP_CALLBACK;
    CHECK(sqrtdk_session_generate_ex(g, ids, 7, &go, gen, 12, &n_gen, &why) == SQRTDK_OK);
    CHECK(n_gen == 12 && why == SQRTDK_STOP_MAX_TOKENS);
    sqrtdk_sampler* sampler = NULL;
    CHECK(sqrtdk_sampler_create(&hot, &sampler) == SQRTDK_OK && sampler != NULL);
    CHECK(sqrtdk_session_reset(g) == SQRTDK_OK);
    const float* lg = NULL;
    CHECK(sqrtdk_session_prefill(g, ids, 7, &lg) == SQRTDK_OK);
    int same = 1, varied = 0;
    for (size_t i = 0; i < 12; ++i) {
      uint32_t t = 0;
      CHECK(sqrtdk_sampler_sample(sampler, lg, cfg.n_vocab, &t) == SQRTDK_OK);
      same &= t == gen[i];
      varied |= t != gen[0];
      if (i + 1 < 12) CHECK(sqrtdk_session_decode(g, t, &lg) == SQRTDK_OK);
    }
    CHECK(same);
    CHECK(varied); /* 12 draws at temperature 1 are not all one token */
    sqrtdk_sampler_free(sampler);
    sqrtdk_sampler_free(NULL);

    /* Stop strings cut the text; the callback sees every token, and the text it gets never holds the stop string. */
    struct SeenText seen;
    memset(&seen, 0, sizeof seen);
    go.sampling = greedy;
    go.max_new_tokens = 12;
    CHECK(sqrtdk_session_reset(g) == SQRTDK_OK);
    CHECK(sqrtdk_session_generate_ex(g, ids, 7, &go, gen, 12, &n_gen, &why) == SQRTDK_OK && n_gen == 12);
    char full[64];
    size_t n_full = 0;
    CHECK(sqrtdk_detokenize(model, gen, n_gen, 1, full, sizeof full, &n_full) == SQRTDK_OK);
    /* The greedy text's 3rd to 5th characters as a stop string: generation stops right where they complete. */
    char stop[4] = {full[2], full[3], full[4], 0};
    const char* stops[1] = {stop};
    go.stop_strings = stops;
    go.n_stop_strings = 1;
    go.on_token = record_text;
    go.user_data = &seen;
    CHECK(sqrtdk_session_reset(g) == SQRTDK_OK);
    CHECK(sqrtdk_session_generate_ex(g, ids, 7, &go, gen, 12, &n_gen, &why) == SQRTDK_OK);
    CHECK(why == SQRTDK_STOP_STRING);
    CHECK(n_gen <= 5 && seen.calls == n_gen);
    CHECK(seen.len <= 2 && strncmp(seen.text, full, seen.len) == 0);
    CHECK(strstr(seen.text, stop) == NULL);
    /* A callback returning 0 stops generation with SQRTDK_STOP_CALLBACK. */
    go.n_stop_strings = 0;
    go.on_token = stop_at_third;
    seen.calls = 0;
    CHECK(sqrtdk_session_reset(g) == SQRTDK_OK);
    CHECK(sqrtdk_session_generate_ex(g, ids, 7, &go, gen, 12, &n_gen, &why) == SQRTDK_OK);
    CHECK(why == SQRTDK_STOP_CALLBACK && n_gen == 3);
    CHECK(sqrtdk_session_generate_ex(g, ids, 7, &go, gen, 4, &n_gen, &why) == SQRTDK_ERR_INVALID_ARGUMENT);
    sqrtdk_session_free(g);
  }

  /* A session keeps its model alive after the model handle is freed. */
  sqrtdk_model_free(model);
  CHECK(sqrtdk_session_decode(s, 5, &logits) == SQRTDK_OK);
  sqrtdk_session_free(s);
  sqrtdk_session_free(NULL);
  sqrtdk_model_free(NULL);
  CHECK(strcmp(sqrtdk_status_string(SQRTDK_ERR_BAD_FILE), "bad model file") == 0);
  CHECK(strcmp(sqrtdk_status_string(SQRTDK_ERR_OUT_OF_MEMORY), "out of memory") == 0);
  CHECK(strcmp(sqrtdk_status_string(SQRTDK_ERR_UNSUPPORTED), "unsupported") == 0);
  CHECK(SQRTDK_ERR_UNSUPPORTED == 6); /* statuses are appended, never renumbered */
  CHECK(SQRTDK_ERR_BUFFER_TOO_SMALL == 7);

  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
