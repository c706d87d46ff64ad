// Reading tokenizer files into a TokenizerSpec (tokenizer.h): Hugging Face's tokenizer.json (+ tokenizer_config.json),
// GPT-2's vocab.json + merges.txt, SentencePiece's tokenizer.model. Every field that changes how text is tokenized is
// either represented exactly or refused with an error naming the file and the JSON field: a tokenizer that is almost
// right is worse than none.
//
// What tokenizer.json may hold (anything else is an error):
//   model          BPE (no dropout, no continuing_subword_prefix / end_of_word_suffix); merges as "a b" or [a, b];
//   normalizer     byte-level: null or NFC; sentencepiece: Prepend("▁") + Replace(" " -> "▁"), or the Replace alone;
//   pre_tokenizer  ByteLevel (with or without its regex and prefix space), or Split(Regex, Isolated) then
//                  ByteLevel(use_regex false, no prefix space); null for sentencepiece;
//   post_processor null, ByteLevel, TemplateProcessing ([BOS] $A [EOS]), RobertaProcessing / BertProcessing, or a
//                  Sequence of those;
//   decoder        ByteLevel; sentencepiece: Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", 1, 0).
#include <sqrtdk/error.h>
#include <sqrtdk/chat.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/tokenizer/text.h"

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>

namespace sqrtdk {

namespace {

using nlohmann::json;

constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kMetaspace = "\xE2\x96\x81";

[[noreturn]] void fail(const std::string& file, const std::string& field, const std::string& what) {
  throw Error(ErrorKind::unsupported, file + ": " + field + ": " + what);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::bad_file, path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    throw Error(ErrorKind::bad_file, path + ": not valid JSON (" + e.what() + ")");
  }
}

std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "?"; }

// A field read with its type checked: errors name the file and the field.
template <class T>
T get(const json& j, const char* key, const T& fallback, const std::string& file, const std::string& at) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    fail(file, at + "." + key, "unexpected JSON type " + std::string(j[key].type_name()));
  }
}

// The pieces' ids: vocab[id] = piece; ids held only by added tokens stay empty. Errors on holes and duplicates.
void read_vocab(const json& vocab, TokenizerSpec& spec, const std::string& file, const std::string& field) {
  if (!vocab.is_object()) fail(file, field, "expected an object of piece -> id");
  uint64_t n = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_unsigned()) fail(file, field + "[\"" + it.key() + "\"]", "id is not an unsigned integer");
    n = std::max<uint64_t>(n, it.value().get<uint64_t>() + 1);
  }
  if (n > (1u << 24)) fail(file, field, "ids up to " + std::to_string(n - 1) + " (more than 16M)");
  spec.vocab.assign(n, std::string());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    std::string& slot = spec.vocab[it.value().get<uint32_t>()];
    if (!slot.empty()) fail(file, field, "id " + std::to_string(it.value().get<uint32_t>()) + " is given twice");
    slot = it.key();
  }
}

uint32_t piece_id(const std::unordered_map<std::string_view, uint32_t>& index, std::string_view piece,
                  const std::string& file, const std::string& field) {
  auto it = index.find(piece);
  if (it == index.end()) fail(file, field, "'" + std::string(piece) + "' is not in the vocabulary");
  return it->second;
}

std::unordered_map<std::string_view, uint32_t> index_of(const TokenizerSpec& spec) {
  std::unordered_map<std::string_view, uint32_t> index;
  index.reserve(spec.vocab.size());
  for (uint32_t id = 0; id < spec.vocab.size(); ++id)
    if (!spec.vocab[id].empty()) index.emplace(spec.vocab[id], id);
  return index;
}

void read_merges(const json& merges, TokenizerSpec& spec, const std::string& file) {
  if (!merges.is_array()) fail(file, "model.merges", "expected an array");
  const auto index = index_of(spec);
  spec.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& m = merges[r];
    const std::string at = "model.merges[" + std::to_string(r) + "]";
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail(file, at, "'" + s + "' is not two pieces separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail(file, at, "expected \"a b\" or [\"a\", \"b\"]");
    }
    spec.merges.emplace_back(piece_id(index, left, file, at), piece_id(index, right, file, at));
  }
}

