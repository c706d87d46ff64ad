/* An out-of-tree C consumer of an installed sqrtdk, built with pkg-config. */
#include <sqrtdk/sqrtdk.h>

#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char err[256];
  sqrtdk_model* model = NULL;
  sqrtdk_session* session = NULL;
  if (sqrtdk_model_load(argv[1], 1, &model, err, sizeof err) != SQRTDK_OK) {
    fprintf(stderr, "load: %s\n", err);
    return 1;
  }
  if (sqrtdk_session_create(model, 0, 1, &session, err, sizeof err) != SQRTDK_OK) return 1;
  const uint32_t prompt[2] = {72, 105};
  sqrtdk_sampling greedy = {0.0f, 0, 1.0f, 0};
  uint32_t out[4];
  size_t n = 0;
  sqrtdk_status st = sqrtdk_session_generate(session, prompt, 2, &greedy, 4, out, &n);
  printf("sqrtdk %s (C): status %s, %zu tokens\n", sqrtdk_version(), sqrtdk_status_string(st), n);
  sqrtdk_session_free(session);
  sqrtdk_model_free(model);
  return st == SQRTDK_OK && n > 0 ? 0 : 1;
}
