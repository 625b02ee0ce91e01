// RenderSvg: the document is well formed (balanced tags, escaped text), every series gets
// one polyline in every panel with a colour fixed by its name, ticks are round numbers,
// and non-finite points (and non-positive ones on a log axis) are skipped.
#include "mxtrain/plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "mxtrain/error.h"

namespace mxtrain {
namespace {

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Whether printf's "nan" / "inf" leaked into the document ("dominant" is not one).
bool HasNonFiniteText(const std::string& svg) {
  return std::regex_search(svg, std::regex("(^|[^a-z])(nan|inf)", std::regex::icase));
}

// Checks that every element is closed in order and that no text holds a raw '<' or '&'
// that is not an entity; returns "" or the first problem.
std::string TagProblem(const std::string& svg) {
  std::vector<std::string> open;
  for (size_t i = 0; i < svg.size(); ++i) {
    if (svg[i] == '&') {
      const size_t semi = svg.find(';', i);
      const std::string entity = svg.substr(i, semi == std::string::npos ? 0 : semi - i + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" &&
          entity != "&apos;") {
        return "bad entity at " + std::to_string(i);
      }
      continue;
    }
    if (svg[i] == '>') return "stray '>' at " + std::to_string(i);
    if (svg[i] != '<') continue;
    const size_t end = svg.find('>', i);
    if (end == std::string::npos) return "unclosed tag at " + std::to_string(i);
    const std::string tag = svg.substr(i + 1, end - i - 1);
    if (tag.find('<') != std::string::npos) return "'<' inside a tag at " + std::to_string(i);
    // Attribute values must be quoted in pairs.
    if (Count(tag, "\"") % 2 != 0) return "unbalanced quotes in <" + tag + ">";
    i = end;
    if (tag.back() == '/') continue;  // self-closing
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "</" + name + "> does not close its element";
      open.pop_back();
      continue;
    }
    open.push_back(tag.substr(0, tag.find_first_of(" \n")));
  }
  return open.empty() ? "" : "<" + open.back() + "> is never closed";
}

// The stroke colour of each polyline, in order.
std::vector<std::string> PolylineStrokes(const std::string& svg) {
  std::vector<std::string> strokes;
  const std::regex re("<polyline[^>]* stroke=\"(#[0-9a-f]{6})\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    strokes.push_back((*it)[1]);
  }
  return strokes;
}

// The points attribute of each polyline, in order.
std::vector<std::string> PolylinePoints(const std::string& svg) {
  std::vector<std::string> points;
  const std::regex re("<polyline[^>]* points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    points.push_back((*it)[1]);
  }
  return points;
}

std::vector<PlotPanel> TwoPanels() {
  PlotPanel loss{"Training loss", "step", "loss", {}, true};
  loss.series.push_back({"bf16", {0, 1, 2, 3}, {4.0, 2.0, 1.0, 0.5}});
  loss.series.push_back({"mxfp8", {0, 1, 2, 3}, {4.1, 2.1, 1.1, 0.6}});
  PlotPanel time{"Step time", "step", "ms", {}, false};
  time.series.push_back({"mxfp8", {0, 1, 2, 3}, {10, 11, 9, 10}});
  time.series.push_back({"fp32 <ref> & co", {0, 1, 2, 3}, {30, 31, 29, 30}});
  time.series.push_back({"bf16", {0, 1, 2, 3}, {20, 21, 19, 20}});
  return {loss, time};
}

TEST(PlotTest, IsAWellFormedSvgDocument) {
  const std::string svg = RenderSvg(TwoPanels());
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("width=\"1040\" height=\"360\""), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(TagProblem(svg), "");
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("href"), std::string::npos);  // self-contained
}

TEST(PlotTest, EverySeriesHasAPolylineAndALegendEntry) {
  const std::string svg = RenderSvg(TwoPanels());
  EXPECT_EQ(Count(svg, "<polyline"), 5u);
  for (const std::string name : {"bf16", "mxfp8", "fp32 &lt;ref&gt; &amp; co"}) {
    EXPECT_GE(Count(svg, ">" + name + "</text>"), 1u) << name;   // legend
    EXPECT_GE(Count(svg, "<title>" + name + "</title>"), 1u) << name;  // polyline tooltip
  }
  EXPECT_EQ(svg.find("<ref>"), std::string::npos);  // escaped
  for (const std::string title : {"Training loss", "Step time", ">step<", ">loss<", ">ms<"}) {
    EXPECT_NE(svg.find(title), std::string::npos) << title;
  }
}

