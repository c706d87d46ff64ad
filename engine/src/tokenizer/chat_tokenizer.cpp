// A model's chat prompt: the template stored with its tokenizer, rendered with the tokenizer's BOS/EOS pieces.
#include <sqrtdk/chat.h>
#include <sqrtdk/error.h>
#include <sqrtdk/tokenizer.h>

namespace sqrtdk {

std::string render_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages, bool add_generation_prompt) {
  const TokenizerSpec* spec = tokenizer.spec();
  if (!spec || spec->chat_template == ChatTemplateKind::none)
    throw Error(ErrorKind::unsupported,
                "this model has no chat template the engine can render (its tokenizer_config.json had none, or one "
                "that is not ChatML, Llama 2, Llama 3 or Zephyr): pass a raw prompt");
  const ChatTemplate t = spec->chat_template_jinja.empty() ? ChatTemplate{spec->chat_template, {}, false}
                                                           : analyze_chat_template(spec->chat_template_jinja);
  auto piece = [&](uint32_t id) {
    return id == kNoToken || id >= tokenizer.vocab_size() ? std::string() : std::string(tokenizer.piece(id));
  };
  return render_chat(t, messages, add_generation_prompt, piece(spec->bos_id), piece(spec->eos_id));
}

}  // namespace sqrtdk
