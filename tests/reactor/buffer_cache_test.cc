// BufferCache: copies hold exactly the bytes given; a buffer given back is
// reused (the same memory) by a copy it has room for, the smallest such one
// first; what is kept never passes the bound.
#include "reactor/buffer_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace dispatch::reactor {
namespace {

TEST(BufferCache, AGivenBackBufferIsReusedForACopyItHasRoomFor) {
  BufferCache cache(10 << 20);
  const std::string big(4 << 20, 'b');
  auto first = cache.Copy(big);
  EXPECT_EQ(*first, big);
  const char* memory = first->data();
  cache.GiveBack(std::move(first));
  EXPECT_EQ(cache.kept(), 1u);

  const std::string smaller(3 << 20, 's');
  auto second = cache.Copy(smaller);
  EXPECT_EQ(*second, smaller);
  EXPECT_EQ(second->data(), memory) << "a kept buffer with room was not reused";
  EXPECT_EQ(cache.reused(), 1u);
  EXPECT_EQ(cache.kept(), 0u);

  const std::string larger((4 << 20) + 1, 'l');
  cache.GiveBack(std::move(second));
  auto third = cache.Copy(larger);
  EXPECT_EQ(*third, larger);
  EXPECT_NE(third->data(), memory) << "a buffer without room was used";
  EXPECT_EQ(cache.kept(), 1u);
}

TEST(BufferCache, TheSmallestBufferWithRoomIsTakenAndTheBoundHolds) {
  BufferCache cache(7 << 20);
  auto a = cache.Copy(std::string(2 << 20, 'a'));
  auto b = cache.Copy(std::string(4 << 20, 'b'));
  auto c = cache.Copy(std::string(3 << 20, 'c'));
  const char* small = a->data();
  cache.GiveBack(std::move(b));
  cache.GiveBack(std::move(a));
  cache.GiveBack(std::move(c));  // 4 + 2 MiB kept already: 3 more would pass 7
  EXPECT_EQ(cache.kept(), 2u);
  EXPECT_LE(cache.kept_bytes(), size_t{7} << 20);
  auto d = cache.Copy(std::string(1 << 20, 'd'));
  EXPECT_EQ(d->data(), small) << "not the smallest buffer with room";
  EXPECT_EQ(*d, std::string(1 << 20, 'd'));
}

}  // namespace
}  // namespace dispatch::reactor
