#include "reactor/message_guard_stream.h"

#include <algorithm>

#include <kj/debug.h>

#include "common/log.h"

namespace dispatch::reactor {
namespace {

uint32_t LittleEndian32(const kj::byte* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Cap'n Proto refuses a message of this many segments or more after its
// first word; we leave that refusal to it.
constexpr uint32_t kMaxSegments = 512;
constexpr size_t kScratchBytes = 64 * 1024;

}  // namespace

MessageGuardStream::MessageGuardStream(kj::Own<kj::AsyncIoStream> inner, uint64_t connection,
                                       uint64_t max_message_bytes, PeerMemoryBudget& budget,
                                       MessageGuardCounters& counters, uv_loop_t* loop)
    : inner_(kj::mv(inner)),
      connection_(connection),
      max_message_bytes_(max_message_bytes),
      budget_(budget),
      counters_(counters),
      loop_(loop) {}

kj::Promise<size_t> MessageGuardStream::tryRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  return ReadLoop(static_cast<kj::byte*>(buffer), min_bytes, max_bytes, 0);
}

kj::Promise<size_t> MessageGuardStream::ReadLoop(kj::byte* buffer, size_t min_bytes, size_t max_bytes,
                                                 size_t done) {
  // The body is decided before the header's last byte is handed on: Cap'n
  // Proto must never see the header of a message we refuse.
  if (phase_ == Phase::kBody && !size_decided_) {
    KJ_IF_MAYBE(wait, OnSizeKnown()) {
      return wait->then([this, buffer, min_bytes, max_bytes, done]() {
        return ReadLoop(buffer, min_bytes, max_bytes, done);
      });
    }
  }
  if (phase_ == Phase::kDiscard) return Discard();
  if (done >= min_bytes) return done;
  size_t cap = static_cast<size_t>(std::min<uint64_t>(max_bytes - done, phase_left_));
  // In the header, ask for one byte at least, so a message's first byte
  // starts its deadline even if the rest of its first word never comes.
  size_t want = phase_ == Phase::kBody ? std::min(min_bytes - done, cap) : 1;
  return inner_->tryRead(buffer + done, want, cap)
      .then([this, buffer, min_bytes, max_bytes, done, want](size_t n) -> kj::Promise<size_t> {
        Consume(buffer + done, n);
        if (n < want) return done + n;  // end of stream
        return ReadLoop(buffer, min_bytes, max_bytes, done + n);
      });
}

void MessageGuardStream::Consume(const kj::byte* bytes, size_t n) {
  if (n == 0) return;
  if (started_ms_ == nullptr) started_ms_ = uv_now(loop_);
  switch (phase_) {
    case Phase::kFirstWord: {
      memcpy(word_ + (8 - phase_left_), bytes, n);
      phase_left_ -= n;
      if (phase_left_ > 0) return;
      segments_ = LittleEndian32(word_) + 1;  // wraps to 0 as Cap'n Proto's does
      body_words_ = segments_ == 0 ? 0 : LittleEndian32(word_ + 4);
      sizes_seen_ = 1;
      if (segments_ >= kMaxSegments) {
        // Cap'n Proto fails the connection on this word; stop framing.
        phase_ = Phase::kBody;
        size_decided_ = true;
        phase_left_ = UINT64_MAX;
        return;
      }
      if (segments_ > 1) {
        phase_ = Phase::kSizeTable;
        phase_left_ = static_cast<uint64_t>(segments_ & ~1u) * 4;
        size_fill_ = 0;
        return;
      }
      break;  // one segment: the size is known
    }
    case Phase::kSizeTable: {
      for (size_t i = 0; i < n; ++i) {
        size_bytes_[size_fill_++] = bytes[i];
        if (size_fill_ == 4) {
          // The last entry of an even count is padding.
          if (sizes_seen_ < segments_) body_words_ += LittleEndian32(size_bytes_);
          ++sizes_seen_;
          size_fill_ = 0;
        }
      }
      phase_left_ -= n;
      if (phase_left_ > 0) return;
      break;
    }
    case Phase::kBody:
      phase_left_ -= n;
      if (phase_left_ == 0) EndMessage();
      return;
    case Phase::kDiscard:
      KJ_FAIL_ASSERT("discarded bytes are not framed");
  }
  // The size table is complete: the body follows.
  phase_ = Phase::kBody;
  phase_left_ = body_words_ * 8;
  size_decided_ = false;
}

kj::Maybe<kj::Promise<void>> MessageGuardStream::OnSizeKnown() {
  size_decided_ = true;
  uint64_t header_bytes = 8 + (segments_ > 1 ? static_cast<uint64_t>(segments_ & ~1u) * 4 : 0);
  uint64_t bytes = header_bytes + body_words_ * 8;
  if (body_words_ > max_message_bytes_ / 8) {
    ++counters_.oversized_messages;
    failure_ = kj::str("connection ", connection_, ": a message of ", bytes, " bytes is over the limit of ",
                       max_message_bytes_, " bytes (--max-message-bytes)");
    Log(LogLevel::kWarning, failure_);
    StartDiscard();
    return nullptr;
  }
  if (budget_.FitsNow(bytes)) {
    Admitted(KJ_ASSERT_NONNULL(budget_.TryReserveHandle(bytes)));
    return nullptr;
  }
  KJ_IF_MAYBE(wait, budget_.WaitFor(bytes)) {
    // Not reading this peer is the back-pressure; its message deadline runs on.
    ++counters_.budget_waits;
    return wait->then([this](kj::Own<PeerMemoryBudget::Reservation> reservation) {
      Admitted(kj::mv(reservation));
    });
  }
  ++counters_.budget_refusals;
  failure_ = kj::str("connection ", connection_, ": a message of ", bytes,
                     " bytes can never fit the peer memory budget of ", budget_.limit(),
                     " bytes (--peer-memory-budget-bytes)");
  Log(LogLevel::kWarning, failure_);
  StartDiscard();
  return nullptr;
}

void MessageGuardStream::Admitted(kj::Own<PeerMemoryBudget::Reservation> reservation) {
  reservation_ = kj::mv(reservation);
  if (phase_left_ == 0) EndMessage();  // an empty body
}

void MessageGuardStream::EndMessage() {
  started_ms_ = nullptr;
  reservation_ = nullptr;
  phase_ = Phase::kFirstWord;
  phase_left_ = 8;
  size_decided_ = false;
}

void MessageGuardStream::StartDiscard() {
  phase_ = Phase::kDiscard;
  phase_left_ = body_words_ * 8;
}

kj::Promise<size_t> MessageGuardStream::Discard() {
  if (phase_left_ == 0 || phase_left_ > kMaxDiscardBytes) return Failure();
  if (scratch_ == nullptr) scratch_ = kj::heapArray<kj::byte>(kScratchBytes);
  size_t cap = static_cast<size_t>(std::min<uint64_t>(scratch_.size(), phase_left_));
  return inner_->tryRead(scratch_.begin(), 1, cap).then([this](size_t n) -> kj::Promise<size_t> {
    if (n == 0) return Failure();  // the peer is gone: nobody to tell
    phase_left_ -= n;
    if (phase_left_ == 0) return Failure();
    return Discard();
  });
}

kj::Promise<size_t> MessageGuardStream::Failure() {
  scratch_ = nullptr;
  phase_left_ = 0;
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::heapString(failure_));
}

}  // namespace dispatch::reactor
