//===- PlotTest.cpp - cpc plot's rasterizer, font, ticks, metrics and chart -----===//
#include "kernels/Tensor.h"
#include "runtime/plot/Canvas.h"
#include "runtime/plot/Chart.h"
#include "runtime/plot/Font.h"
#include "runtime/plot/Metrics.h"

#include "tests/unit/TestUtil.h"

#include <gtest/gtest.h>
#include <png.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <unistd.h>

using namespace cpc;
using cpc::test::errorOf;
using namespace cpc::plot;

namespace {

constexpr Rgb kWhite{255, 255, 255}, kRed{200, 0, 0};

int countColour(const Canvas &canvas, const Rect &area, Rgb colour) {
  int count = 0;
  for (int y = area.y; y < area.bottom(); ++y)
    for (int x = area.x; x < area.right(); ++x)
      count += canvas.pixel(x, y) == colour;
  return count;
}

RunMetrics parse(const std::string &text) {
  std::istringstream in(text);
  return parseMetrics(in, "run.jsonl", plottedKeys());
}

} // namespace

TEST(PlotCanvas, HorizontalLineFillsItsRowAndFadesBesideIt) {
  Canvas canvas(40, 20, kWhite);
  canvas.drawLine({5, 10}, {30, 10}, kRed, 2.0);
  for (int x = 5; x <= 30; ++x)
    EXPECT_EQ(canvas.pixel(x, 10), kRed) << "x " << x;
  Rgb beside = canvas.pixel(15, 9); // half covered: half way from white to red
  EXPECT_EQ(beside, canvas.pixel(15, 11));
  EXPECT_NEAR(beside.r, 228, 1);
  EXPECT_NEAR(beside.g, 128, 1);
  EXPECT_EQ(canvas.pixel(15, 8), kWhite);
  EXPECT_EQ(canvas.pixel(15, 12), kWhite);
  EXPECT_EQ(canvas.pixel(33, 10), kWhite); // past the round end
  EXPECT_EQ(countColour(canvas, {0, 0, 40, 20}, kRed), 26);
}

TEST(PlotCanvas, DiagonalLineHasFullPixelsEveryColumn) {
  Canvas canvas(30, 30, kWhite);
  canvas.drawLine({2, 3}, {27, 21}, kRed, 2.0);
  for (int x = 2; x <= 27; ++x)
    EXPECT_GT(countColour(canvas, {x, 0, 1, 30}, kRed), 0) << "column " << x;
  EXPECT_EQ(canvas.pixel(27, 3), kWhite);
}

TEST(PlotCanvas, PolylineJointsAreDrawnOnce) {
  Canvas straight(60, 20, kWhite), jointed(60, 20, kWhite);
  straight.drawLine({3, 9.3}, {55, 9.3}, kRed, 2.5);
  jointed.drawPolyline({{3, 9.3}, {20, 9.3}, {37, 9.3}, {55, 9.3}}, kRed, 2.5);
  EXPECT_EQ(straight.rgb(), jointed.rgb());
}

TEST(PlotCanvas, ClipKeepsDrawingInside) {
  Canvas canvas(20, 20, kWhite);
  canvas.setClip({5, 5, 10, 10});
  canvas.fillRect({0, 0, 20, 20}, kRed);
  canvas.drawLine({0, 2}, {19, 2}, kRed, 2);
  EXPECT_EQ(countColour(canvas, {0, 0, 20, 20}, kRed), 100);
  EXPECT_EQ(canvas.pixel(4, 4), kWhite);
  canvas.resetClip();
  canvas.fillRect({0, 0, 1, 1}, kRed);
  EXPECT_EQ(canvas.pixel(0, 0), kRed);
}

TEST(PlotCanvas, PngReadsBackAsDrawn) {
  Canvas canvas(13, 7, kWhite);
  canvas.drawLine({1, 1}, {11, 5}, kRed, 2);
  std::string path = testing::TempDir() + "cpc-plot-test-" + std::to_string(getpid()) + ".png";
  writePng(canvas, path);
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_file(&image, path.c_str())) << image.message;
  EXPECT_EQ(image.width, 13u);
  EXPECT_EQ(image.height, 7u);
  image.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(image));
  ASSERT_TRUE(png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) << image.message;
  EXPECT_EQ(pixels, canvas.rgb());
  std::remove(path.c_str());
  EXPECT_NE(errorOf([&] { writePng(canvas, "/nonexistent-dir/run.png"); }).find("/nonexistent-dir/run.png: cannot write"),
            std::string::npos);
}

