// Writes the serve tests' chat model: random weights (tests/common/toy_model.h) with a real tokenizer, Llama 2's
// 32 000-piece SentencePiece BPE (tests/data/tokenizers/llama2), and Llama 2 chat's template
// (tests/data/chat/templates/llama2.jinja), so /v1/chat/completions renders, encodes and stops at </s> as it would
// on a real Llama 2 chat model. The text it generates is noise; the tests check shapes and consistency.
//
//   serve-make-chat-model OUT.sqdk TOKENIZER_DIR TEMPLATE.jinja
#include "tests/common/toy_model.h"

#include <sqrtdk/chat.h>
#include <sqrtdk/tokenizer.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s OUT.sqdk TOKENIZER_DIR TEMPLATE.jinja\n", argv[0]);
    return 1;
  }
  try {
    const std::string dir = argv[2];
    sqrtdk::TokenizerSpec spec =
        sqrtdk::tokenizer_spec_from_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
    std::ifstream jinja(argv[3], std::ios::binary);
    std::stringstream text;
    text << jinja.rdbuf();
    spec.chat_template_jinja = text.str();
    spec.chat_template = sqrtdk::detect_chat_template(spec.chat_template_jinja);
    if (spec.chat_template == sqrtdk::ChatTemplateKind::none) throw std::runtime_error("template not recognized");

    sqrtdk::ModelConfig config = sqrtdk::test::toy_llama_config();
    config.n_vocab = static_cast<uint32_t>(spec.vocab.size());
    config.max_seq = 256;
    config.tied_embeddings = true;
    config.tokenizer = sqrtdk::TokenizerKind::bpe;
    config.bos_id = spec.bos_id;
    config.eos_id = spec.eos_id;
    sqrtdk::test::write_toy_model(argv[1], config, /*seed=*/11, &spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve-make-chat-model: %s\n", e.what());
    return 1;
  }
  return 0;
}
