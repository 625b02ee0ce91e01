// RenderSvg: the document is well formed (balanced tags, escaped text), every series gets
// one polyline in every panel with a colour fixed by its name, ticks are round numbers,
// and non-finite points (and non-positive ones on a log axis) are skipped.
#include "mxtrain/train/plot.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
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
  for (const std::string word : {"nan", "inf", "NAN", "INF"}) {
    for (size_t at = svg.find(word); at != std::string::npos; at = svg.find(word, at + 1)) {
      if (at == 0 || !std::isalpha(static_cast<unsigned char>(svg[at - 1]))) return true;
    }
  }
  return false;
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

// The value of attribute `attr` of each <tag ...> element, in order.
std::vector<std::string> Attributes(const std::string& svg, const std::string& tag,
                                    const std::string& attr) {
  std::vector<std::string> values;
  for (size_t at = svg.find("<" + tag + " "); at != std::string::npos;
       at = svg.find("<" + tag + " ", at + 1)) {
    const std::string element = svg.substr(at, svg.find('>', at) - at);
    const size_t v = element.find(" " + attr + "=\"");
    if (v == std::string::npos) {
      values.push_back("(none)");
      continue;
    }
    const size_t begin = v + attr.size() + 3;
    values.push_back(element.substr(begin, element.find('"', begin) - begin));
  }
  return values;
}

// The text of each <text ...>...</text> element with the given attribute text, in order.
std::vector<std::string> Texts(const std::string& svg, const std::string& attribute) {
  std::vector<std::string> texts;
  for (size_t at = svg.find("<text "); at != std::string::npos; at = svg.find("<text ", at + 1)) {
    const size_t close = svg.find('>', at);
    if (svg.substr(at, close - at).find(attribute) == std::string::npos) continue;
    texts.push_back(svg.substr(close + 1, svg.find("</text>", close) - close - 1));
  }
  return texts;
}

bool IsDecimal(const std::string& s, int max_decimals) {
  size_t i = s.size() > 0 && s[0] == '-' ? 1 : 0;
  const size_t int_begin = i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == int_begin) return false;
  if (i == s.size()) return true;
  if (s[i] != '.') return false;
  const size_t frac_begin = ++i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  const size_t decimals = i - frac_begin;
  return i == s.size() && decimals >= 1 && decimals <= static_cast<size_t>(max_decimals);
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
    EXPECT_GE(Count(svg, ">" + name + "</text>"), 1u) << name;         // legend
    EXPECT_GE(Count(svg, "<title>" + name + "</title>"), 1u) << name;  // polyline tooltip
  }
  EXPECT_EQ(svg.find("<ref>"), std::string::npos);  // escaped
  for (const std::string title : {"Training loss", "Step time", ">step<", ">loss<", ">ms<"}) {
    EXPECT_NE(svg.find(title), std::string::npos) << title;
  }
}

TEST(PlotTest, ColoursFollowTheSeriesName) {
  const std::vector<std::string> strokes = Attributes(RenderSvg(TwoPanels()), "polyline", "stroke");
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
  p.series.push_back({"none finite", {0, 1}, {NAN, NAN}});
  const std::string svg = RenderSvg({p});
  EXPECT_EQ(TagProblem(svg), "");
  const std::vector<std::string> points = Attributes(svg, "polyline", "points");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(Count(points[0], ","), 2u) << points[0];  // (0, 1) and (2, 2)
  EXPECT_EQ(points[1], "");
  EXPECT_FALSE(HasNonFiniteText(svg));
}

TEST(PlotTest, LogAxisSkipsNonPositiveValuesAndTicksAtPowersOfTen) {
  PlotPanel p{"p", "x", "y", {}, true};
  p.series.push_back({"s", {0, 1, 2, 3}, {0.0, -1.0, 0.01, 100.0}});
  const std::string svg = RenderSvg({p});
  const std::vector<std::string> points = Attributes(svg, "polyline", "points");
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(Count(points[0], ","), 2u) << points[0];
  EXPECT_EQ(Texts(svg, "text-anchor=\"end\""),
            (std::vector<std::string>{"0.01", "0.1", "1", "10", "100"}));
  // Over two decades or less, also 2x and 5x.
  p.series[0].y = {0.5, 0.3, 2.0, 3.0};
  EXPECT_EQ(Texts(RenderSvg({p}), "text-anchor=\"end\""),
            (std::vector<std::string>{"0.1", "0.2", "0.5", "1", "2", "5", "10"}));
}

TEST(PlotTest, LinearTicksAreRoundNumbers) {
  PlotPanel p{"p", "x", "y", {}, false};
  p.series.push_back({"s", {0.0, 97.0}, {0.013, 0.0871}});
  const std::string svg = RenderSvg({p});
  for (const std::string tick : {">0<", ">20<", ">40<", ">100<", ">0.02<", ">0.08<"}) {
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  }
  // Every y tick label is a number with at most two decimals here.
  const std::vector<std::string> labels = Texts(svg, "text-anchor=\"end\"");
  EXPECT_GE(labels.size(), 5u);
  for (const std::string& text : labels) EXPECT_TRUE(IsDecimal(text, 2)) << text;
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
