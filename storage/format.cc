#include "storage/format.h"

#include <cstdio>

#include "common/checksum.h"

namespace dispatch::storage {
namespace {

uint32_t TaggedChecksum(char tag, uint64_t id, std::string_view body) {
  unsigned char head[9];
  head[0] = static_cast<unsigned char>(tag);
  for (int i = 0; i < 8; ++i) head[1 + i] = static_cast<unsigned char>(id >> (8 * i));
  return Crc32cExtend(Crc32c(head, sizeof(head)), body.data(), body.size());
}

}  // namespace

uint32_t RecordChecksum(uint64_t seq, std::string_view body) {
  return TaggedChecksum('J', seq, body);
}

uint32_t SnapshotChecksum(uint64_t seq, std::string_view body) {
  return TaggedChecksum('S', seq, body);
}

uint32_t DatasetChecksum(std::string_view key, std::string_view definition) {
  const uint32_t head = TaggedChecksum('D', key.size(), key);
  return Crc32cExtend(head, definition.data(), definition.size());
}

uint32_t ResultChecksum(uint64_t closure_id, std::string_view result) {
  return TaggedChecksum('R', closure_id, result);
}

std::string QuoteKey(std::string_view key) {
  constexpr size_t kMax = 64;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  out += key.size() > kMax ? "'..." : "'";
  return out;
}

}  // namespace dispatch::storage
