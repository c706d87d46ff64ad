// Chat templates: the Jinja `chat_template` of a Hugging Face tokenizer_config.json, recognized once (at convert
// time) and rendered natively, since no C++ Jinja engine is packaged in Debian.
//
// Detection is exact up to formatting: the template is lexed as Jinja does it with transformers' settings
// (trim_blocks, lstrip_blocks, `-`/`+` whitespace control, comments, CRLF, the dropped trailing newline), tag
// contents are compared token by token (string literals by value, so 'x' == "x" and "\n" == a literal newline;
// `m['role']` == `m.role`), and the result must equal one of the known templates below. Anything else, even a small
// edit that changes the output, is ChatTemplateKind::none: an unknown template is an error at chat time, never a
// silently different prompt. Recognized (texts and sources in tests/data/chat/README.md):
//   chatml  - plain ChatML (`<|im_start|>role\n...<|im_end|>\n`, any model using Hugging Face's ChatML example);
//             Qwen2/Qwen1.5 and SmolLM2-style (the same, plus a default system message when the chat has none);
//             Qwen2.5 (the same with tool branches; its default system message; tool-only literals may differ);
//             Qwen3, both published revisions (no default system; <think> handling, see ChatTemplate).
//   llama2  - meta-llama/Llama-2-*-chat-hf: `<s>[INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST] answer </s>`.
//   llama3  - Meta-Llama-3-*-Instruct, the first release (appends the assistant header even without
//             add_generation_prompt; rendered here only when asked) and the later one (only when asked).
//             Llama 3.1+ templates (dates, tools, a default system header) are not Llama 3's: none.
//   zephyr  - HuggingFaceH4/zephyr-7b-beta, TinyLlama-1.1B-Chat: `<|user|>\n...</s>\n`.
//
// Rendering takes plain-text messages with roles system, user and assistant (tool calls, tool results, images
// are not supported and are an error) and returns exactly what the real template renders with its default
// variables (Qwen3: enable_thinking unset), byte for byte; tests/engine/test_chat_template.cpp checks this against
// jinja2's output for every template above. Errors (sqrtdk::Error, kind bad_input unless noted):
//   - kind none (unsupported): "this model has no chat template the engine can render; pass a raw prompt";
//   - no messages; a role other than system/user/assistant;
//   - Llama 2: roles not alternating user/assistant after an optional first system message (the template raises
//     "Conversation roles must alternate user/assistant/user/assistant/..."), and a system message after the first
//     turn (the template silently drops it; the engine refuses rather than lose it).
#pragma once

#include <sqrtdk/tokenizer.h>

#include <span>
#include <string>
#include <string_view>

namespace sqrtdk {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// What rendering needs besides the family: the two things that vary between ChatML templates. A converter that
// stores only the kind renders Qwen2/2.5 without their default system message and Qwen3 without its <think>
// handling, so it should store all three.
struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::none;
  // chatml: the system message the template inserts when the chat does not start with one (Qwen2: "You are a
  // helpful assistant."; Qwen2.5: "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."); empty:
  // none is inserted.
  std::string default_system;
  // chatml: Qwen3's assistant turns. An assistant message containing "</think>" is split into reasoning (after the
  // last "<think>" before the first "</think>") and answer (after the last "</think>"); assistant turns after the
  // last real user message are written "<think>\n" + reasoning + "\n</think>\n\n" + answer when they are the last
  // message or have reasoning, and every other assistant turn keeps only its answer. (A user message wrapped in
  // <tool_response>...</tool_response> does not count as the last user message, as in the template.)
  bool qwen3_thinking = false;
};

// The template's family and variant, or kind none for an empty, unknown or edited template (see above).
ChatTemplate analyze_chat_template(std::string_view jinja);
// analyze_chat_template(jinja).kind.
ChatTemplateKind detect_chat_template(std::string_view jinja);

// The prompt text the template renders for `messages` (then tokenized with special tokens matched, no extra BOS:
// the Llama templates write bos_token themselves). add_generation_prompt appends the assistant header that the
// model's reply follows; Llama 2's template has none and ignores it.
std::string render_chat(const ChatTemplate& chat_template, std::span<const ChatMessage> messages,
                        bool add_generation_prompt, std::string_view bos_token, std::string_view eos_token);
// The family's base form: ChatTemplate{kind} (chatml: no default system message, no <think> handling).
std::string render_chat(ChatTemplateKind kind, std::span<const ChatMessage> messages, bool add_generation_prompt,
                        std::string_view bos_token, std::string_view eos_token);

}  // namespace sqrtdk
