#include "bench/summary.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dispatch::bench
