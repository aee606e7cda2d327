// LineSplitter: cuts a byte stream that arrives in pieces of any size into
// lines ending in '\n', as etcd's JSON gateway streams its answers (one JSON
// object per line; one large watch event spans many HTTP chunks, and one
// chunk may hold several lines). A line may be at most `max_line_bytes`
// long: a longer one is refused (ResourceExhausted naming the limit), counted,
// and the splitter refuses everything after it, since its framing is lost.
// Empty lines (and a '\r' before the '\n') are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dispatch::etcd {

class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

  // Calls `on_line` for every line `bytes` completes, in order. A non-ok
  // status from `on_line` stops the feed and is returned.
  Status Feed(std::string_view bytes, const std::function<Status(std::string_view line)>& on_line);

  // Bytes of the unfinished last line.
  size_t pending_bytes() const { return pending_.size(); }
  uint64_t lines() const { return lines_; }
  uint64_t lines_over_limit() const { return lines_over_limit_; }

 private:
  Status OverLimit(size_t length);

  const size_t max_line_bytes_;
  std::string pending_;
  bool broken_ = false;
  uint64_t lines_ = 0;
  uint64_t lines_over_limit_ = 0;
};

}  // namespace dispatch::etcd