void read_added(const json& added, TokenizerSpec& spec, const std::string& file) {
  if (added.is_null()) return;
  if (!added.is_array()) fail(file, "added_tokens", "expected an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    const std::string at = "added_tokens[" + std::to_string(i) + "]";
    AddedToken t;
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") ||
        !a["content"].is_string())
      fail(file, at, "expected an object with an unsigned id and a string content");
    t.id = a["id"].get<uint32_t>();
    t.content = a["content"].get<std::string>();
    t.special = get<bool>(a, "special", false, file, at);
    t.lstrip = get<bool>(a, "lstrip", false, file, at);
    t.rstrip = get<bool>(a, "rstrip", false, file, at);
    t.normalized = get<bool>(a, "normalized", false, file, at);
    t.single_word = get<bool>(a, "single_word", false, file, at);
    spec.added.push_back(std::move(t));
  }
  std::stable_sort(spec.added.begin(), spec.added.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  for (size_t i = 1; i < spec.added.size(); ++i)
    if (spec.added[i].id == spec.added[i - 1].id)
      fail(file, "added_tokens", "id " + std::to_string(spec.added[i].id) + " is given twice");
  if (!spec.added.empty() && spec.added.back().id >= spec.vocab.size()) spec.vocab.resize(spec.added.back().id + 1);
}

// The id of a token named in a config or a post-processor: an added token's content, else a vocabulary piece.
uint32_t token_id(const TokenizerSpec& spec, const std::string& content) {
  for (const AddedToken& a : spec.added)
    if (a.content == content) return a.id;
  for (uint32_t id = 0; id < spec.vocab.size(); ++id)
    if (spec.vocab[id] == content) return id;
  return kNoToken;
}

std::string string_pattern(const json& pattern, const std::string& file, const std::string& field) {
  if (!pattern.is_object() || pattern.size() != 1) fail(file, field, "expected {\"String\": ...} or {\"Regex\": ...}");
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) return pattern["Regex"].get<std::string>();
  if (pattern.contains("String") && pattern["String"].is_string()) {
    const std::string s = pattern["String"].get<std::string>();
    if (s.find("\\E") != std::string::npos) fail(file, field, "a String pattern containing \\E");
    return "\\Q" + s + "\\E";
  }
  fail(file, field, "expected {\"String\": ...} or {\"Regex\": ...}");
}

bool is_replace(const json& n, std::string_view from, std::string_view to) {
  return type_of(n) == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
         n["pattern"].contains("String") && n["pattern"]["String"] == from && n.contains("content") &&
         n["content"] == to;
}

void read_normalizer(const json& n, TokenizerSpec& spec, bool sentencepiece, const std::string& file) {
  if (n.is_null()) {
    if (sentencepiece) fail(file, "normalizer", "null, but the sentencepiece style needs Replace(\" \" -> \"▁\")");
    return;
  }
  std::vector<json> steps;
  if (type_of(n) == "Sequence") {
    if (!n.contains("normalizers") || !n["normalizers"].is_array()) fail(file, "normalizer.normalizers", "expected an array");
    for (const json& s : n["normalizers"]) steps.push_back(s);
  } else {
    steps.push_back(n);
  }
  if (!sentencepiece) {
    for (size_t i = 0; i < steps.size(); ++i) {
      if (type_of(steps[i]) != "NFC")
        fail(file, "normalizer" + std::string(steps.size() > 1 ? ".normalizers[" + std::to_string(i) + "]" : "") + ".type",
             "'" + type_of(steps[i]) + "' is not supported with a byte-level tokenizer (only NFC)");
      spec.nfc = true;
    }
    return;
  }
  bool replace = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& s = steps[i];
    const std::string at = "normalizer.normalizers[" + std::to_string(i) + "]";
    if (type_of(s) == "Prepend" && s.contains("prepend") && s["prepend"] == kMetaspace && !spec.add_prefix_space) {
      spec.add_prefix_space = true;
    } else if (is_replace(s, " ", kMetaspace) && !replace) {
      replace = true;
    } else {
      fail(file, at + ".type", "'" + type_of(s) + "' is not supported with the sentencepiece style (only Prepend(\"▁\") "
                               "and Replace(\" \" -> \"▁\"))");
    }
  }
  if (!replace) fail(file, "normalizer", "the sentencepiece style needs Replace(\" \" -> \"▁\")");
}

