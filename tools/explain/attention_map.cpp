#include "tools/explain/attention_map.h"

#include <sqrtdk/error.h>

#include "tools/explain/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace sqrtdk {

AttentionMap capture_attention_map(Session& session, std::span<const uint32_t> tokens, int layer,
                                   float scale_override) {
  const ModelConfig& c = session.model().config();
  if (layer < 0 || layer >= static_cast<int>(c.n_layers))
    throw Error("attention map: layer " + std::to_string(layer) + " outside [0, " + std::to_string(c.n_layers) + ")");
  if (!(scale_override >= 0.0f) || std::isinf(scale_override))
    throw Error("attention map: scale " + std::to_string(scale_override) + " must be finite and > 0 (0: default)");
  session.reset();
  session.capture_attention(layer, scale_override);
  struct Off {  // the capture forces the unfused path: never leave it on for later calls
    Session& s;
    ~Off() { s.capture_attention(-1); }
  } off{session};
  session.prefill(tokens);

  AttentionMap map;
  map.layer = layer;
  map.scale = scale_override > 0 ? scale_override : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  map.n_heads = c.n_heads;
  map.n_keys = session.n_past();
  map.n_queries = tokens.size();
  map.probs = session.captured_attention();
  if (map.probs.size() != map.n_heads * map.n_queries * map.n_keys)
    throw Error("attention map: captured " + std::to_string(map.probs.size()) + " probabilities, expected " +
                std::to_string(map.n_heads) + " heads × " + std::to_string(map.n_queries) + " queries × " +
                std::to_string(map.n_keys) + " keys");
  return map;
}

double mean_row_entropy(const AttentionMap& map, size_t head) {
  double total = 0;
  for (size_t i = 0; i < map.n_queries; ++i) {
    const float* p = map.row(head, i);
    for (size_t j = 0; j < map.n_keys; ++j)
      if (p[j] > 0) total -= double{p[j]} * std::log(double{p[j]});
  }
  return map.n_queries ? total / static_cast<double>(map.n_queries) : 0.0;
}

double mean_uniform_entropy(const AttentionMap& map) {
  const size_t pos0 = map.n_keys - map.n_queries;
  double total = 0;
  for (size_t i = 0; i < map.n_queries; ++i)
    total += std::log(static_cast<double>(map.causal ? pos0 + i + 1 : map.n_keys));
  return map.n_queries ? total / static_cast<double>(map.n_queries) : 0.0;
}