TEST(PlotFont, GlyphsHaveTheirDrawnBits) {
  for (int c = 0; c < kGlyphColumns; ++c) {
    EXPECT_TRUE(glyphBit('T', c, 0)) << c; // the bar
    EXPECT_EQ(glyphBit('T', c, 6), c == 2) << c;
    EXPECT_EQ(glyphBit('-', c, 3), c >= 1 && c <= 3) << c;
    EXPECT_FALSE(glyphBit(' ', c, 3)) << c;
  }
  EXPECT_TRUE(glyphBit('g', 1, 8)) << "g descends into row 8";
  EXPECT_FALSE(glyphBit('a', 1, 8));
  EXPECT_FALSE(glyphBit('T', 5, 0)) << "outside the glyph";
  for (int c = 0; c < kGlyphColumns; ++c) // bytes outside ASCII 32-126 draw as '?'
    for (int r = 0; r < kGlyphRows; ++r)
      EXPECT_EQ(glyphBit(char(200), c, r), glyphBit('?', c, r));
  int inked = 0; // every printable glyph but space has ink (a table that parses short shows here)
  for (char ch = '!'; ch <= '~'; ++ch, inked = 0) {
    for (int r = 0; r < kGlyphRows; ++r)
      for (int c = 0; c < kGlyphColumns; ++c)
        inked += glyphBit(ch, c, r);
    EXPECT_GT(inked, 0) << ch;
  }
}

TEST(PlotFont, DrawTextScalesEachBit) {
  Canvas canvas(30, 30, kWhite);
  EXPECT_EQ(drawText(canvas, 4, 2, "L1", kRed, 2), textWidth("L1", 2));
  EXPECT_EQ(textWidth("L1", 2), 22);
  EXPECT_EQ(textWidth("", 3), 0);
  // 'L': column 0 set in rows 0-6, row 6 set in columns 0-4, at 2x2 pixels per bit.
  EXPECT_EQ(canvas.pixel(4, 2), kRed);
  EXPECT_EQ(canvas.pixel(5, 15), kRed);
  EXPECT_EQ(canvas.pixel(13, 14), kRed);
  EXPECT_EQ(canvas.pixel(6, 2), kWhite);
  EXPECT_EQ(canvas.pixel(4, 16), kWhite);
  EXPECT_EQ(countColour(canvas, {0, 0, 16, 30}, kRed), 11 * 4);
}

TEST(PlotTicks, NiceStepsAndTicks) {
  EXPECT_DOUBLE_EQ(niceStep(0, 1, 5), 0.2);
  std::vector<double> ticks = ticksOf(0, 1, 0.2);
  ASSERT_EQ(ticks.size(), 6u);
  for (size_t i = 0; i < ticks.size(); ++i)
    EXPECT_NEAR(ticks[i], 0.2 * i, 1e-12);
  EXPECT_DOUBLE_EQ(niceStep(3.7, 4.2, 5), 0.1);
  EXPECT_EQ(tickLabels(ticksOf(3.7, 4.2, 0.1), 0.1),
            (std::vector<std::string>{"3.7", "3.8", "3.9", "4", "4.1", "4.2"}));
  EXPECT_DOUBLE_EQ(niceStep(0, 100, 4), 20); // 25 rounds to 2 x 10
  EXPECT_DOUBLE_EQ(niceStep(0, 100, 2), 50);
  EXPECT_DOUBLE_EQ(niceStep(0, 100, 10), 10);
  EXPECT_DOUBLE_EQ(niceStep(5, 5, 4), 1) << "an empty range still gets a step";
  EXPECT_EQ(ticksOf(-0.13, 0.31, 0.1).size(), 5u); // -0.1 .. 0.3
}

