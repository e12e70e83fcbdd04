#include "train/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace seqtape {

namespace {
std::string fmt(double v, const char* f = "%.1f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}
}  // namespace

namespace {

// The plot area and the data range it shows: data coordinates to SVG pixels.
struct Frame {
  static constexpr double W = 720, H = 420, L = 70, R = 20, T = 40, B = 50;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  bool logy = false;
  double a = 0, b = 1;  // the y range after the log transform

  double ty(double y) const { return logy ? std::log10(y) : y; }
  double px(double x) const { return L + (x - x0) / (x1 - x0) * (W - L - R); }
  double py(double y) const { return H - B - (ty(y) - a) / (b - a) * (H - T - B); }
};

// The finite points' range; x0 stays infinite when there is none.
Frame frame_of(const std::vector<Series>& series) {
  Frame f;
  for (const auto& s : series)
    for (auto [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      f.x0 = std::min(f.x0, x), f.x1 = std::max(f.x1, x);
      f.y0 = std::min(f.y0, y), f.y1 = std::max(f.y1, y);
    }
  if (!std::isfinite(f.x0)) return f;
  if (f.x1 == f.x0) f.x1 = f.x0 + 1;
  f.logy = f.y0 > 0 && f.y1 / f.y0 > 20;
  f.a = f.ty(f.y0), f.b = f.ty(f.y1);
  if (f.b == f.a) f.b = f.a + 1;
  return f;
}

void axes(std::ostringstream& o, const Frame& f) {
  const double W = Frame::W, H = Frame::H, L = Frame::L, R = Frame::R, T = Frame::T, B = Frame::B;
  o << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B
    << "\" stroke=\"black\"/>\n<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\""
    << H - B << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {  // axis ticks
    double fx = f.x0 + (f.x1 - f.x0) * i / 4, fy = f.a + (f.b - f.a) * i / 4;
    double yv = f.logy ? std::pow(10, fy) : fy;
    o << "<text x=\"" << f.px(fx) << "\" y=\"" << H - B + 18 << "\" text-anchor=\"middle\">"
      << fmt(fx, "%.0f") << "</text>\n";
    o << "<text x=\"" << L - 6 << "\" y=\"" << f.py(yv) + 4 << "\" text-anchor=\"end\">"
      << fmt(yv, yv < 0.1 ? "%.3g" : "%.3f") << "</text>\n";
    o << "<line x1=\"" << L << "\" y1=\"" << f.py(yv) << "\" x2=\"" << W - R << "\" y2=\""
      << f.py(yv) << "\" stroke=\"#ddd\"/>\n";
  }
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 12
    << "\" text-anchor=\"middle\">step</text>\n"
    << "<text x=\"16\" y=\"" << (T + H - B) / 2 << "\" transform=\"rotate(-90 16 "
    << (T + H - B) / 2 << ")\" text-anchor=\"middle\">loss (nats per token"
    << (f.logy ? ", log scale" : "") << ")</text>\n";
}

// Colour plus dash pattern and a text legend: never colour alone.
void curves(std::ostringstream& o, const Frame& f, const std::vector<Series>& series) {
  const double W = Frame::W, R = Frame::R, T = Frame::T;
  const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c"};
  const char* dashes[] = {"", "6 3", "2 2"};
  for (size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    o << "<polyline fill=\"none\" stroke-width=\"1.6\" stroke=\"" << colours[k % 3] << "\""
      << (dashes[k % 3][0] ? std::string(" stroke-dasharray=\"") + dashes[k % 3] + "\"" : "")
      << " points=\"";
    for (auto [x, y] : s.points)
      if (std::isfinite(y)) o << fmt(f.px(x)) << "," << fmt(f.py(y)) << " ";
    o << "\"/>\n";
    double ly = T + 14 + 16.0 * static_cast<double>(k);
    o << "<line x1=\"" << W - R - 150 << "\" y1=\"" << ly - 4 << "\" x2=\"" << W - R - 120
      << "\" y2=\"" << ly - 4 << "\" stroke=\"" << colours[k % 3] << "\" stroke-width=\"2\""
      << (dashes[k % 3][0] ? std::string(" stroke-dasharray=\"") + dashes[k % 3] + "\"" : "")
      << "/><text x=\"" << W - R - 114 << "\" y=\"" << ly << "\">" << escape(s.label)
      << "</text>\n";
  }
}

}  // namespace

std::string loss_curve_svg(const std::vector<Series>& series, const std::string& title) {
  const double W = Frame::W, H = Frame::H;
  const Frame f = frame_of(series);
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
    << escape(title) << "</text>\n";
  if (!std::isfinite(f.x0)) {
    o << "<text x=\"" << W / 2 << "\" y=\"" << H / 2
      << "\" text-anchor=\"middle\">no data</text></svg>\n";
    return o.str();
  }
  axes(o, f);
  curves(o, f, series);
  o << "</svg>\n";
  return o.str();
}

std::vector<Series> read_loss_series(const std::string& metrics_csv) {
  Series tr{"train loss", {}}, va{"validation loss", {}};
  std::ifstream in(metrics_csv);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string step, kind, loss;
    if (!std::getline(ls, step, ',') || !std::getline(ls, kind, ',') ||
        !std::getline(ls, loss, ','))
      continue;
    try {
      (kind == "valid" ? va : tr).points.emplace_back(std::stod(step), std::stod(loss));
    } catch (...) {
      continue;  // a row this reader does not understand is skipped, not fatal
    }
  }
  std::vector<Series> out{tr};
  if (!va.points.empty()) out.push_back(va);
  return out;
}

}  // namespace seqtape