void read_byte_level(const json& p, TokenizerSpec& spec, bool after_split, const std::string& file,
                     const std::string& at) {
  const bool use_regex = get<bool>(p, "use_regex", true, file, at);
  const bool prefix = get<bool>(p, "add_prefix_space", true, file, at);
  if (after_split) {
    if (use_regex) fail(file, at + ".use_regex", "true after a Split (two regexes in a row are not supported)");
    if (prefix) fail(file, at + ".add_prefix_space", "true after a Split (a space before every piece is not supported)");
    return;
  }
  if (use_regex) spec.split_regex = kGpt2Regex;
  spec.add_prefix_space = prefix;
}

void read_pre_tokenizer(const json& p, TokenizerSpec& spec, const std::string& file) {
  const std::string type = type_of(p);
  if (type == "ByteLevel") return read_byte_level(p, spec, false, file, "pre_tokenizer");
  if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
    const json& seq = p["pretokenizers"];
    if (seq.size() == 1 && type_of(seq[0]) == "ByteLevel")
      return read_byte_level(seq[0], spec, false, file, "pre_tokenizer.pretokenizers[0]");
    if (seq.size() == 2 && type_of(seq[0]) == "Split" && type_of(seq[1]) == "ByteLevel") {
      const json& split = seq[0];
      const std::string at = "pre_tokenizer.pretokenizers[0]";
      if (get<std::string>(split, "behavior", "", file, at) != "Isolated")
        fail(file, at + ".behavior", "'" + get<std::string>(split, "behavior", "", file, at) +
                                         "' is not supported (only Isolated)");
      if (get<bool>(split, "invert", false, file, at)) fail(file, at + ".invert", "true is not supported");
      spec.split_regex = string_pattern(split.value("pattern", json()), file, at + ".pattern");
      tok::SplitRegex check(spec.split_regex, file + ": " + at + ".pattern");  // compiles, or names the field
      return read_byte_level(seq[1], spec, true, file, "pre_tokenizer.pretokenizers[1]");
    }
    fail(file, "pre_tokenizer.pretokenizers", "only [ByteLevel] or [Split, ByteLevel] are supported");
  }
  if (type == "Metaspace")
    fail(file, "pre_tokenizer.type", "Metaspace is not supported yet (its prepend_scheme differs from the legacy "
                                     "Prepend normalizer this build represents)");
  fail(file, "pre_tokenizer.type", "'" + type + "' is not supported");
}

