#include "reactor/etcd/line_splitter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dispatch::etcd {
namespace {

struct Lines {
  std::vector<std::string> seen;
  std::function<Status(std::string_view)> sink() {
    return [this](std::string_view line) {
      seen.emplace_back(line);
      return Status::Ok();
    };
  }
};

TEST(LineSplitter, JoinsALineSpreadOverManyPiecesAndSplitsSeveralInOnePiece) {
  LineSplitter splitter(1000);
  Lines lines;
  const std::string stream = "{\"a\":1}\n{\"b\":\n\n2}\r\n{\"c\":3}\n{\"tail";
  // Every piece size from 1 byte up gives the same lines.
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    LineSplitter s(1000);
    Lines l;
    for (size_t at = 0; at < stream.size(); at += piece) {
      ASSERT_TRUE(s.Feed(std::string_view(stream).substr(at, piece), l.sink()).ok());
    }
    EXPECT_EQ(l.seen, (std::vector<std::string>{"{\"a\":1}", "{\"b\":", "2}", "{\"c\":3}"})) << piece;
    EXPECT_EQ(s.pending_bytes(), 6u);
  }
}

TEST(LineSplitter, RefusesALineOverTheLimitAndEverythingAfterIt) {
  LineSplitter splitter(10);
  Lines lines;
  ASSERT_TRUE(splitter.Feed("0123456789\n", lines.sink()).ok());  // exactly the limit
  ASSERT_TRUE(splitter.Feed("012345", lines.sink()).ok());
  Status over = splitter.Feed("67890", lines.sink());
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("over the limit of 10 bytes"), std::string::npos) << over.ToString();
  EXPECT_EQ(splitter.lines_over_limit(), 1u);
  EXPECT_EQ(splitter.Feed("\nok\n", lines.sink()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(lines.seen, std::vector<std::string>{"0123456789"});
}

TEST(LineSplitter, StopsAtTheFirstLineItsSinkRefuses) {
  LineSplitter splitter(100);
  std::vector<std::string> seen;
  Status s = splitter.Feed("a\nbad\nc\n", [&](std::string_view line) {
    seen.emplace_back(line);
    return line == "bad" ? InternalError("bad line") : Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "bad"}));
}

}  // namespace
}  // namespace dispatch::etcd
