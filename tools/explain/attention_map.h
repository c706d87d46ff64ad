// Attention maps (sqrtdk attention-map): the softmax probabilities of one layer for a prompt, captured through
// Session::capture_attention, with per-head entropies and an SVG heatmap (queries × keys, one panel per head).
#pragma once

#include <sqrtdk/session.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sqrtdk {

struct AttentionMap {
  int layer = 0;
  float scale = 0;  // the scale used on q·k (1/√head_dim unless overridden)
  bool causal = true;
  size_t n_heads = 0, n_queries = 0, n_keys = 0;
  std::vector<float> probs;  // [n_heads][n_queries][n_keys]; query i sits at position n_keys - n_queries + i

  const float* row(size_t head, size_t query) const { return probs.data() + (head * n_queries + query) * n_keys; }
};

// Resets the session, prefills `tokens` while capturing `layer` (scale_override > 0 replaces 1/√head_dim for
// that layer), then turns the capture off again. Throws sqrtdk::Error on a bad layer or bad tokens.
AttentionMap capture_attention_map(Session& session, std::span<const uint32_t> tokens, int layer,
                                   float scale_override = 0.0f);

// Mean over the head's query rows of −Σ p ln p (nats).
double mean_row_entropy(const AttentionMap& map, size_t head);

// The same for a row that spreads uniformly over the keys it can see (causal: query i sees pos0 + i + 1 keys):
// the most a row's entropy can be, for comparison in titles.
double mean_uniform_entropy(const AttentionMap& map);

// One SVG: a heatmap panel per head in `heads` (4 per row), cells coloured by probability on a fixed 0 .. 1
// scale (so maps made with different scales compare directly), masked cells light grey, rows and columns
// labelled with token_labels (n_keys of them; XML-escaped here), each panel titled with its mean entropy, and a
// colour bar. Every panel has exactly n_queries × n_keys cells, each a <rect class="c">.
std::string attention_map_svg(const AttentionMap& map, const std::vector<std::string>& token_labels,
                              const std::vector<size_t>& heads, const std::string& title);

}  // namespace sqrtdk