void read_decoder(const json& d, const TokenizerSpec& spec, const std::string& file) {
  if (spec.style == TokenizerStyle::byte_level_bpe) {
    if (type_of(d) == "ByteLevel") return;
    if (type_of(d) == "Sequence" && d.contains("decoders") && d["decoders"].is_array() && d["decoders"].size() == 1 &&
        type_of(d["decoders"][0]) == "ByteLevel")
      return;
    fail(file, "decoder", "'" + type_of(d) + "' with a byte-level pre-tokenizer (expected ByteLevel)");
  }
  const char* expected = "expected Sequence [Replace(\"▁\" -> \" \"), ByteFallback, Fuse, Strip(\" \", 1, 0)]";
  if (type_of(d) != "Sequence" || !d.contains("decoders") || !d["decoders"].is_array()) fail(file, "decoder", expected);
  const json& seq = d["decoders"];
  bool has_byte_pieces = false;
  for (const std::string& p : spec.vocab)
    has_byte_pieces = has_byte_pieces || (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>');
  std::vector<std::string> want = {"Replace", "ByteFallback", "Fuse", "Strip"};
  if (!has_byte_pieces && !spec.byte_fallback && seq.size() == 3) want = {"Replace", "Fuse", "Strip"};
  if (seq.size() != want.size()) fail(file, "decoder.decoders", expected);
  for (size_t i = 0; i < want.size(); ++i)
    if (type_of(seq[i]) != want[i]) fail(file, "decoder.decoders[" + std::to_string(i) + "].type", expected);
  if (!is_replace(seq[0], kMetaspace, " ")) fail(file, "decoder.decoders[0]", expected);
  const json& strip = seq[want.size() - 1];
  if (strip.value("content", "") != " " || strip.value("start", -1) != 1 || strip.value("stop", -1) != 0)
    fail(file, "decoder.decoders[" + std::to_string(want.size() - 1) + "]", expected);
}

// [BOS] $A [EOS] from one post-processor.
void read_post_processor(const json& p, TokenizerSpec& spec, const std::string& file, const std::string& at) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "ByteLevel") return;
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (size_t i = 0; i < p["processors"].size(); ++i)
      read_post_processor(p["processors"][i], spec, file, at + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto pair_id = [&](const char* key) {
      const json& v = p.value(key, json());
      if (!v.is_array() || v.size() != 2 || !v[1].is_number_unsigned()) fail(file, at + "." + key, "expected [token, id]");
      return v[1].get<uint32_t>();
    };
    spec.bos_id = pair_id("cls");
    spec.eos_id = pair_id("sep");
    spec.add_bos = spec.add_eos = true;
    return;
  }
  if (type != "TemplateProcessing") fail(file, at + ".type", "'" + type + "' is not supported");
  const json& single = p.value("single", json());
  if (!single.is_array()) fail(file, at + ".single", "expected an array");
  const json& specials = p.value("special_tokens", json::object());
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const json& item = single[i];
    const std::string ai = at + ".single[" + std::to_string(i) + "]";
    if (item.contains("Sequence")) {
      if (seen_sequence || item["Sequence"].value("id", "") != "A") fail(file, ai, "expected one Sequence A");
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken")) fail(file, ai, "expected SpecialToken or Sequence");
    const std::string name = item["SpecialToken"].value("id", "");
    const json& entry = specials.value(name, json());
    if (!entry.is_object() || !entry.contains("ids") || !entry["ids"].is_array() || entry["ids"].size() != 1 ||
        !entry["ids"][0].is_number_unsigned())
      fail(file, at + ".special_tokens[\"" + name + "\"]", "expected exactly one id");
    const uint32_t id = entry["ids"][0].get<uint32_t>();
    if (!seen_sequence) {
      if (spec.add_bos) fail(file, ai, "more than one special token before the sequence");
      spec.bos_id = id;
      spec.add_bos = true;
    } else {
      if (spec.add_eos) fail(file, ai, "more than one special token after the sequence");
      spec.eos_id = id;
      spec.add_eos = true;
    }
  }
  if (!seen_sequence) fail(file, at + ".single", "no Sequence A");
}

// bos_token / eos_token / pad_token in tokenizer_config.json: a string, an {"content": ...} object, or null.
uint32_t config_token(const json& cfg, const char* key, const TokenizerSpec& spec, const std::string& file) {
  if (!cfg.contains(key) || cfg[key].is_null()) return kNoToken;
  const json& v = cfg[key];
  std::string content;
  if (v.is_string()) {
    content = v.get<std::string>();
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    content = v["content"].get<std::string>();
  } else {
    fail(file, key, "expected a string or an object with a content");
  }
  const uint32_t id = token_id(spec, content);
  if (id == kNoToken) fail(file, key, "'" + content + "' is neither an added token nor a piece");
  return id;
}

// Besides eos, the tokens that end a turn: the chat markers of the families sqrtdk runs, when they are added tokens
// (Qwen's vocabulary also has "</s>" as plain text).
void add_end_of_turn_ids(TokenizerSpec& spec) {
  for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|endoftext|>", "</s>"}) {
    uint32_t id = kNoToken;
    for (const AddedToken& a : spec.added)
      if (a.content == marker) id = a.id;
    if (id != kNoToken && id != spec.eos_id &&
        std::find(spec.end_of_turn_ids.begin(), spec.end_of_turn_ids.end(), id) == spec.end_of_turn_ids.end())
      spec.end_of_turn_ids.push_back(id);
  }
}

