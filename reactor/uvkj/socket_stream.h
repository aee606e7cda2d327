// UvSocketStream: a kj::AsyncIoStream over a non-blocking descriptor whose
// readiness comes from libuv (UvFdWatcher). Small reads are served from an
// 8 KiB read-ahead buffer (one recv per message instead of one per step of
// Cap'n Proto's framing); large reads and all writes go straight to the
// kernel; partial writes advance through the pieces. A read that returned
// fewer bytes than asked for drained the socket, so the next one waits for
// readiness without first asking the kernel for an EAGAIN.
// Sockets are written with MSG_NOSIGNAL, so a reset peer surfaces as a
// DISCONNECTED exception and never as SIGPIPE. Pipes (used by KJ's DNS lookup
// thread) take the read/writev path.
#pragma once

#include <uv.h>

#include <kj/async-io.h>
#include <kj/io.h>
#include <kj/vector.h>

#include "reactor/uvkj/fd_watcher.h"

namespace dispatch::uvkj {

class UvSocketStream final : public kj::AsyncIoStream {
 public:
  // REQUIRES: `fd` is non-blocking. Closes it on destruction when `owned`.
  UvSocketStream(uv_loop_t* loop, int fd, bool owned);
  ~UvSocketStream() noexcept(false);

  // Resolves when the descriptor is writable (used to finish a connect()).
  kj::Promise<void> WhenWritable() { return watcher_.WhenWritable(); }

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  // Resolves when the peer hangs up. On Linux this is EPOLLRDHUP, so a peer
  // that merely half-closes counts too; Cap'n Proto RPC never half-closes.
  kj::Promise<void> whenWriteDisconnected() override;
  void shutdownWrite() override;
  void abortRead() override;
  void getsockopt(int level, int option, void* value, uint* length) override;
  void setsockopt(int level, int option, const void* value, uint length) override;
  void getsockname(struct sockaddr* addr, uint* length) override;
  void getpeername(struct sockaddr* addr, uint* length) override;
  kj::Maybe<int> getFd() const override { return fd_; }

  // recv/read and sendmsg/writev system calls made so far (tests count them).
  uint64_t recv_calls() const { return recv_calls_; }
  uint64_t send_calls() const { return send_calls_; }

 private:
  kj::Promise<size_t> ReadLoop(kj::byte* buffer, size_t min_bytes, size_t max_bytes,
                               size_t already_read);
  kj::Promise<size_t> WaitReadable(kj::byte* buffer, size_t min_bytes, size_t max_bytes,
                                   size_t already_read);
  // Most bytes one WriteLoop turn hands the kernel before it yields.
  static constexpr size_t kMaxBytesPerTurn = 1u << 20;
  kj::Promise<void> WriteLoop(kj::ArrayPtr<const kj::byte> first,
                              kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> rest);
  kj::Promise<void> WritePieces(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces);
  kj::Promise<void> Flush();
  void SendPendingBestEffort();

  // Writes up to this size are copied and sent together at the end of the
  // loop pass; larger ones go out at once (behind whatever is buffered).
  static constexpr size_t kCoalesceBytes = 16384;
  enum class FlushState { kIdle, kScheduled, kBlocked };

  kj::Vector<kj::byte> pending_;          // accepted, not yet given to the kernel
  FlushState flush_state_ = FlushState::kIdle;
  bool direct_write_ = false;             // a large write is in progress
  bool write_shut_ = false;               // shutdownWrite() was called
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> flushed_;  // a large write waits for Flush
  kj::Maybe<kj::Exception> write_error_;  // a buffered write failed: later writes fail too
  kj::Maybe<kj::Promise<void>> flush_task_;
  uint64_t send_calls_ = 0;

  // Reads smaller than this are served from a read-ahead buffer.
  static constexpr size_t kReadAheadBytes = 8192;

  const int fd_;
  kj::Array<kj::byte> read_buffer_;  // allocated on the first small read
  size_t read_begin_ = 0;            // unread bytes are [read_begin_, read_end_)
  size_t read_end_ = 0;
  bool drained_ = false;             // the last recv left the kernel's queue empty
  uint64_t recv_calls_ = 0;
  kj::AutoCloseFd owned_fd_;  // empty when the caller keeps ownership
  const bool is_socket_;
  UvFdWatcher watcher_;       // declared last: destroyed first
};

// Throws the kj::Exception for a failed socket call: DISCONNECTED for the
// errors that mean the peer is gone, FAILED otherwise.
kj::Exception SocketError(int error, const char* what);
[[noreturn]] void ThrowSocketError(int error, const char* what);

}  // namespace dispatch::uvkj
