#include "state/index_util.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace dispatch::state {
namespace {

std::vector<uint64_t> Ids(const SortedIdSet& set) { return {set.begin(), set.end()}; }

TEST(SortedIdSet, HoldsEachIdOnceInOrderWhateverTheOrderOfItsInserts) {
  SortedIdSet set{5, 3, 5};
  EXPECT_EQ(Ids(set), (std::vector<uint64_t>{3, 5}));
  const std::vector<uint64_t> after = {6, 7, 7, 9};  // appended: all larger
  set.Insert(after.begin(), after.end());
  EXPECT_EQ(Ids(set), (std::vector<uint64_t>{3, 5, 6, 7, 9}));
  const std::vector<uint64_t> between = {8, 4, 9, 1};  // interleaved, one already held
  set.Insert(between.begin(), between.end());
  EXPECT_EQ(Ids(set), (std::vector<uint64_t>{1, 3, 4, 5, 6, 7, 8, 9}));
  const std::vector<uint64_t> last_again = {9, 10};  // starts at the largest held
  set.Insert(last_again.begin(), last_again.end());
  EXPECT_EQ(Ids(set), (std::vector<uint64_t>{1, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_TRUE(set.contains(4));
  EXPECT_FALSE(set.contains(2));
  EXPECT_FALSE(set.contains(11));
  set.clear();
  EXPECT_TRUE(set.empty());
  EXPECT_FALSE(set.contains(4));
}

TEST(SortedIdSet, AgreesWithAnOrderedSetOverRandomRuns) {
  std::mt19937_64 random(17);
  for (int round = 0; round < 200; ++round) {
    SortedIdSet set;
    std::set<uint64_t> expected;
    for (int insert = 0; insert < 8; ++insert) {
      // Runs as releases bring them: mostly increasing, sometimes not.
      std::vector<uint64_t> run(random() % 20);
      uint64_t next = random() % 200;
      for (uint64_t& id : run) id = random() % 4 == 0 ? random() % 200 : next++;
      set.Insert(run.begin(), run.end());
      expected.insert(run.begin(), run.end());
      ASSERT_EQ(Ids(set), std::vector<uint64_t>(expected.begin(), expected.end()));
    }
    for (uint64_t id = 0; id < 220; ++id) ASSERT_EQ(set.contains(id), expected.count(id) == 1);
  }
}

}  // namespace
}  // namespace dispatch::state