TEST(PlotTicks, LabelsAreCompact) {
  EXPECT_EQ(tickLabels({0, 0.2, 0.4, 0.6, 0.8, 1.0}, 0.2), (std::vector<std::string>{"0", "0.2", "0.4", "0.6", "0.8", "1"}));
  EXPECT_EQ(tickLabels(ticksOf(0, 1.2e-3, 2e-4), 2e-4),
            (std::vector<std::string>{"0", "2e-4", "4e-4", "6e-4", "8e-4", "1e-3", "1.2e-3"}));
  EXPECT_EQ(tickLabels({1000, 1200, 1400}, 200), (std::vector<std::string>{"1k", "1.2k", "1.4k"}));
  EXPECT_EQ(tickLabels({0, 2e6, 4e6}, 2e6), (std::vector<std::string>{"0", "2M", "4M"}));
  EXPECT_EQ(tickLabels({0, 500, 1000, 1500}, 500), (std::vector<std::string>{"0", "500", "1k", "1.5k"}));
  EXPECT_EQ(tickLabels({5e5, 1e6, 1.5e6}, 5e5), (std::vector<std::string>{"500k", "1M", "1.5M"}));
  EXPECT_EQ(tickLabels({0, 5e11, 1e12}, 5e11), (std::vector<std::string>{"0", "5e11", "1e12"}));
  EXPECT_EQ(tickLabels({-10, 0, 10, 20}, 10), (std::vector<std::string>{"-10", "0", "10", "20"}));
  EXPECT_EQ(tickLabels({0.05, 0.1, 0.15}, 0.05), (std::vector<std::string>{"0.05", "0.1", "0.15"}));
}

TEST(PlotMetrics, ReadsCurvesSkippingNonFiniteValues) {
  RunMetrics run = parse("{\"step\": 0, \"loss\": 2.5, \"lr\": 1e-4, \"note\": \"warmup\"}\n"
                         "\n"
                         "{\"step\": 1, \"loss\": null, \"lr\": 2e-4}\n"
                         "{\"step\": 2, \"loss\": NaN, \"lr\": 3e-4, \"grad_norm\": Infinity}\n"
                         "{\"step\": 3, \"loss\": 2.0, \"lr\": 4e-4, \"grad_norm\": 0.5}\r\n");
  EXPECT_EQ(run.stepCount, 4u);
  EXPECT_EQ(run.firstStep, 0);
  EXPECT_EQ(run.lastStep, 3);
  ASSERT_EQ(run.curves["loss"].size(), 2u);
  EXPECT_EQ(run.curves["loss"][1].step, 3);
  EXPECT_DOUBLE_EQ(run.curves["loss"][1].value, 2.0);
  EXPECT_EQ(run.curves["lr"].size(), 4u);
  EXPECT_EQ(run.curves["grad_norm"].size(), 1u);
  EXPECT_EQ(run.curves.count("samples_per_s"), 0u) << "a key never written has no curve";
  EXPECT_EQ(run.curves.count("note"), 0u);
}

TEST(PlotMetrics, LaterLineForAStepReplacesIt) {
  RunMetrics run = parse("{\"step\": 0, \"loss\": 3}\n{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\": 1}\n"
                         "{\"step\": 1, \"loss\": 5}\n");
  ASSERT_EQ(run.curves["loss"].size(), 3u);
  EXPECT_DOUBLE_EQ(run.curves["loss"][1].value, 5);
  EXPECT_EQ(run.stepCount, 3u);
}

TEST(PlotMetrics, ErrorsNameTheLine) {
  EXPECT_EQ(errorOf([] { parse("{\"step\": 0}\n{\"step\": 1}\n{\"step\": 2, \"loss\"\n"); }).rfind("run.jsonl:3: not JSON: ", 0),
            0u);
  EXPECT_EQ(errorOf([] { parse("{\"step\": 0}\n{\"step\": 1, \"loss\": \"high\"}\n"); }),
            "run.jsonl:2: \"loss\" is not a number: \"high\"");
  EXPECT_EQ(errorOf([] { parse("{\"step\": 0}\n{\"loss\": 1}\n"); }), "run.jsonl:2: no \"step\"");
  EXPECT_EQ(errorOf([] { parse("{\"step\": 1.5}\n"); }), "run.jsonl:1: \"step\" is not a whole number: 1.5");
  EXPECT_EQ(errorOf([] { parse("[1, 2]\n"); }), "run.jsonl:1: not a JSON object: [1,2]");
  EXPECT_EQ(errorOf([] { parse("\n\n"); }), "run.jsonl: no steps (no line with a \"step\")");
  EXPECT_EQ(errorOf([] { parse("{\"step\": 0, \"comment\": \"NaN here\", \"loss\": 1}\n"); }), "")
      << "NaN inside a string is left alone";
  EXPECT_EQ(errorOf([] { readMetricsFile("/nonexistent-dir/m.jsonl", plottedKeys()); }),
            "/nonexistent-dir/m.jsonl: cannot read: No such file or directory");
}

