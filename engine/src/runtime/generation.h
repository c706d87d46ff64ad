// Generation: one sequence's per-token logic, shared by generate() (driving a Session) and the Scheduler (driving a
// Batch): sampling, end and stop tokens, stop strings found across token boundaries, the text made final so far,
// and the limits. The driver owns the model calls; Generation only sees each step's logits.
#pragma once

#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>
#include <sqrtdk/tokenizer.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk {

// The generated text as it grows: final UTF-8 from a TokenStreamer, with stop strings found across token
// boundaries and the tail that may still begin one held back from the caller.
class TextStopper {
 public:
  TextStopper(const Tokenizer& tokenizer, const std::vector<std::string>& stops)
      : streamer_(tokenizer, /*skip_special=*/true), stops_(stops) {
    for (const auto& s : stops_) {
      if (s.empty()) throw Error("generate: empty stop string");
      longest_ = std::max(longest_, s.size());
    }
  }
  // Adds a token's text; true when a stop string was reached (text() is then cut before it).
  bool push(uint32_t id) { return add(streamer_.push(id)); }
  bool finish() { return add(streamer_.finish()); }
  // Text that is final and not yet handed out (all of it after finish() or a stop).
  std::string_view take(bool all) {
    size_t end = text_.size();
    if (!all && !stopped_) end -= held_back();
    const std::string_view out = std::string_view(text_).substr(given_, end - given_);
    given_ = end;
    return out;
  }
  std::string& text() { return text_; }

 private:
  bool add(const std::string& piece) {
    if (stopped_ || piece.empty()) return stopped_;
    const size_t from = text_.size() > longest_ ? text_.size() - longest_ + 1 : 0;
    text_ += piece;
    size_t cut = std::string::npos;
    for (const auto& s : stops_) cut = std::min(cut, text_.find(s, from));
    if (cut != std::string::npos) {
      text_.resize(std::max(cut, given_));
      stopped_ = true;
    }
    return stopped_;
  }
  // Length of the longest tail of text_ that is a proper prefix of a stop string.
  size_t held_back() const {
    size_t best = 0;
    for (const auto& s : stops_)
      for (size_t n = std::min(s.size() - 1, text_.size() - given_); n > best; --n)
        if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
          best = n;
          break;
        }
    return best;
  }

  TokenStreamer streamer_;
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string text_;
  size_t given_ = 0;
  bool stopped_ = false;
};

class Generation {
 public:
  // Throws sqrtdk::Error as generate() does (stop strings or streamed text without a tokenizer, an empty stop
  // string, bad sampling options at the first sample).
  Generation(const Model& model, const GenerateOptions& options)
      : sampler_(options.sampling), max_new_tokens_(options.max_new_tokens), stop_tokens_(options.stop_tokens) {
    const Tokenizer* tokenizer = model.tokenizer();
    if (!tokenizer && (!options.stop_strings.empty() || options.on_text))
      throw Error(model.path() + ": stop strings and streamed text need a tokenizer, and this model has none");
    if (options.stop_at_eos) {
      if (tokenizer) ends_ = tokenizer->stop_ids();
      else if (model.config().eos_id != kNoToken) ends_.push_back(model.config().eos_id);
    }
    if (tokenizer) text_.emplace(*tokenizer, options.stop_strings);
  }

  // Samples the next token from `logits` and applies the stopping rules in generate()'s order (on_token, stop
  // string, end token, stop token, max_new_tokens, context_full: the context has no room for another token).
  // Returns true when generation is done (result().stop_reason says why).
  bool next(std::span<const float> logits, bool context_full, const std::function<bool(uint32_t)>& on_token = {}) {
    const uint32_t token = sampler_.sample(logits);
    last_ = token;
    result_.tokens.push_back(token);
    bool done = true;
    if (on_token && !on_token(token)) result_.stop_reason = StopReason::callback;
    else if (text_ && text_->push(token)) result_.stop_reason = StopReason::stop_string;
    else if (contains(ends_, token)) result_.stop_reason = StopReason::eos;
    else if (contains(stop_tokens_, token)) result_.stop_reason = StopReason::stop_token;
    else if (result_.tokens.size() >= max_new_tokens_) result_.stop_reason = StopReason::max_tokens;
    else if (context_full) result_.stop_reason = StopReason::context_full;
    else done = false;
    if (text_ && done && result_.stop_reason != StopReason::stop_string && text_->finish())
      result_.stop_reason = StopReason::stop_string;  // the last bytes completed a stop string
    return done;
  }

  uint32_t last_token() const { return last_; }
  bool has_text() const { return text_.has_value(); }
  // Text made final since the last call (whole UTF-8, never part of a possible stop string); all of it once done.
  std::string_view take_text(bool done) { return text_ ? text_->take(done) : std::string_view(); }
  GenerateResult& result() { return result_; }
  // The result, its text moved in.
  GenerateResult finish() {
    if (text_) result_.text = std::move(text_->text());
    return std::move(result_);
  }

 private:
  static bool contains(const std::vector<uint32_t>& v, uint32_t t) { return std::find(v.begin(), v.end(), t) != v.end(); }

  Sampler sampler_;
  size_t max_new_tokens_;
  std::vector<uint32_t> stop_tokens_;
  std::vector<uint32_t> ends_;
  std::optional<TextStopper> text_;
  GenerateResult result_;
  uint32_t last_ = 0;
};

}  // namespace sqrtdk