// tokenizer_config.json: add_bos_token / add_eos_token, bos / eos / pad tokens, the chat template.
void read_config(const std::string& path, TokenizerSpec& spec) {
  if (path.empty()) return;
  const json cfg = read_json(path);
  if (!cfg.is_object()) fail(path, "(top level)", "expected an object");
  const uint32_t bos = config_token(cfg, "bos_token", spec, path);
  const uint32_t eos = config_token(cfg, "eos_token", spec, path);
  const uint32_t pad = config_token(cfg, "pad_token", spec, path);
  if (bos != kNoToken) {
    if (spec.add_bos && bos != spec.bos_id)
      fail(path, "bos_token", "id " + std::to_string(bos) + " but tokenizer.json's post_processor adds id " +
                                  std::to_string(spec.bos_id));
    spec.bos_id = bos;
  }
  if (eos != kNoToken) {
    if (spec.add_eos && eos != spec.eos_id)
      fail(path, "eos_token", "id " + std::to_string(eos) + " but tokenizer.json's post_processor adds id " +
                                  std::to_string(spec.eos_id));
    spec.eos_id = eos;
  }
  if (pad != kNoToken) spec.pad_id = pad;
  // transformers' Llama tokenizers rebuild the post-processor from these flags.
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
    spec.add_bos = cfg["add_bos_token"].get<bool>();
    if (spec.add_bos && spec.bos_id == kNoToken) fail(path, "add_bos_token", "true but there is no bos_token");
  }
  if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) {
    spec.add_eos = cfg["add_eos_token"].get<bool>();
    if (spec.add_eos && spec.eos_id == kNoToken) fail(path, "add_eos_token", "true but there is no eos_token");
  }
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    std::string text;
    const json& t = cfg["chat_template"];
    if (t.is_string()) {
      text = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const json& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          text = e["template"].get<std::string>();
    } else {
      fail(path, "chat_template", "expected a string or a list of {name, template}");
    }
    // The family (none when the engine cannot render it exactly: chatting is then an error), and the source, which
    // says the variant (Qwen2's default system message, Qwen3's <think> handling). Templates over the section's
    // 64 KiB limit are left out (none is that large).
    if (text.size() <= 65536) {
      spec.chat_template = detect_chat_template(text);
      spec.chat_template_jinja = text;
    }
  }
}

void finish(TokenizerSpec& spec, const std::string& where) {
  add_end_of_turn_ids(spec);
  spec.validate(where, ErrorKind::bad_file);
}

}  // namespace