std::string attention_map_svg(const AttentionMap& map, const std::vector<std::string>& token_labels,
                              const std::vector<size_t>& heads, const std::string& title) {
  if (token_labels.size() != map.n_keys)
    throw Error("attention map: " + std::to_string(token_labels.size()) + " token labels for " +
                std::to_string(map.n_keys) + " keys");
  for (size_t h : heads)
    if (h >= map.n_heads)
      throw Error("attention map: head " + std::to_string(h) + " outside [0, " + std::to_string(map.n_heads) + ")");
  const size_t nq = map.n_queries, nk = map.n_keys, pos0 = nk - nq;
  // Cell size: the panel's grid about 320 px wide, cells 3 .. 22 px; labels only every `step` tokens when
  // cells are too small for 7 px text.
  const int cell = std::clamp(static_cast<int>(320 / std::max<size_t>(nk, 1)), 3, 22);
  const int font = std::min(11, std::max(7, cell - 3));
  const size_t step = cell >= 8 ? 1 : static_cast<size_t>((8 + cell - 1) / cell);
  std::vector<std::string> labels;
  size_t max_chars = 1;
  for (const auto& l : token_labels) {
    labels.push_back(xml_escape(l));
    max_chars = std::max(max_chars, l.size());
  }
  const int label_w = static_cast<int>(std::min<size_t>(max_chars, 12)) * (font * 6 / 10 + 1) + 8;
  const int grid_w = cell * static_cast<int>(nk), grid_h = cell * static_cast<int>(nq);
  const int panel_w = label_w + grid_w + 24, panel_h = 22 + label_w + grid_h + 16;
  const int n_cols = static_cast<int>(std::min<size_t>(4, std::max<size_t>(heads.size(), 1)));
  const int n_rows = static_cast<int>((heads.size() + n_cols - 1) / n_cols);
  const int top = 40, bar_w = 80;
  const int W = std::max(n_cols * panel_w + bar_w, 420), H = top + std::max(n_rows, 1) * panel_h + 10;
  const bool tooltips = heads.size() * nq * nk <= 40000;  // keeps big maps' files small

  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
    << "\" font-family=\"sans-serif\" font-size=\"" << font << "\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"10\" y=\"22\" font-size=\"14\">" << xml_escape(title) << "</text>\n";
  for (size_t hi = 0; hi < heads.size(); ++hi) {
    const size_t h = heads[hi];
    const int px = static_cast<int>(hi % n_cols) * panel_w, py = top + static_cast<int>(hi / n_cols) * panel_h;
    const int gx = label_w, gy = 22 + label_w;  // grid origin inside the panel
    s << "<g class=\"head\" transform=\"translate(" << px << "," << py << ")\">\n";
    s << "<text x=\"" << gx << "\" y=\"14\" font-size=\"12\">head " << h << ": mean entropy "
      << svg_fmt("%.3f", mean_row_entropy(map, h)) << " nats</text>\n";
    // Column labels (keys), rotated, above the grid; row labels (queries) left of it.
    for (size_t j = 0; j < nk; j += step) {
      const int x = gx + static_cast<int>(j) * cell + cell / 2 + font / 3, y = gy - 4;
      s << "<text x=\"" << x << "\" y=\"" << y << "\" transform=\"rotate(-90 " << x << " " << y << ")\">" << labels[j]
        << "</text>\n";
    }
    for (size_t i = 0; i < nq; i += step)
      s << "<text x=\"" << gx - 4 << "\" y=\"" << gy + static_cast<int>(i) * cell + cell / 2 + font / 3
        << "\" text-anchor=\"end\">" << labels[pos0 + i] << "</text>\n";
    for (size_t i = 0; i < nq; ++i) {
      const float* p = map.row(h, i);
      for (size_t j = 0; j < nk; ++j) {
        const bool masked = map.causal && j > pos0 + i;
        s << "<rect class=\"c\" x=\"" << gx + static_cast<int>(j) * cell << "\" y=\"" << gy + static_cast<int>(i) * cell
          << "\" width=\"" << cell << "\" height=\"" << cell << "\" fill=\""
          << (masked ? std::string("#eeeeee") : colormap_hex(p[j])) << "\"";
        if (tooltips)
          s << "><title>" << labels[pos0 + i] << " → " << labels[j] << ": "
            << (masked ? std::string("masked") : svg_fmt("%.4f", p[j])) << "</title></rect>\n";
        else
          s << "/>\n";
      }
    }
    s << "<rect x=\"" << gx << "\" y=\"" << gy << "\" width=\"" << grid_w << "\" height=\"" << grid_h
      << "\" fill=\"none\" stroke=\"#888\"/>\n</g>\n";
  }
  // Colour bar: probability 0 (bottom) .. 1 (top), 5 ticks.
  const int bx = W - bar_w + 20, by = top + 30, bh = 160;
  s << "<defs><linearGradient id=\"cbar\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (int i = 0; i <= 8; ++i)
    s << "<stop offset=\"" << svg_fmt("%.3f", i / 8.0) << "\" stop-color=\"" << colormap_hex(i / 8.0) << "\"/>";
  s << "</linearGradient></defs>\n<g class=\"colorbar\"><text x=\"" << bx << "\" y=\"" << by - 10
    << "\" font-size=\"11\">p</text><rect x=\"" << bx << "\" y=\"" << by << "\" width=\"14\" height=\"" << bh
    << "\" fill=\"url(#cbar)\" stroke=\"#888\"/>\n";
  for (int i = 0; i <= 4; ++i)
    s << "<text x=\"" << bx + 18 << "\" y=\"" << by + bh - i * bh / 4 + 4 << "\" font-size=\"10\">"
      << svg_fmt("%.2f", i / 4.0) << "</text>\n";
  s << "<rect x=\"" << bx << "\" y=\"" << by + bh + 14 << "\" width=\"14\" height=\"10\" fill=\"#eeeeee\" "
    << "stroke=\"#888\"/><text x=\"" << bx + 18 << "\" y=\"" << by + bh + 23 << "\" font-size=\"10\">masked</text></g>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace sqrtdk
