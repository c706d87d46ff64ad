// Loads a model, runs a prompt, prints the greedy next token: what a service embedding sqrtdk does first.
#include <sqrtdk/sqrtdk.hpp>

#include <algorithm>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    auto model = sqrtdk::Model::load(argv[1]);           // immutable, shareable
    sqrtdk::Session session(model);                       // one per caller
    const auto prompt = model->require_tokenizer().encode("Hello");  // the installed headers carry the tokenizer
    if (prompt != sqrtdk::byte_encode("Hello", model->config().bos_id)) return 1;
    auto logits = session.prefill(prompt);
    auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    std::printf("sqrtdk %s: next token %ld of %zu\n", SQRTDK_VERSION_STRING, static_cast<long>(best), logits.size());
    return logits.size() == model->config().n_vocab ? 0 : 1;
  } catch (const sqrtdk::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