TEST(PlotTest, ColoursFollowTheSeriesName) {
  const std::vector<std::string> strokes = PolylineStrokes(RenderSvg(TwoPanels()));
  ASSERT_EQ(strokes.size(), 5u);
  // Panel 1: bf16, mxfp8. Panel 2: mxfp8, fp32, bf16.
  EXPECT_NE(strokes[0], strokes[1]);
  EXPECT_EQ(strokes[2], strokes[1]);
  EXPECT_EQ(strokes[4], strokes[0]);
  EXPECT_NE(strokes[3], strokes[0]);
  EXPECT_NE(strokes[3], strokes[1]);
}

TEST(PlotTest, NonFinitePointsAreSkipped) {
  PlotPanel p{"p", "x", "y", {}, false};
  p.series.push_back({"s", {0, 1, 2, NAN, 4, 5}, {1, NAN, 2, 3, INFINITY, -INFINITY}});
  p.series.push_back({"all nan", {0, 1}, {NAN, NAN}});
  const std::string svg = RenderSvg({p});
  EXPECT_EQ(TagProblem(svg), "");
  const std::vector<std::string> points = PolylinePoints(svg);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(Count(points[0], ","), 2u) << points[0];  // (0, 1) and (2, 2)
  EXPECT_EQ(points[1], "");
  EXPECT_FALSE(HasNonFiniteText(svg));
}

TEST(PlotTest, LogAxisSkipsNonPositiveValuesAndTicksAtPowersOfTen) {
  PlotPanel p{"p", "x", "y", {}, true};
  p.series.push_back({"s", {0, 1, 2, 3}, {0.0, -1.0, 0.01, 100.0}});
  const std::string svg = RenderSvg({p});
  const std::vector<std::string> points = PolylinePoints(svg);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(Count(points[0], ","), 2u) << points[0];
  for (const std::string tick : {">0.01<", ">0.1<", ">1<", ">10<", ">100<"}) {
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  }
}

TEST(PlotTest, LinearTicksAreRoundNumbers) {
  PlotPanel p{"p", "x", "y", {}, false};
  p.series.push_back({"s", {0.0, 97.0}, {0.013, 0.0871}});
  const std::string svg = RenderSvg({p});
  for (const std::string tick : {">0<", ">20<", ">40<", ">100<", ">0.02<", ">0.08<"}) {
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  }
  // Every tick label is a number with at most two significant decimals here.
  const std::regex label("dominant-baseline=\"middle\">([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator();
       ++it) {
    const std::string text = (*it)[1];
    if (text == "s") continue;  // the legend
    EXPECT_TRUE(std::regex_match(text, std::regex("-?[0-9]+(\\.[0-9]{1,2})?"))) << text;
  }
}

TEST(PlotTest, DegenerateInputs) {
  EXPECT_EQ(TagProblem(RenderSvg({})), "");
  PlotPanel empty{"nothing", "x", "y", {}, false};
  PlotPanel flat{"flat", "x", "y", {{"one point", {3}, {5}}}, false};
  PlotPanel log_empty{"log", "x", "y", {{"zeros", {1, 2}, {0, 0}}}, true};
  const std::string svg = RenderSvg({empty, flat, log_empty}, 200, 150);
  EXPECT_EQ(TagProblem(svg), "");
  EXPECT_NE(svg.find("width=\"600\" height=\"150\""), std::string::npos);
  EXPECT_EQ(Count(svg, "<circle"), 1u);  // a single point is still visible
  EXPECT_FALSE(HasNonFiniteText(svg));
}

TEST(PlotTest, RejectsBadInput) {
  PlotPanel p{"p", "x", "y", {{"s", {1, 2, 3}, {1, 2}}}, false};
  EXPECT_THROW(RenderSvg({p}), Error);
  EXPECT_THROW(RenderSvg({}, 10, 10), Error);
}

}  // namespace
}  // namespace mxtrain
