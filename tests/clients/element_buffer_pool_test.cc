// ElementBufferPool: the memory of sent elements, kept for later ones.
#include "clients/task_producer.h"

#include <gtest/gtest.h>

#include <string>

namespace dispatch::clients {
namespace {

std::string Buffer(size_t size) { return std::string(size, 'b'); }

TEST(ElementBufferPool, GivesBackTheBufferItKeptWithItsMemory) {
  ElementBufferPool pool(1 << 20);
  std::string kept = Buffer(100000);
  const char* memory = kept.data();
  pool.Keep(std::move(kept));
  EXPECT_GE(pool.bytes(), 100000u);  // counted by capacity

  std::string taken;
  pool.Take(&taken);
  EXPECT_EQ(taken.data(), memory);
  EXPECT_EQ(taken.size(), 100000u);
  EXPECT_EQ(pool.bytes(), 0u);

  std::string nothing = "unchanged";
  pool.Take(&nothing);  // empty pool: the caller's string stays as it was
  EXPECT_EQ(nothing, "unchanged");
}

TEST(ElementBufferPool, KeepsSmallBuffersButNoneWithoutMemoryAndNothingPastItsLimit) {
  ElementBufferPool pool(250000);
  // A small element's buffer is kept (allocating and freeing thousands at
  // once cost more); before, only buffers of 4 KiB or more were.
  std::string small = Buffer(100);
  const char* memory = small.data();
  pool.Keep(std::move(small));
  EXPECT_GE(pool.bytes(), 100u);
  std::string taken;
  pool.Take(&taken);
  EXPECT_EQ(taken.data(), memory);
  EXPECT_EQ(pool.bytes(), 0u);

  pool.Keep(std::string("inline"));  // its bytes live in the string itself
  pool.Keep(std::string());
  EXPECT_EQ(pool.bytes(), 0u);
  pool.Keep(Buffer(100000));
  pool.Keep(Buffer(100000));
  const uint64_t two = pool.bytes();
  EXPECT_GE(two, 200000u);
  pool.Keep(Buffer(100000));  // would pass 250000
  EXPECT_EQ(pool.bytes(), two);
}

}  // namespace
}  // namespace dispatch::clients
