// MessageGuardStream: wraps one connection's stream and follows Cap'n
// Proto's stream framing (segment count, segment sizes, segments) as the
// bytes pass through tryRead, without buffering them. So it knows when a
// message begins (its first byte), how large it is (once the size table is
// in) and when it ends, and puts three limits in one place:
//  - the message deadline: message_started_ms() tells the server since when a
//    begun message is under way (the server closes it past the deadline);
//  - the process-wide peer memory budget: a message holds a reservation of
//    its size from its size table to its last byte; when the budget is full
//    the body is not read (the peer is not read at all) until room frees;
//  - the size limit: a message over max_message_bytes (or one that can never
//    fit the budget) is counted, read and thrown away without being kept
//    (bodies up to kMaxDiscardBytes), then the read fails with an exception
//    naming the limit, which the RPC system sends to the peer as its abort
//    reason. Cap'n Proto never sees the header of such a message.
// Writes pass through untouched. REQUIRES: loop thread only.
#pragma once

#include <cstdint>

#include <uv.h>

#include <kj/async-io.h>
#include <kj/string.h>

#include "reactor/peer_memory_budget.h"

namespace dispatch::reactor {

struct MessageGuardCounters {
  uint64_t oversized_messages = 0;  // over --max-message-bytes
  uint64_t budget_refusals = 0;     // larger than the budget could ever hold
  uint64_t budget_waits = 0;        // messages whose body waited for the budget
};

class MessageGuardStream final : public kj::AsyncIoStream {
 public:
  // Oversized bodies up to this size are read and discarded so the peer can
  // read the abort reason; larger announcements fail at once.
  static constexpr uint64_t kMaxDiscardBytes = 1ull << 30;

  // `connection` names the connection in log lines. `budget`, `counters` and
  // `loop` (whose uv_now() is the clock) outlive the stream.
  MessageGuardStream(kj::Own<kj::AsyncIoStream> inner, uint64_t connection, uint64_t max_message_bytes,
                     PeerMemoryBudget& budget, MessageGuardCounters& counters, uv_loop_t* loop);

  // When (uv_now, ms) the message now being received began; null between messages.
  kj::Maybe<uint64_t> message_started_ms() const { return started_ms_; }

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override { return inner_->write(buffer, size); }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    return inner_->write(pieces);
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, kj::uint* length) override {
    inner_->getsockopt(level, option, value, length);
  }
  void setsockopt(int level, int option, const void* value, kj::uint length) override {
    inner_->setsockopt(level, option, value, length);
  }
  void getsockname(struct sockaddr* addr, kj::uint* length) override { inner_->getsockname(addr, length); }
  void getpeername(struct sockaddr* addr, kj::uint* length) override { inner_->getpeername(addr, length); }
  kj::Maybe<int> getFd() const override { return inner_->getFd(); }

 private:
  // Where the next byte falls in the framing.
  enum class Phase { kFirstWord, kSizeTable, kBody, kDiscard };

  kj::Promise<size_t> ReadLoop(kj::byte* buffer, size_t min_bytes, size_t max_bytes, size_t done);
  // Runs the framing over bytes that just arrived. REQUIRES: they do not
  // cross the end of the current phase (ReadLoop clamps every read).
  void Consume(const kj::byte* bytes, size_t n);
  // The size table is complete: decide on the body (admit, wait, discard).
  // Returns a promise when the read must wait for the budget.
  kj::Maybe<kj::Promise<void>> OnSizeKnown();
  void EndMessage();
  // Enters the discard phase: the body is read and dropped, then the read
  // fails with failure_. Bodies over kMaxDiscardBytes fail at once.
  void StartDiscard();
  kj::Promise<size_t> Discard();
  kj::Promise<size_t> Failure();
  // The budget granted (or admitted at once) the current message.
  void Admitted(kj::Own<PeerMemoryBudget::Reservation> reservation);

  kj::Own<kj::AsyncIoStream> inner_;
  const uint64_t connection_;
  const uint64_t max_message_bytes_;
  PeerMemoryBudget& budget_;
  MessageGuardCounters& counters_;
  uv_loop_t* const loop_;

  Phase phase_ = Phase::kFirstWord;
  uint64_t phase_left_ = 8;        // bytes until the current phase ends
  kj::byte word_[8];               // the first word as it arrives
  uint32_t segments_ = 0;          // segment count of the current message
  uint32_t sizes_seen_ = 0;        // segment sizes read so far (incl. segment 0)
  kj::byte size_bytes_[4];         // a size table entry as it arrives
  uint32_t size_fill_ = 0;
  uint64_t body_words_ = 0;        // sum of the segment sizes read so far
  bool size_decided_ = false;      // OnSizeKnown ran for this message
  kj::Maybe<uint64_t> started_ms_;
  kj::Maybe<kj::Own<PeerMemoryBudget::Reservation>> reservation_;
  kj::String failure_;             // why a discarded message fails the connection
  kj::Array<kj::byte> scratch_;    // discarded bytes land here
};

}  // namespace dispatch::reactor
