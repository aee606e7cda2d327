#include "reactor/etcd/line_splitter.h"

namespace dispatch::etcd {

Status LineSplitter::OverLimit(size_t length) {
  broken_ = true;
  ++lines_over_limit_;
  pending_.clear();
  pending_.shrink_to_fit();
  return ResourceExhaustedError("a line of etcd's stream reached " + std::to_string(length) +
                                " bytes, over the limit of " + std::to_string(max_line_bytes_) +
                                " bytes per line");
}

Status LineSplitter::Feed(std::string_view bytes,
                          const std::function<Status(std::string_view line)>& on_line) {
  if (broken_) return FailedPreconditionError("etcd's stream already had a line over the limit");
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    const size_t piece = newline == std::string_view::npos ? bytes.size() : newline;
    // The line without its newline would exceed the limit: refuse before copying.
    if (pending_.size() + piece > max_line_bytes_) return OverLimit(pending_.size() + piece);
    if (newline == std::string_view::npos) {
      pending_.append(bytes);
      return Status::Ok();
    }
    std::string_view line;
    if (pending_.empty()) {
      line = bytes.substr(0, piece);  // the whole line is in this piece: no copy
    } else {
      pending_.append(bytes.substr(0, piece));
      line = pending_;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    Status status = Status::Ok();
    if (!line.empty()) {
      ++lines_;
      status = on_line(line);
    }
    pending_.clear();
    if (!status.ok()) return status;
    bytes.remove_prefix(piece + 1);
  }
  return Status::Ok();
}

}  // namespace dispatch::etcd
