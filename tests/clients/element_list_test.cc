// SetElementList: large elements become segments that point at the caller's
// buffers, at most kMaxExternalElements of them; the message still reads
// back, byte for byte, through Cap'n Proto's stream reader (which refuses
// messages of 512 segments or more).
#include "clients/element_list.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <kj/io.h>

#include <string>
#include <vector>

#include "schema/data_transfer.capnp.h"

namespace dispatch::clients {
namespace {

std::vector<std::string> Elements(size_t count, size_t size) {
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    std::string e(size, static_cast<char>('a' + i % 26));
    e.replace(0, std::min<size_t>(size, 8), std::to_string(100000000 + i).substr(1, 8));
    out.push_back(std::move(e));
  }
  return out;
}

struct Written {
  size_t segments = 0;
  size_t referenced = 0;  // segments that are an element's own buffer
  std::vector<std::string> read_back;
};

Written WriteAndRead(const std::vector<std::string>& elements) {
  capnp::MallocMessageBuilder builder;
  auto result = builder.initRoot<rpc::ElementResult>();
  SetElementList(elements, result.initElements(static_cast<unsigned>(elements.size())));
  Written out;
  auto segments = builder.getSegmentsForOutput();
  out.segments = segments.size();
  for (auto segment : segments) {
    for (const std::string& e : elements) {
      if (reinterpret_cast<const char*>(segment.begin()) == e.data()) ++out.referenced;
    }
  }
  kj::VectorOutputStream bytes;
  capnp::writeMessage(bytes, builder);
  kj::ArrayInputStream in(bytes.getArray());
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 64 << 20;
  capnp::InputStreamMessageReader reader(in, options);
  for (capnp::Data::Reader e : reader.getRoot<rpc::ElementResult>().getElements()) {
    out.read_back.emplace_back(reinterpret_cast<const char*>(e.begin()), e.size());
  }
  return out;
}

TEST(SetElementList, ReferencesLargeElementsAndCopiesSmallOnes) {
  std::vector<std::string> elements = Elements(3, kExternalElementBytes);
  std::vector<std::string> small = Elements(4, kExternalElementBytes - 1);
  elements.insert(elements.begin() + 1, small.begin(), small.end());
  Written w = WriteAndRead(elements);
  EXPECT_EQ(w.referenced, 3u);
  EXPECT_EQ(w.read_back, elements);
}

TEST(SetElementList, CopiesTheLargeElementsPastTheSegmentLimit) {
  // 700 large elements would be 701 segments: the reader would refuse it.
  const std::vector<std::string> elements = Elements(700, kExternalElementBytes);
  Written w = WriteAndRead(elements);
  EXPECT_EQ(w.referenced, kMaxExternalElements);
  EXPECT_LT(w.segments, 512u);
  EXPECT_EQ(w.read_back, elements);
}

}  // namespace
}  // namespace dispatch::clients
