// DatasetReader: a consumer's iterator over a dataset read through the service.
// Open() creates or joins the job and reads on the reader's OWN thread and
// libuv loop (heartbeats go on while the caller is busy); Next() returns
// elements until the end of the sequence; Close() releases the job client.
// Read-ahead is bounded, replies included: elements are read where the reply
// put them and copied once, into the caller's Element. Next(), Close() and stats() may be called from any
// one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "clients/read_session.h"
#include "common/status.h"
#include "clients/loop_thread.h"

namespace dispatch::clients {

struct ReaderStats {
  uint64_t job_id = 0;
  uint64_t job_client_id = 0;
  uint64_t elements = 0;  // returned by Next()
  uint64_t bytes = 0;
  size_t buffered = 0;  // read ahead, not yet returned
};

class DatasetReader {
 public:
  // Validates the options, starts the reader thread and waits (up to
  // `timeout`) until the job is open. InvalidArgument for bad options; the
  // dispatcher's error (e.g. a named job reused with another processing mode);
  // Unavailable when the job could not be opened in time. A connection that
  // drops before the job is open is made again and the open goes on.
  static Result<std::unique_ptr<DatasetReader>> Open(
      ReaderOptions options, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~DatasetReader();
  DatasetReader(const DatasetReader&) = delete;
  DatasetReader& operator=(const DatasetReader&) = delete;

  // The next element: true with `element` set (its bytes copied into
  // `element->data`, which keeps its capacity: a caller that passes the same
  // Element again allocates nothing per element), false at the end of the
  // sequence, or the error that stopped reading. Waits at most `timeout`
  // (Unavailable when it passes; the reader goes on).
  Result<bool> Next(Element* element,
                    std::chrono::milliseconds timeout = std::chrono::hours(24 * 365));
  // Next() that tells the wait passing apart from an error: nullopt when no
  // element came within `timeout`.
  Result<std::optional<bool>> NextWithin(Element* element, std::chrono::milliseconds timeout);
  // Stops reading and releases the job client (waits up to 5 s for the
  // dispatcher's answer). Idempotent.
  void Close();

  ReaderStats stats() const;

 private:
  class Sink;
  class Loop;  // the reader thread's objects
  explicit DatasetReader(ReaderOptions options);

  // Retires reading_ (read to its end) to spent_; true when the loop
  // thread, waiting for room, should be woken. REQUIRES: mu_ held.
  bool RetireBatch();
  // Loop thread, closing: destroys every batch (their replies must die on
  // the loop thread). The caller waits in Close() meanwhile.
  void DropBatches();

  const ReaderOptions options_;
  std::unique_ptr<Sink> sink_;

  // The batch Next() copies elements out of, without the lock: only Next()
  // (and Release(), while the caller waits in Close()) touch it, and only
  // the loop thread frees it, once it is retired to spent_.
  ElementBatch reading_;
  size_t reading_next_ = 0;
  std::atomic<uint64_t> returned_elements_{0};  // stats, written by Next() only
  std::atomic<uint64_t> returned_bytes_{0};
  std::atomic<size_t> reading_left_{0};

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<ElementBatch> queue_;  // read ahead, not yet begun by Next()
  std::vector<ElementBatch> spent_;  // read by Next(), for the loop thread to free
  // Elements and bytes of every batch held (queue_, reading_, spent_): the
  // read-ahead limits bound all of them.
  uint64_t held_elements_ = 0;
  uint64_t held_bytes_ = 0;
  uint64_t queued_elements_ = 0;  // in queue_
  uint64_t queued_bytes_ = 0;
  bool opened_ = false;
  bool ended_ = false;
  Status error_;
  bool close_requested_ = false;
  bool room_wanted_ = false;  // the loop waits for the queue to drain
  ReaderStats stats_;

  // Reader thread only: set by the setup, valid in every posted function
  // (none runs after the Loop is gone).
  Loop* loop_ = nullptr;
  LoopThread loop_thread_{"reader"};  // declared last: stopped first
};

}  // namespace dispatch::clients
