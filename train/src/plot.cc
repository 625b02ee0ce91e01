// The SVG line chart writer. Layout per panel: a title row, the plot area with a margin for
// the y tick labels on the left and the x tick labels plus the axis label below; the legend
// sits in the plot area's top-right corner on a translucent box.
#include "mxtrain/train/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "mxtrain/error.h"

namespace mxtrain {
namespace {

// Tableau 10: distinguishable, and readable on white.
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

constexpr double kLeft = 64, kRight = 16, kTop = 32, kBottom = 48;  // plot area margins
constexpr int kTargetTicks = 6;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        out += (static_cast<unsigned char>(c) < 0x20 && c != '\t') ? ' ' : c;
    }
  }
  return out;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// 1, 2, 5 or 10 times a power of ten, nearest to x (rounded) or not below it.
double NiceNumber(double x, bool round) {
  const double exp = std::floor(std::log10(x));
  const double f = x / std::pow(10.0, exp);
  double nice;
  if (round) {
    nice = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  } else {
    nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  }
  return nice * std::pow(10.0, exp);
}

struct Axis {
  double lo, hi;              // the axis range (in log10 units for a log axis)
  std::vector<double> ticks;  // tick positions, same units
  std::vector<std::string> labels;
};

std::string TickLabel(double v, double step) {
  char buf[32];
  if (v == 0) return "0";
  const double mag = std::fabs(v);
  if (mag >= 1e6 || mag < 1e-4 || !std::isfinite(step) || !(step > 0)) {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  } else {
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  }
  return buf;
}

// Linear axis over [lo, hi] widened to whole tick steps (Heckbert's "nice numbers").
Axis LinearAxis(double lo, double hi) {
  if (!(hi > lo)) {  // one value, or no points at all
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double step = NiceNumber(NiceNumber(hi - lo, false) / (kTargetTicks - 1), true);
  // A span past the double range: just the two ends.
  if (!std::isfinite(step) || !(step > 0))
    return Axis{lo, hi, {lo, hi}, {TickLabel(lo, hi - lo), TickLabel(hi, hi - lo)}};
  Axis a;
  a.lo = std::floor(lo / step) * step;
  a.hi = std::ceil(hi / step) * step;
  for (int i = 0;; ++i) {
    const double t = a.lo + i * step;
    if (t > a.hi + step * 1e-9 || i > 100) break;
    a.ticks.push_back(t);
    a.labels.push_back(TickLabel(std::fabs(t) < step * 1e-9 ? 0.0 : t, step));
  }
  return a;
}

// Log axis in log10 units over whole decades, ticks every `stride` decades; over at most
// two decades (a typical loss curve) also at 2 and 5 times each power of ten.
Axis LogAxis(double lo, double hi) {
  Axis a;
  a.lo = std::floor(std::log10(lo));
  a.hi = std::ceil(std::log10(hi));
  if (a.hi <= a.lo) a.hi = a.lo + 1;
  const int stride = std::max(1, static_cast<int>(std::ceil((a.hi - a.lo) / (kTargetTicks + 2))));
  const bool minor = a.hi - a.lo <= 2;
  for (double e = a.lo; e <= a.hi; e += stride) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m != 1.0 && (!minor || e == a.hi)) continue;
      const double v = m * std::pow(10.0, e);
      a.ticks.push_back(std::log10(v));
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%g", v);
      a.labels.push_back(buf);
    }
  }
  return a;
}

// Series name -> palette index, in order of first appearance across all panels.
std::map<std::string, int> Colours(const std::vector<PlotPanel>& panels) {
  std::map<std::string, int> colour;
  for (const PlotPanel& p : panels) {
    for (const PlotSeries& s : p.series) colour.emplace(s.name, static_cast<int>(colour.size()));
  }
  return colour;
}