TokenizerSpec tokenizer_spec_from_json(const std::string& path, const std::string& config_path) {
  const json j = read_json(path);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail(path, "model", "missing");
  const json& model = j["model"];
  if (type_of(model) != "BPE" && !(model.contains("merges") && !model.contains("type")))
    fail(path, "model.type", "'" + type_of(model) + "' is not supported (only BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0)
    fail(path, "model.dropout", "BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (get<std::string>(model, key, "", path, "model") != "")
      fail(path, std::string("model.") + key, "'" + model[key].get<std::string>() + "' is not supported");
  if (!model.contains("vocab")) fail(path, "model.vocab", "missing");
  if (!model.contains("merges")) fail(path, "model.merges", "missing");

  TokenizerSpec spec;
  read_vocab(model["vocab"], spec, path, "model.vocab");
  read_added(j.value("added_tokens", json()), spec, path);
  read_merges(model["merges"], spec, path);
  spec.byte_fallback = get<bool>(model, "byte_fallback", false, path, "model");
  spec.ignore_merges = get<bool>(model, "ignore_merges", false, path, "model");
  const std::string unk = get<std::string>(model, "unk_token", "", path, "model");
  if (!unk.empty()) {
    spec.unk_id = token_id(spec, unk);
    if (spec.unk_id == kNoToken) fail(path, "model.unk_token", "'" + unk + "' is not in the vocabulary");
    if (!get<bool>(model, "fuse_unk", false, path, "model") && !spec.byte_fallback)
      fail(path, "model.fuse_unk", "false is not supported (unknown characters always fuse into one unk)");
  }

  const json& pre = j.value("pre_tokenizer", json());
  spec.style = pre.is_null() ? TokenizerStyle::sentencepiece_bpe : TokenizerStyle::byte_level_bpe;
  if (!pre.is_null()) read_pre_tokenizer(pre, spec, path);
  read_normalizer(j.value("normalizer", json()), spec, spec.style == TokenizerStyle::sentencepiece_bpe, path);
  read_decoder(j.value("decoder", json()), spec, path);
  read_post_processor(j.value("post_processor", json()), spec, path, "post_processor");
  read_config(config_path, spec);
  finish(spec, path);
  return spec;
}

TokenizerSpec tokenizer_spec_from_gpt2_files(const std::string& vocab_path, const std::string& merges_path) {
  TokenizerSpec spec;
  spec.style = TokenizerStyle::byte_level_bpe;
  read_vocab(read_json(vocab_path), spec, vocab_path, "(top level)");
  const auto index = index_of(spec);
  std::istringstream lines(read_file(merges_path));
  std::string line;
  for (size_t n = 1; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    const std::string at = "line " + std::to_string(n);
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      fail(merges_path, at, "'" + line + "' is not two pieces separated by one space");
    spec.merges.emplace_back(piece_id(index, std::string_view(line).substr(0, space), merges_path, at),
                             piece_id(index, std::string_view(line).substr(space + 1), merges_path, at));
  }
  spec.split_regex = kGpt2Regex;
  const uint32_t eot = token_id(spec, "<|endoftext|>");
  if (eot != kNoToken) {  // as Hugging Face's gpt2 tokenizer.json: special, normalized
    AddedToken t;
    t.id = eot;
    t.content = "<|endoftext|>";
    t.special = true;
    t.normalized = true;
    spec.added.push_back(t);
    spec.bos_id = spec.eos_id = eot;
  }
  finish(spec, vocab_path);
  return spec;
}

// ---- SentencePiece tokenizer.model ----
namespace {

// The few ModelProto fields libsentencepiece's API does not expose, read from its serialized bytes (protobuf wire
// format: varint keys, then a varint, 64-bit, length-delimited or 32-bit value).
class ProtoReader {
 public:
  ProtoReader(std::string_view b, const std::string& file) : b_(b), file_(file) {}
  bool next(uint32_t& field, uint32_t& wire) {
    if (at_ >= b_.size()) return false;
    const uint64_t key = varint();
    field = static_cast<uint32_t>(key >> 3);
    wire = static_cast<uint32_t>(key & 7);
    return true;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= b_.size()) bad();
      const uint8_t c = static_cast<uint8_t>(b_[at_++]);
      v |= uint64_t(c & 0x7F) << shift;
      if (!(c & 0x80)) return v;
    }
    bad();
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > b_.size() - at_) bad();
    const std::string_view s = b_.substr(at_, n);
    at_ += n;
    return s;
  }
  void skip(uint32_t wire) {
    if (wire == 0) varint();
    else if (wire == 2) bytes();
    else if (wire == 1 || wire == 5) {
      const size_t n = wire == 1 ? 8 : 4;
      if (n > b_.size() - at_) bad();
      at_ += n;
    } else bad();
  }

 private:
  [[noreturn]] void bad() const { throw Error(ErrorKind::bad_file, file_ + ": a malformed SentencePiece model proto"); }
  std::string_view b_;
  size_t at_ = 0;
  const std::string& file_;
};

struct SpModelInfo {
  int model_type = 1;  // TrainerSpec.model_type: UNIGRAM = 1, BPE = 2, WORD = 3, CHAR = 4
  bool byte_fallback = false;
  std::string normalizer_name;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true;
  std::vector<int> types;  // SentencePiece.type per piece: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, BYTE 6
};

SpModelInfo read_sp_info(std::string_view proto, const std::string& file) {
  SpModelInfo info;
  ProtoReader r(proto, file);
  uint32_t f, w;
  while (r.next(f, w)) {
    if (f == 1 && w == 2) {  // pieces
      ProtoReader p(r.bytes(), file);
      int type = 1;
      while (p.next(f, w)) {
        if (f == 3 && w == 0) type = static_cast<int>(p.varint());
        else p.skip(w);
      }
      info.types.push_back(type);
    } else if (f == 2 && w == 2) {  // trainer_spec
      ProtoReader t(r.bytes(), file);
      while (t.next(f, w)) {
        if (f == 3 && w == 0) info.model_type = static_cast<int>(t.varint());
        else if (f == 35 && w == 0) info.byte_fallback = t.varint() != 0;
        else t.skip(w);
      }
    } else if (f == 3 && w == 2) {  // normalizer_spec
      ProtoReader n(r.bytes(), file);
      while (n.next(f, w)) {
        if (f == 1 && w == 2) info.normalizer_name = std::string(n.bytes());
        else if (f == 3 && w == 0) info.add_dummy_prefix = n.varint() != 0;
        else if (f == 4 && w == 0) info.remove_extra_whitespaces = n.varint() != 0;
        else n.skip(w);
      }
    } else {
      r.skip(w);
    }
  }
  return info;
}

}  // namespace

