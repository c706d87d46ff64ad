// Chat templates (sqrtdk/chat.h) against the real Jinja templates: tests/data/chat/<template>.json hold what jinja2
// renders (tools/make_chat_fixtures.py, transformers' settings) for each conversation, and detect.json the kind
// each template text must be detected as (formatting variants that jinja2 renders identically, edits that it
// renders otherwise, unknown templates).
#include <sqrtdk/chat.h>
#include <sqrtdk/error.h>

#include <doctest/doctest.h>

#include "tests/common/files.h"
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

using namespace sqrtdk;

namespace {

using sqrtdk::test::read_json;

std::string chat_data(const std::string& file) { return std::string(SQRTDK_TEST_DATA_DIR) + "/chat/" + file; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ChatTemplateKind kind_from_name(const std::string& name) {
  if (name == "chatml") return ChatTemplateKind::chatml;
  if (name == "llama2") return ChatTemplateKind::llama2;
  if (name == "llama3") return ChatTemplateKind::llama3;
  if (name == "zephyr") return ChatTemplateKind::zephyr;
  REQUIRE_MESSAGE(name == "none", "unknown kind " << name);
  return ChatTemplateKind::none;
}

std::vector<ChatMessage> messages_from(const nlohmann::json& list) {
  std::vector<ChatMessage> messages;
  for (const auto& m : list) messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return messages;
}

const char* const kFixtures[] = {"chatml", "qwen2", "qwen2.5", "qwen3", "qwen3_revised", "llama2",
                                 "llama3", "llama3_generation_prompt", "zephyr"};

std::vector<ChatMessage> conversation(std::initializer_list<std::pair<const char*, const char*>> turns) {
  std::vector<ChatMessage> messages;
  for (const auto& [role, content] : turns) messages.push_back({role, content});
  return messages;
}

}  // namespace

TEST_CASE("chat template: every fixture conversation renders as jinja2 renders it") {
  for (const char* name : kFixtures) {
    const nlohmann::json fixture = read_json(chat_data(std::string(name) + ".json"));
    const std::string jinja = read_text(chat_data(fixture.at("template_file").get<std::string>()));
    const ChatTemplate chat_template = analyze_chat_template(jinja);
    const auto& detect = fixture.at("detect");
    INFO("template " << std::string(name));
    REQUIRE(chat_template.kind == kind_from_name(detect.at("kind")));
    CHECK(chat_template.default_system == detect.at("default_system").get<std::string>());
    CHECK(chat_template.qwen3_thinking == detect.at("qwen3_thinking").get<bool>());
    const std::string bos = fixture.at("bos_token"), eos = fixture.at("eos_token");
    const bool generation_prompt_always = fixture.at("generation_prompt_always");
    size_t n_rendered = 0, n_errors = 0;
    for (const auto& c : fixture.at("cases")) {
      const std::vector<ChatMessage> messages = messages_from(c.at("messages"));
      const bool add_generation_prompt = c.at("add_generation_prompt").get<bool>() || generation_prompt_always;
      INFO("case " << c.dump());
      if (c.contains("error") || c.contains("engine_error")) {
        CHECK_THROWS_AS(render_chat(chat_template, messages, add_generation_prompt, bos, eos), Error);
        ++n_errors;
      } else {
        CHECK(render_chat(chat_template, messages, add_generation_prompt, bos, eos) ==
              c.at("expected").get<std::string>());
        ++n_rendered;
      }
    }
    MESSAGE(std::string(name) << ": " << n_rendered << " renders identical, " << n_errors << " errors as expected");
    CHECK(n_rendered >= 20);
  }
}

TEST_CASE("chat template: detection of formatting variants, edited and unknown templates") {
  const nlohmann::json cases = read_json(chat_data("detect.json"));
  size_t n_family = 0, n_none = 0;
  for (const auto& c : cases) {
    INFO("template " << c.at("name").get<std::string>());
    const ChatTemplate detected = analyze_chat_template(c.at("template").get<std::string>());
    const ChatTemplateKind expected = kind_from_name(c.at("kind"));
    CHECK(detected.kind == expected);
    CHECK(detect_chat_template(c.at("template").get<std::string>()) == expected);
    if (expected != ChatTemplateKind::none) {
      CHECK(detected.default_system == c.at("default_system").get<std::string>());
      CHECK(detected.qwen3_thinking == c.at("qwen3_thinking").get<bool>());
      ++n_family;
    } else {
      ++n_none;
    }
  }
  MESSAGE(n_family << " templates detected as their family, " << n_none << " as none");
  CHECK(n_family >= 9);
  CHECK(n_none >= 10);
}

TEST_CASE("chat template: hand-made variants and near misses") {
  const std::string llama3 = read_text(chat_data("templates/llama3_generation_prompt.jinja"));
  CHECK(detect_chat_template(llama3) == ChatTemplateKind::llama3);
  // Comments and a trailing newline output nothing.
  CHECK(detect_chat_template("{# Llama 3 #}\n" + llama3 + "\n") == ChatTemplateKind::llama3);
  // Text after the template, a changed marker or a truncated template are something else.
  CHECK(detect_chat_template(llama3 + "x") == ChatTemplateKind::none);
  CHECK(detect_chat_template(llama3.substr(0, llama3.size() / 2)) == ChatTemplateKind::none);
  std::string other_marker = llama3;
  other_marker.replace(other_marker.find("<|eot_id|>"), 10, "<|eom_id|>");
  CHECK(detect_chat_template(other_marker) == ChatTemplateKind::none);
  // A string escape jinja2 would decode but the lexer does not know is unknown, not guessed.
  std::string unicode_escape = llama3;
  unicode_escape.replace(unicode_escape.find("\n\n'"), 2, "\\u000a\\u000a");
  CHECK(detect_chat_template(unicode_escape) == ChatTemplateKind::none);
  CHECK(detect_chat_template("{% raw %}{{ messages }}{% endraw %}") == ChatTemplateKind::none);
  CHECK(detect_chat_template("{{ unterminated") == ChatTemplateKind::none);
  CHECK(detect_chat_template("") == ChatTemplateKind::none);
}

TEST_CASE("chat template: kind none and unsupported roles are errors") {
  const auto messages = conversation({{"user", "hi"}});
  try {
    (void)render_chat(ChatTemplateKind::none, messages, true, "", "");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::unsupported);
    CHECK(std::string(e.what()) == "this model has no chat template the engine can render; pass a raw prompt");
  }
  CHECK_THROWS_AS(render_chat(static_cast<ChatTemplateKind>(99), messages, true, "", ""), Error);
  for (ChatTemplateKind kind : {ChatTemplateKind::chatml, ChatTemplateKind::llama2, ChatTemplateKind::llama3,
                                ChatTemplateKind::zephyr}) {
    INFO("kind " << static_cast<int>(kind));
    CHECK_THROWS_WITH_AS(render_chat(kind, std::vector<ChatMessage>{}, true, "<s>", "</s>"),
                         doctest::Contains("no messages"), Error);
    CHECK_THROWS_WITH_AS(render_chat(kind, conversation({{"user", "hi"}, {"tool", "42"}}), true, "<s>", "</s>"),
                         doctest::Contains("role 'tool'"), Error);
    CHECK_THROWS_AS(render_chat(kind, conversation({{"User", "hi"}}), true, "<s>", "</s>"), Error);
  }
}

