// Small SVG helpers for the explainers' pictures: XML escaping, a colour map, and line charts with a log or
// linear x axis. Output is plain SVG 1.1 text (one <svg> root, every element closed), readable in any browser.
#pragma once

#include <string>
#include <vector>

namespace sqrtdk {

// Escapes &, <, >, " and ' for use in XML text and attribute values; control bytes (< 0x20, 0x7f), which XML 1.0
// forbids, become the text \xNN. Bytes >= 0x80 pass through: callers give UTF-8 (byte-level token labels escape
// lone non-ASCII bytes themselves, since a lone UTF-8 byte is not valid XML text).
std::string xml_escape(const std::string& text);

// Colour of t in [0, 1] (clamped) on a perceptually ordered dark-blue → teal → yellow map (viridis-like,
// linear between 5 stops), as "#rrggbb".
std::string colormap_hex(double t);

// printf into a std::string (for numbers in SVG text).
std::string svg_fmt(const char* format, double value);

struct LineSeries {
  std::string label;
  std::vector<double> x, y;
  std::string color = "#1f77b4";
  bool dashed = false;
  bool markers = true;
};

struct LinePanel {
  std::string title, x_label, y_label;
  bool log_x = false;             // log10 x axis, ticks at the data's x values
  double y_min = 0, y_max = 1;    // fixed y range (caller picks it so scaled and unscaled share one)
  std::vector<LineSeries> series;
};

// Panels side by side under one title, each with axes, ticks, grid, and a legend of its series.
std::string svg_line_panels(const std::string& title, const std::vector<LinePanel>& panels);

}  // namespace sqrtdk
