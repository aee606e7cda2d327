#include "bench/summary.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace dispatch::bench {
namespace {

Figure OnRatio(const std::string& name, double value, double floor) {
  Figure f;
  f.figure = name;
  f.value = value;
  f.floor = floor;
  f.target = 1.0;
  f.target_on_ratio = true;
  return f;
}

Figure OnValue(const std::string& name, double value) {
  Figure f;
  f.figure = name;
  f.value = value;
  f.target = 100;
  f.at_least = true;
  return f;
}

TEST(MedianFigures, PicksTheRunWithTheMedianRatioWholeWhenTheTargetIsOnTheRatio) {
  // Values alone would pick 600 (floor 500, ratio 1.2); the median ratio is
  // the run of 700 against 700.
  std::vector<Figure> medians = MedianFigures({OnRatio("rt", 600, 500), OnRatio("rt", 700, 700),
                                               OnRatio("rt", 500, 600)});
  ASSERT_EQ(medians.size(), 1u);
  EXPECT_EQ(medians[0].value, 700);
  EXPECT_EQ(medians[0].floor, 700);
  EXPECT_EQ(medians[0].runs, 3u);
  EXPECT_DOUBLE_EQ(medians[0].judged_min, 500.0 / 600);
  EXPECT_DOUBLE_EQ(medians[0].judged_max, 1.2);
  EXPECT_TRUE(medians[0].met());
}

TEST(MedianFigures, OneFigurePerNameInTheOrderNamesFirstAppear) {
  std::vector<Figure> medians =
      MedianFigures({OnValue("b", 3), OnValue("a", 10), OnValue("b", 1), OnValue("a", 30),
                     OnValue("b", 2), OnValue("a", 20)});
  ASSERT_EQ(medians.size(), 2u);
  EXPECT_EQ(medians[0].figure, "b");
  EXPECT_EQ(medians[0].value, 2);
  EXPECT_EQ(medians[1].figure, "a");
  EXPECT_EQ(medians[1].value, 20);
}

TEST(MedianFigures, AnEvenCountTakesTheLowerMiddleAndOneRunIsItsOwnMedian) {
  std::vector<Figure> medians =
      MedianFigures({OnValue("x", 4), OnValue("x", 1), OnValue("x", 3), OnValue("x", 2),
                     OnValue("once", 7)});
  ASSERT_EQ(medians.size(), 2u);
  EXPECT_EQ(medians[0].value, 2);
  EXPECT_EQ(medians[0].runs, 4u);
  EXPECT_EQ(medians[1].value, 7);
  EXPECT_EQ(medians[1].runs, 1u);
  EXPECT_EQ(medians[1].judged_min, 7);
  EXPECT_EQ(medians[1].judged_max, 7);
}

TEST(FiguresMarkdown, ARowPerFigureWithItsFloorRatioVerdictAndRange) {
  Figure met = OnRatio("round trip", 600, 500);
  met.target = 1.5;
  met.target_text = "<= commit | 4 hops";
  met.runs = 3;
  met.judged_min = 1.1;
  met.judged_max = 1.3;
  Figure missed = OnValue("closures/s", 42);
  const std::string table = FiguresMarkdown({met, missed});
  EXPECT_NE(table.find("| figure | value | floor | ratio | target | met |"), std::string::npos)
      << table;
  EXPECT_NE(table.find("| round trip | 600 | 500 | 1.20 | <= commit \\| 4 hops | yes | 3: "
                       "1.10\u2013" "1.30 |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| closures/s | 42.0 | - | - |  | **no** | 1: 0.00\u2013" "0.00 |"),
            std::string::npos)
      << table;
}

TEST(ReadFigures, ReadsBackTheJsonArrayAllWritesWithRunsAndRange) {
  Figure f = OnRatio("read 1 MiB", 4000, 4400);
  f.runs = 3;
  f.judged_min = 0.8;
  f.judged_max = 0.95;
  const std::string path = ::testing::TempDir() + "/figures.json";
  {
    std::ofstream out(path);
    out << FiguresJson({f, OnValue("x", 1)});
  }
  std::vector<Figure> back = ReadFigures(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].figure, "read 1 MiB");
  EXPECT_EQ(back[0].value, 4000);
  EXPECT_EQ(back[0].floor, 4400);
  EXPECT_EQ(back[0].runs, 3u);
  EXPECT_DOUBLE_EQ(back[0].judged_min, 0.8);
  EXPECT_DOUBLE_EQ(back[0].judged_max, 0.95);
  EXPECT_EQ(back[1].figure, "x");
  EXPECT_EQ(back[1].runs, 1u);
}

}  // namespace
}  // namespace dispatch::bench