void RenderPanel(const PlotPanel& panel, int index, double width, double height,
                 const std::map<std::string, int>& colour, std::string* out) {
  const auto usable = [&](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!panel.log_y || y > 0);
  };
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const PlotSeries& s : panel.series) {
    MXTRAIN_CHECK(s.x.size() == s.y.size(), "plot series '", s.name, "' in panel '", panel.title,
                  "' has ", s.x.size(), " x values and ", s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!usable(s.x[i], s.y[i])) continue;
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  }
  if (x_lo > x_hi) x_lo = 0, x_hi = 1;
  if (y_lo > y_hi) y_lo = panel.log_y ? 1 : 0, y_hi = panel.log_y ? 10 : 1;
  const Axis xa = LinearAxis(x_lo, x_hi);
  const Axis ya = panel.log_y ? LogAxis(y_lo, y_hi) : LinearAxis(y_lo, y_hi);

  const double left = index * width + kLeft, right = (index + 1) * width - kRight;
  const double top = kTop, bottom = height - kBottom;
  const auto px = [&](double x) { return left + (x - xa.lo) / (xa.hi - xa.lo) * (right - left); };
  const auto py = [&](double y) {
    const double v = panel.log_y ? std::log10(y) : y;
    return bottom - (v - ya.lo) / (ya.hi - ya.lo) * (bottom - top);
  };
  const auto py_axis = [&](double v) {
    return bottom - (v - ya.lo) / (ya.hi - ya.lo) * (bottom - top);
  };
  const std::string clip = "clip" + std::to_string(index);

  *out += "<g class=\"panel\">\n";
  *out += "<clipPath id=\"" + clip + "\"><rect x=\"" + Num(left) + "\" y=\"" + Num(top) +
          "\" width=\"" + Num(right - left) + "\" height=\"" + Num(bottom - top) +
          "\"/></clipPath>\n";
  *out += "<text x=\"" + Num((left + right) / 2) + "\" y=\"20\" text-anchor=\"middle\" " +
          "font-size=\"14\" font-weight=\"bold\">" + Escape(panel.title) + "</text>\n";
  // Grid lines and tick labels.
  for (size_t i = 0; i < xa.ticks.size(); ++i) {
    const std::string x = Num(px(xa.ticks[i]));
    *out += "<line x1=\"" + x + "\" y1=\"" + Num(top) + "\" x2=\"" + x + "\" y2=\"" + Num(bottom) +
            "\" stroke=\"#e0e0e0\"/>\n";
    *out += "<text x=\"" + x + "\" y=\"" + Num(bottom + 16) + "\" text-anchor=\"middle\">" +
            Escape(xa.labels[i]) + "</text>\n";
  }
  for (size_t i = 0; i < ya.ticks.size(); ++i) {
    const std::string y = Num(py_axis(ya.ticks[i]));
    *out += "<line x1=\"" + Num(left) + "\" y1=\"" + y + "\" x2=\"" + Num(right) + "\" y2=\"" + y +
            "\" stroke=\"#e0e0e0\"/>\n";
    *out += "<text x=\"" + Num(left - 6) + "\" y=\"" + y +
            "\" text-anchor=\"end\" dominant-baseline=\"middle\">" + Escape(ya.labels[i]) +
            "</text>\n";
  }
  // Axes and their labels.
  *out += "<rect x=\"" + Num(left) + "\" y=\"" + Num(top) + "\" width=\"" + Num(right - left) +
          "\" height=\"" + Num(bottom - top) + "\" fill=\"none\" stroke=\"#333333\"/>\n";
  *out += "<text x=\"" + Num((left + right) / 2) + "\" y=\"" + Num(height - 10) +
          "\" text-anchor=\"middle\">" + Escape(panel.x_label) + "</text>\n";
  const std::string ylx = Num(index * width + 14), yly = Num((top + bottom) / 2);
  *out += "<text x=\"" + ylx + "\" y=\"" + yly +
          "\" text-anchor=\"middle\" transform=\"rotate(-90 " + ylx + " " + yly + ")\">" +
          Escape(panel.y_label) + "</text>\n";
  // The lines, clipped to the plot area.
  for (const PlotSeries& s : panel.series) {
    const char* stroke = kPalette[colour.at(s.name) % kPaletteSize];
    std::string points;
    int count = 0;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!usable(s.x[i], s.y[i])) continue;
      if (count++) points += ' ';
      points += Num(px(s.x[i])) + "," + Num(py(s.y[i]));
    }
    *out += "<polyline clip-path=\"url(#" + clip + ")\" fill=\"none\" stroke=\"" + stroke +
            "\" stroke-width=\"1.5\" points=\"" + points + "\"><title>" + Escape(s.name) +
            "</title></polyline>\n";
    if (count == 1) {  // a polyline of one point draws nothing
      const size_t comma = points.find(',');
      *out += "<circle cx=\"" + points.substr(0, comma) + "\" cy=\"" + points.substr(comma + 1) +
              "\" r=\"2.5\" fill=\"" + stroke + "\"/>\n";
    }
  }
  // Legend: one row per series, top right.
  if (!panel.series.empty()) {
    size_t longest = 0;
    for (const PlotSeries& s : panel.series) longest = std::max(longest, s.name.size());
    const double box_w = 34 + 7.0 * static_cast<double>(std::min<size_t>(longest, 40));
    const double box_h = 8 + 16.0 * static_cast<double>(panel.series.size());
    const double bx = right - box_w - 6, by = top + 6;
    *out += "<rect x=\"" + Num(bx) + "\" y=\"" + Num(by) + "\" width=\"" + Num(box_w) +
            "\" height=\"" + Num(box_h) +
            "\" fill=\"#ffffff\" fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n";
    for (size_t i = 0; i < panel.series.size(); ++i) {
      const PlotSeries& s = panel.series[i];
      const double y = by + 12 + 16.0 * static_cast<double>(i);
      *out += "<line x1=\"" + Num(bx + 6) + "\" y1=\"" + Num(y) + "\" x2=\"" + Num(bx + 26) +
              "\" y2=\"" + Num(y) + "\" stroke=\"" + kPalette[colour.at(s.name) % kPaletteSize] +
              "\" stroke-width=\"2\"/>\n";
      *out += "<text x=\"" + Num(bx + 30) + "\" y=\"" + Num(y) +
              "\" dominant-baseline=\"middle\">" + Escape(s.name) + "</text>\n";
    }
  }
  *out += "</g>\n";
}

}  // namespace

std::string RenderSvg(const std::vector<PlotPanel>& panels, int panel_width, int panel_height) {
  MXTRAIN_CHECK(panel_width >= 120 && panel_height >= 100, "plot panel size ", panel_width, "x",
                panel_height, " is below the minimum of 120x100");
  const size_t n = std::max<size_t>(panels.size(), 1);
  const double width = panel_width, height = panel_height;
  const std::map<std::string, int> colour = Colours(panels);
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(panel_width * n) + "\" height=\"" +
                    std::to_string(panel_height) + "\" viewBox=\"0 0 " +
                    std::to_string(panel_width * n) + " " + std::to_string(panel_height) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  for (size_t i = 0; i < panels.size(); ++i) {
    RenderPanel(panels[i], static_cast<int>(i), width, height, colour, &out);
  }
  out += "</svg>\n";
  return out;
}

}  // namespace mxtrain