TokenizerSpec tokenizer_spec_from_sentencepiece(const std::string& model_path, const std::string& config_path) {
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.Load(model_path);
  if (!status.ok()) throw Error(ErrorKind::bad_file, model_path + ": libsentencepiece cannot load it: " + status.ToString());
  const std::string proto = sp.serialized_model_proto();
  const SpModelInfo info = read_sp_info(proto, model_path);
  const int n = sp.GetPieceSize();
  if (info.model_type != 2)
    fail(model_path, "trainer_spec.model_type",
         std::string(info.model_type == 1 ? "unigram" : "type " + std::to_string(info.model_type)) +
             " is not supported (only BPE)");
  if (!info.normalizer_name.empty() && info.normalizer_name != "identity")
    fail(model_path, "normalizer_spec.name", "'" + info.normalizer_name + "' is not supported (only identity)");
  if (info.remove_extra_whitespaces)
    fail(model_path, "normalizer_spec.remove_extra_whitespaces", "true is not supported");
  if (static_cast<int>(info.types.size()) != n) fail(model_path, "pieces", "the piece count disagrees with the library's");

  // As Hugging Face's LlamaConverter: the pieces and scores, merges by score, <0xNN> byte fallback, the unknown and
  // control pieces as special added tokens, user-defined ones as plain added tokens.
  TokenizerSpec spec;
  spec.style = TokenizerStyle::sentencepiece_bpe;
  spec.vocab.resize(n);
  std::vector<float> scores(n);
  for (int id = 0; id < n; ++id) {
    spec.vocab[id] = sp.IdToPiece(id);
    scores[id] = sp.GetScore(id);
    const int type = info.types[id];
    if (type == 2 || type == 3 || type == 4) {
      AddedToken t;
      t.id = static_cast<uint32_t>(id);
      t.content = spec.vocab[id];
      t.special = type != 4;
      spec.added.push_back(t);
    }
    if (type == 6) spec.byte_fallback = true;
  }
  spec.byte_fallback = spec.byte_fallback || info.byte_fallback;
  spec.merges = sentencepiece_merges(spec.vocab, scores);
  spec.add_prefix_space = info.add_dummy_prefix;
  spec.unk_id = sp.unk_id() >= 0 ? static_cast<uint32_t>(sp.unk_id()) : kNoToken;
  spec.bos_id = sp.bos_id() >= 0 ? static_cast<uint32_t>(sp.bos_id()) : kNoToken;
  spec.eos_id = sp.eos_id() >= 0 ? static_cast<uint32_t>(sp.eos_id()) : kNoToken;
  spec.pad_id = sp.pad_id() >= 0 ? static_cast<uint32_t>(sp.pad_id()) : kNoToken;
  spec.add_bos = spec.bos_id != kNoToken;  // LlamaTokenizer's default add_bos_token = true
  read_config(config_path, spec);
  finish(spec, model_path);
  return spec;
}

bool tokenizer_spec_from_dir(const std::string& dir, TokenizerSpec& out) {
  namespace fs = std::filesystem;
  auto has = [&](const char* name) { return fs::is_regular_file(fs::path(dir) / name); };
  auto at = [&](const char* name) { return (fs::path(dir) / name).string(); };
  const std::string config = has("tokenizer_config.json") ? at("tokenizer_config.json") : std::string();
  if (has("tokenizer.json")) {
    out = tokenizer_spec_from_json(at("tokenizer.json"), config);
  } else if (has("vocab.json") && has("merges.txt")) {
    out = tokenizer_spec_from_gpt2_files(at("vocab.json"), at("merges.txt"));
  } else if (has("encoder.json") && has("vocab.bpe")) {
    out = tokenizer_spec_from_gpt2_files(at("encoder.json"), at("vocab.bpe"));
  } else if (has("tokenizer.model")) {
    out = tokenizer_spec_from_sentencepiece(at("tokenizer.model"), config);
  } else {
    return false;
  }
  return true;
}

}  // namespace sqrtdk