TEST(PlotChart, EachRunGetsItsColourInThePanelsItHasDataFor) {
  RunMetrics a = parse("{\"step\": 0, \"loss\": 2, \"lr\": 1e-4, \"grad_norm\": 1}\n"
                       "{\"step\": 9, \"loss\": 1, \"lr\": 5e-4, \"grad_norm\": 0.5}\n");
  RunMetrics b = parse("{\"step\": 0, \"loss\": 2.2, \"grad_norm\": 2}\n{\"step\": 5, \"loss\": 1.5, \"grad_norm\": 3}\n");
  a.name = "a.jsonl";
  b.name = "b.jsonl";
  ChartOptions options;
  Canvas chart = renderChart({a, b}, options);
  ChartLayout layout = layoutChart(options.width, options.height, {"a.jsonl", "b.jsonl"});
  ASSERT_EQ(layout.panels.size(), 4u);
  const Rect &loss = layout.panels[0], &lr = layout.panels[1], &gradNorm = layout.panels[2], &throughput = layout.panels[3];
  EXPECT_GT(countColour(chart, loss, runColour(0)), 100);
  EXPECT_GT(countColour(chart, loss, runColour(1)), 50);
  EXPECT_GT(countColour(chart, lr, runColour(0)), 100);
  EXPECT_EQ(countColour(chart, lr, runColour(1)), 0) << "b has no lr";
  EXPECT_GT(countColour(chart, gradNorm, runColour(1)), 50);
  EXPECT_EQ(countColour(chart, throughput, runColour(0)) + countColour(chart, throughput, runColour(1)), 0);
  EXPECT_GT(countColour(chart, throughput, kNoDataColour), 20) << "the empty panel says no data";
  EXPECT_EQ(countColour(chart, loss, kNoDataColour), 0);
  // The legend, above the panels, shows both colours.
  Rect legend{0, 0, options.width, loss.y};
  EXPECT_GT(countColour(chart, legend, runColour(0)), 0);
  EXPECT_GT(countColour(chart, legend, runColour(1)), 0);
}

TEST(PlotChart, SmallChartsUseSmallText) {
  EXPECT_EQ(layoutChart(1200, 800, {"a"}).textScale, 2);
  EXPECT_EQ(layoutChart(640, 480, {"a"}).textScale, 1);
  EXPECT_EQ(layoutChart(2400, 1700, {"a"}).textScale, 4);
  Canvas chart = renderChart({parse("{\"step\": 3, \"loss\": 1}\n")}, {kMinChartWidth, kMinChartHeight});
  Rect loss = layoutChart(kMinChartWidth, kMinChartHeight, {"run.jsonl"}).panels[0];
  EXPECT_GT(countColour(chart, loss, runColour(0)), 4) << "one step draws a dot";
}

TEST(PlotChart, ExtremeValuesStillDraw) {
  // Denormal spans, +-1e300, flat zeros, a lone step past 2^53, an overflowing value (left out).
  const char *files[] = {"{\"step\": 0, \"loss\": 5e-324}\n{\"step\": 1, \"loss\": -5e-324}\n",
                         "{\"step\": 0, \"loss\": 1e300, \"lr\": 0}\n{\"step\": 1, \"loss\": -1e300, \"lr\": 0}\n",
                         "{\"step\": 9223372036854775807, \"loss\": 1, \"lr\": 1e308}\n",
                         "{\"step\": 0, \"loss\": 1}\n{\"step\": 1, \"loss\": 1.000000000000001}\n"};
  for (const char *text : files) {
    RunMetrics run = parse(text);
    Canvas chart(1, 1, kWhite);
    EXPECT_EQ(errorOf([&] { chart = renderChart({run}, {}); }), "") << text;
    EXPECT_GT(countColour(chart, layoutChart(1200, 800, {"run.jsonl"}).panels[0], runColour(0)), 4) << text;
  }
  EXPECT_EQ(parse(files[2]).curves.count("lr"), 0u) << "1e308 counts as an overflow";
}
