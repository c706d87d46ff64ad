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

  float toy[4] = {0.0f, 3.0f, 1.0f, 3.0f};
  uint32_t tok = 99;
  CHECK(sqrtdk_sample(toy, 4, &greedy, &tok) == SQRTDK_OK && tok == 1);
  sqrtdk_sampling hot = {1.0f, 0, 1.0f, 7};
  uint32_t a = 0, b = 1;
  CHECK(sqrtdk_sample(toy, 4, &hot, &a) == SQRTDK_OK && sqrtdk_sample(toy, 4, &hot, &b) == SQRTDK_OK && a == b);
  sqrtdk_sampling invalid = {-1.0f, 0, 1.0f, 7};
  CHECK(sqrtdk_sample(toy, 4, &invalid, &a) == SQRTDK_ERR_INVALID_ARGUMENT);
  CHECK(sqrtdk_sample(NULL, 4, &hot, &a) == SQRTDK_ERR_INVALID_ARGUMENT);

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

  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
