// CRC32C: standard check values, incremental use, and the hardware and table
// implementations agreeing on every length and alignment.
#include "common/checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace dispatch {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
}

TEST(Crc32c, MatchesKnownVectors) {
  // RFC 3720 (iSCSI) B.4 test vectors.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32c, ExtendEqualsChecksumOfConcatenation) {
  const std::string a = "hello, ";
  const std::string b = "journal";
  EXPECT_EQ(Crc32cExtend(Crc32c(a), b.data(), b.size()), Crc32c(a + b));
}

TEST(Crc32c, HardwareAndTableAgreeOnEveryLengthAndOffset) {
  std::mt19937 rng(7);
  std::string data(1100, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t length = 0; length + offset <= data.size(); length += 13) {
      const char* p = data.data() + offset;
      ASSERT_EQ(Crc32c(p, length), Crc32cExtendPortable(0, p, length))
          << "offset " << offset << " length " << length;
    }
  }
}

TEST(Crc32c, DetectsEverySingleBitFlip) {
  std::string data(300, 'a');
  const uint32_t original = Crc32c(data);
  for (size_t i = 0; i < data.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      data[i] ^= static_cast<char>(1 << bit);
      ASSERT_NE(Crc32c(data), original) << "byte " << i << " bit " << bit;
      data[i] ^= static_cast<char>(1 << bit);
    }
  }
}

}  // namespace
}  // namespace dispatch
