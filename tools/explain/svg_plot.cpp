#include "tools/explain/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace sqrtdk {

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (ch >= 32 && ch != 127) {  // UTF-8 passes through
          out.push_back(static_cast<char>(ch));
        } else {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", ch);
          out += buf;
        }
    }
  }
  return out;
}

std::string colormap_hex(double t) {
  // Five stops sampled from matplotlib's viridis (0, .25, .5, .75, 1): ordered in lightness, readable in grey.
  static const double stops[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(std::isnan(t) ? 0.0 : t, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  char buf[8];
  int rgb[3];
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<int>(std::lround(stops[i][c] + f * (stops[i + 1][c] - stops[i][c])));
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buf;
}

std::string svg_fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string svg_line_panels(const std::string& title, const std::vector<LinePanel>& panels) {
  const double PW = 430, L = 62, R = 16, T = 56, plot_h = 260, axis_h = 48;
  size_t max_series = 0;
  for (const auto& p : panels) max_series = std::max(max_series, p.series.size());
  const double legend_h = 16.0 * static_cast<double>(max_series) + 8;
  const double W = PW * static_cast<double>(std::max<size_t>(1, panels.size()));
  const double H = T + plot_h + axis_h + legend_h;
  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(title)
    << "</text>\n";
  for (size_t pi = 0; pi < panels.size(); ++pi) {
    const LinePanel& p = panels[pi];
    const double x0 = PW * static_cast<double>(pi) + L, x1 = PW * static_cast<double>(pi + 1) - R;
    const double y0 = T + plot_h, y1 = T;
    // x range: the data's, padded; log10 if asked.
    std::vector<double> xs;
    for (const auto& ser : p.series) xs.insert(xs.end(), ser.x.begin(), ser.x.end());
    std::sort(xs.begin(), xs.end());
    xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
    auto tx = [&](double v) { return p.log_x ? std::log10(std::max(v, 1e-300)) : v; };
    double lo = xs.empty() ? 0 : tx(xs.front()), hi = xs.empty() ? 1 : tx(xs.back());
    if (hi <= lo) hi = lo + 1;
    const double pad = 0.05 * (hi - lo);
    lo -= pad, hi += pad;
    auto X = [&](double v) { return x0 + (tx(v) - lo) / (hi - lo) * (x1 - x0); };
    auto Y = [&](double v) {
      const double c = std::clamp(v, p.y_min, p.y_max);
      return y0 - (c - p.y_min) / (p.y_max - p.y_min) * (y0 - y1);
    };
    s << "<g class=\"panel\">\n<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << T - 12
      << "\" text-anchor=\"middle\" font-size=\"13\">" << xml_escape(p.title) << "</text>\n";
    s << "<rect x=\"" << x0 << "\" y=\"" << y1 << "\" width=\"" << x1 - x0 << "\" height=\"" << y0 - y1
      << "\" fill=\"none\" stroke=\"#444\"/>\n";
    for (double v : xs)
      s << "<line x1=\"" << X(v) << "\" y1=\"" << y1 << "\" x2=\"" << X(v) << "\" y2=\"" << y0
        << "\" stroke=\"#e4e4e4\"/><text x=\"" << X(v) << "\" y=\"" << y0 + 16 << "\" text-anchor=\"middle\">"
        << svg_fmt("%g", v) << "</text>\n";
    for (int i = 0; i <= 5; ++i) {
      const double v = p.y_min + (p.y_max - p.y_min) * i / 5;
      s << "<line x1=\"" << x0 << "\" y1=\"" << Y(v) << "\" x2=\"" << x1 << "\" y2=\"" << Y(v)
        << "\" stroke=\"#e4e4e4\"/><text x=\"" << x0 - 6 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">"
        << svg_fmt("%.3g", v) << "</text>\n";
    }
    s << "<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << y0 + 36 << "\" text-anchor=\"middle\">"
      << xml_escape(p.x_label) << (p.log_x ? " (log scale)" : "") << "</text>\n";
    const double ymid = (y0 + y1) / 2, xl = x0 - 46;
    s << "<text x=\"" << xl << "\" y=\"" << ymid << "\" transform=\"rotate(-90 " << xl << " " << ymid
      << ")\" text-anchor=\"middle\">" << xml_escape(p.y_label) << "</text>\n";
    for (size_t si = 0; si < p.series.size(); ++si) {
      const LineSeries& ser = p.series[si];
      const std::string dash = ser.dashed ? "\" stroke-dasharray=\"6 4" : "";
      s << "<polyline class=\"series\" fill=\"none\" stroke=\"" << ser.color << "\" stroke-width=\"2" << dash
        << "\" points=\"";
      for (size_t i = 0; i < std::min(ser.x.size(), ser.y.size()); ++i) s << X(ser.x[i]) << "," << Y(ser.y[i]) << " ";
      s << "\"/>\n";
      if (ser.markers)
        for (size_t i = 0; i < std::min(ser.x.size(), ser.y.size()); ++i)
          s << "<circle cx=\"" << X(ser.x[i]) << "\" cy=\"" << Y(ser.y[i]) << "\" r=\"3\" fill=\"" << ser.color
            << "\"><title>" << xml_escape(ser.label) << ": x = " << svg_fmt("%g", ser.x[i])
            << ", y = " << svg_fmt("%.4g", ser.y[i]) << "</title></circle>\n";
      const double ly = y0 + axis_h + 10 + 16.0 * static_cast<double>(si);
      s << "<line x1=\"" << x0 << "\" y1=\"" << ly - 4 << "\" x2=\"" << x0 + 28 << "\" y2=\"" << ly - 4
        << "\" stroke=\"" << ser.color << "\" stroke-width=\"2" << dash << "\"/><text x=\"" << x0 + 34 << "\" y=\""
        << ly << "\">" << xml_escape(ser.label) << "</text>\n";
    }
    s << "</g>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace sqrtdk