TEST_CASE("chat template: Llama 2 role order errors as its template does") {
  const auto render = [](std::vector<ChatMessage> messages) {
    return render_chat(ChatTemplateKind::llama2, messages, true, "<s>", "</s>");
  };
  CHECK(render(conversation({{"system", "S"}, {"user", "u"}, {"assistant", "a"}, {"user", "v"}})) ==
        "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nu [/INST] a </s><s>[INST] v [/INST]");
  CHECK_THROWS_WITH_AS(render(conversation({{"assistant", "a"}})),
                       doctest::Contains("Conversation roles must alternate"), Error);
  CHECK_THROWS_WITH_AS(render(conversation({{"user", "u"}, {"user", "v"}})),
                       doctest::Contains("Conversation roles must alternate"), Error);
  CHECK_THROWS_WITH_AS(render(conversation({{"system", "S"}, {"system", "T"}, {"user", "u"}})),
                       doctest::Contains("Conversation roles must alternate"), Error);
  // The template drops a later system message without a word; the engine refuses instead.
  CHECK_THROWS_WITH_AS(render(conversation({{"user", "u"}, {"system", "S"}, {"user", "v"}})),
                       doctest::Contains("system message after the first turn"), Error);
}

TEST_CASE("chat template: the ChatML variants differ only where their templates differ") {
  const auto messages =
      conversation({{"user", "2+2?"}, {"assistant", "<think>\nadd\n</think>\n\n4"}, {"user", "3+3?"}});
  const ChatTemplate plain{ChatTemplateKind::chatml, "", false};
  const ChatTemplate qwen25{ChatTemplateKind::chatml, "You are Qwen.", false};
  const ChatTemplate qwen3{ChatTemplateKind::chatml, "", true};
  CHECK(render_chat(plain, messages, true, "", "") ==
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nadd\n</think>\n\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n");
  CHECK(render_chat(qwen25, messages, true, "", "") ==
        "<|im_start|>system\nYou are Qwen.<|im_end|>\n" + render_chat(plain, messages, true, "", ""));
  CHECK(render_chat(qwen3, messages, true, "", "") ==
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n");
  CHECK(render_chat(ChatTemplateKind::chatml, messages, true, "", "") == render_chat(plain, messages, true, "", ""));
}
