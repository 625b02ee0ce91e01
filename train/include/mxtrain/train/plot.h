// RenderSvg: line charts as one self-contained SVG document, for the loss and timing curves
// `mxtrain train` writes next to its summary.json. No dependencies and no scripts: the file
// opens in any browser.
#pragma once

#include <string>
#include <vector>

namespace mxtrain {

// One line: points (x[i], y[i]). x and y must have the same length.
struct PlotSeries {
  std::string name;
  std::vector<double> x, y;
};

// One chart. With log_y the y axis is logarithmic (ticks at powers of ten) and points with
// y <= 0 are skipped like non-finite ones.
struct PlotPanel {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  bool log_y = false;
};

// A self-contained SVG with the panels side by side, each panel_width x panel_height
// pixels: axes, ticks at nice round numbers (1, 2 or 5 times a power of ten) with grid
// lines, a legend, and one polyline per series, its colour chosen by series name so that a
// name has the same colour in every panel. Non-finite points are skipped (the line joins
// their neighbours); a panel without any finite point gets axes over [0, 1]. All text is
// XML-escaped. Throws Error when a series has x and y of different lengths, or when the
// panel size is below 120 x 100.
std::string RenderSvg(const std::vector<PlotPanel>& panels, int panel_width = 520,
                      int panel_height = 360);

}  // namespace mxtrain
