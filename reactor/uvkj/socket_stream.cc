#include "reactor/uvkj/socket_stream.h"

#include <errno.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <kj/debug.h>

namespace dispatch::uvkj {
namespace {

bool IsSocket(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

bool IsDisconnect(int error) {
  switch (error) {
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ENOTCONN:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETRESET:
      return true;
    default:
      return false;
  }
}

}  // namespace

kj::Exception SocketError(int error, const char* what) {
  auto type = IsDisconnect(error) ? kj::Exception::Type::DISCONNECTED : kj::Exception::Type::FAILED;
  return kj::Exception(type, __FILE__, __LINE__, kj::str(what, ": ", strerror(error)));
}

void ThrowSocketError(int error, const char* what) {
  kj::throwFatalException(SocketError(error, what));
}

UvSocketStream::UvSocketStream(uv_loop_t* loop, int fd, bool owned)
    : fd_(fd),
      owned_fd_(owned ? kj::AutoCloseFd(fd) : kj::AutoCloseFd()),
      is_socket_(IsSocket(fd)),
      watcher_(loop, fd) {}

// Members go in reverse order: the watcher (whose uv_close takes the
// descriptor out of epoll at once) before owned_fd_ closes the descriptor, so
// a reused descriptor number never meets a stale watch.
UvSocketStream::~UvSocketStream() noexcept(false) {
  // A last message (Cap'n Proto's Abort) may still be buffered. Bytes behind
  // a blocked flush cannot go first; those are dropped with the connection.
  if (flush_state_ != FlushState::kBlocked) SendPendingBestEffort();
}

kj::Promise<size_t> UvSocketStream::tryRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  return kj::evalNow([&]() {
    return ReadLoop(static_cast<kj::byte*>(buffer), min_bytes, max_bytes, 0);
  });
}

kj::Promise<size_t> UvSocketStream::ReadLoop(kj::byte* buffer, size_t min_bytes, size_t max_bytes,
                                             size_t already_read) {
  for (;;) {
    // Bytes read ahead by an earlier call come first.
    size_t buffered = read_end_ - read_begin_;
    if (buffered > 0) {
      size_t n = std::min(buffered, max_bytes);
      memcpy(buffer, read_buffer_.begin() + read_begin_, n);
      read_begin_ += n;
      buffer += n;
      max_bytes -= n;
      already_read += n;
      if (n >= min_bytes) return already_read;
      min_bytes -= n;
    }
    read_begin_ = read_end_ = 0;
    if (drained_) {
      // The last read emptied the kernel's queue: a recv now would almost
      // surely say EAGAIN. Readiness is level-triggered, so bytes that came in
      // since then are reported at once and nothing is missed by waiting.
      return WaitReadable(buffer, min_bytes, max_bytes, already_read);
    }
    // Cap'n Proto reads a message in several small steps (first word, segment
    // table, segments); reading ahead into our buffer turns those into one
    // system call. Large reads go straight to the caller's buffer.
    const bool ahead = max_bytes < kReadAheadBytes;
    if (ahead && read_buffer_.size() == 0) read_buffer_ = kj::heapArray<kj::byte>(kReadAheadBytes);
    kj::byte* target = ahead ? read_buffer_.begin() : buffer;
    size_t capacity = ahead ? read_buffer_.size() : max_bytes;
    ++recv_calls_;
    ssize_t n = is_socket_ ? ::recv(fd_, target, capacity, 0) : ::read(fd_, target, capacity);
    if (n < 0) {
      int error = errno;
      if (error == EINTR) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) {
        return WaitReadable(buffer, min_bytes, max_bytes, already_read);
      }
      // A reset connection cannot take writes either: say so at the next
      // write instead of accepting it into the buffer.
      if (IsDisconnect(error) && write_error_ == nullptr) write_error_ = SocketError(error, "write");
      ThrowSocketError(error, "read");
    }
    if (n == 0) return already_read;  // end of stream: fewer than asked
    // Fewer bytes than asked for means the queue was empty when the kernel
    // copied them; on a stream that is the same as the EAGAIN a next recv
    // would return, one system call per message sooner.
    drained_ = static_cast<size_t>(n) < capacity;
    if (ahead) {
      read_end_ = n;
      continue;  // served from the buffer at the top
    }
    already_read += n;
    if (static_cast<size_t>(n) >= min_bytes) return already_read;
    buffer += n;
    min_bytes -= n;
    max_bytes -= n;
  }
}

kj::Promise<size_t> UvSocketStream::WaitReadable(kj::byte* buffer, size_t min_bytes,
                                                 size_t max_bytes, size_t already_read) {
  return watcher_.WhenReadable().then([this, buffer, min_bytes, max_bytes, already_read]() {
    drained_ = false;
    return ReadLoop(buffer, min_bytes, max_bytes, already_read);
  });
}

kj::Promise<void> UvSocketStream::write(const void* buffer, size_t size) {
  return kj::evalNow([&]() {
    // A write that waits (for room, or behind a blocked flush) still points
    // at its pieces array when it resumes: that array must outlive this call
    // as the caller's bytes do, so it lives on the heap with the promise.
    auto piece = kj::heap<kj::ArrayPtr<const kj::byte>>(static_cast<const kj::byte*>(buffer), size);
    auto pieces = kj::arrayPtr(piece.get(), 1);
    return WritePieces(pieces).attach(kj::mv(piece));
  });
}

kj::Promise<void> UvSocketStream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  return kj::evalNow([&]() { return WritePieces(pieces); });
}

kj::Promise<void> UvSocketStream::WritePieces(
    kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  KJ_IF_MAYBE(error, write_error_) { return kj::cp(*error); }
  if (write_shut_) return SocketError(EPIPE, "write after shutdownWrite");
  KJ_REQUIRE(!direct_write_ && flushed_ == nullptr,
             "write() called before the previous write() completed");
  size_t total = 0;
  for (auto piece : pieces) total += piece.size();
  if (total == 0) return kj::READY_NOW;
  if (total <= kCoalesceBytes && pending_.size() + total <= 4 * kCoalesceBytes) {
    // Small: Cap'n Proto writes each message (a call, its return, a finish)
    // on its own; sent together at the end of the pass they cost one
    // system call and one wake-up of the peer instead of one each.
    for (auto piece : pieces) pending_.addAll(piece);
    if (flush_state_ == FlushState::kIdle) {
      flush_state_ = FlushState::kScheduled;
      flush_task_ = kj::evalLast([this]() { return Flush(); }).eagerlyEvaluate([this](kj::Exception&& e) {
        write_error_ = kj::mv(e);
        flush_state_ = FlushState::kIdle;
        pending_.clear();
        KJ_IF_MAYBE(waiter, flushed_) { (*waiter)->reject(kj::cp(KJ_ASSERT_NONNULL(write_error_))); }
        flushed_ = nullptr;
      });
    }
    return kj::READY_NOW;
  }
  if (flush_state_ == FlushState::kBlocked) {
    // Buffered bytes wait for room in the kernel: this write goes after them.
    auto paf = kj::newPromiseAndFulfiller<void>();
    flushed_ = kj::mv(paf.fulfiller);
    return paf.promise.then([this, pieces]() { return WritePieces(pieces); });
  }
  // Large: straight to the kernel, with anything buffered in front of it in
  // the same system call. (A scheduled Flush then finds nothing to send.)
  direct_write_ = true;
  auto done = [this]() { direct_write_ = false; };
  auto failed = [this](kj::Exception&& e) {
    direct_write_ = false;
    kj::throwFatalException(kj::mv(e));
  };
  // (With nothing buffered, `first` is empty and WriteLoop skips it.)
  auto buffered = pending_.releaseAsArray();
  auto first = buffered.asPtr();
  return kj::evalNow([&]() { return WriteLoop(first, pieces); })
      .attach(kj::mv(buffered))
      .then(kj::mv(done), kj::mv(failed));
}

kj::Promise<void> UvSocketStream::Flush() {
  if (pending_.empty()) {
    flush_state_ = FlushState::kIdle;
    KJ_IF_MAYBE(waiter, flushed_) { (*waiter)->fulfill(); }
    flushed_ = nullptr;
    return kj::READY_NOW;
  }
  auto bytes = pending_.releaseAsArray();
  flush_state_ = FlushState::kBlocked;
  // Bytes written meanwhile queue behind these; the next round sends them.
  return WriteLoop(bytes.asPtr(), nullptr).attach(kj::mv(bytes)).then([this]() { return Flush(); });
}

kj::Promise<void> UvSocketStream::WriteLoop(kj::ArrayPtr<const kj::byte> first,
                                            kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> rest) {
  size_t this_turn = 0;
  for (;;) {
    // Skip empty pieces; stop when everything is written.
    while (first.size() == 0 && rest.size() > 0) {
      first = rest[0];
      rest = rest.slice(1, rest.size());
    }
    if (first.size() == 0) return kj::READY_NOW;
    // A peer that reads as fast as we write never makes sendmsg say EAGAIN:
    // a 32 MiB reply went out in one turn, 8 ms of the loop copying into the
    // socket (measured). Past kMaxBytesPerTurn the rest waits for a later turn,
    // so that libuv serves other sockets in between.
    if (this_turn >= kMaxBytesPerTurn) {
      return kj::evalLater([this, first, rest]() { return WriteLoop(first, rest); });
    }

    // One call hands the kernel at most the turn's remaining budget: to a
    // peer that drains the socket as fast as it fills, a single sendmsg of a
    // 16 MiB reply copied all of it (measured).
    size_t room = kMaxBytesPerTurn - this_turn;
    struct iovec iov[IOV_MAX];
    size_t count = 0;
    iov[count++] = {const_cast<kj::byte*>(first.begin()), std::min(first.size(), room)};
    room -= iov[0].iov_len;
    for (size_t i = 0; i < rest.size() && count < IOV_MAX && room > 0; ++i) {
      if (rest[i].size() == 0) continue;
      const size_t take = std::min(rest[i].size(), room);
      iov[count++] = {const_cast<kj::byte*>(rest[i].begin()), take};
      room -= take;
    }

    ssize_t n;
    ++send_calls_;
    if (is_socket_) {
      struct msghdr msg = {};
      msg.msg_iov = iov;
      msg.msg_iovlen = count;
      n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    } else {
      n = ::writev(fd_, iov, count);
    }
    if (n < 0) {
      int error = errno;
      if (error == EINTR) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) {
        return watcher_.WhenWritable().then([this, first, rest]() { return WriteLoop(first, rest); });
      }
      ThrowSocketError(error, "write");
    }

    // Advance past what the kernel took.
    size_t written = n;
    this_turn += written;
    while (written > 0) {
      size_t take = std::min(written, first.size());
      first = first.slice(take, first.size());
      written -= take;
      if (first.size() == 0 && rest.size() > 0) {
        first = rest[0];
        rest = rest.slice(1, rest.size());
      }
    }
  }
}

void UvSocketStream::SendPendingBestEffort() {
  // Used where we cannot wait (shutdown, destruction): what the kernel takes
  // now, in one try. A peer that cannot take it sees the connection end.
  if (pending_.empty()) return;
  ssize_t n = is_socket_ ? ::send(fd_, pending_.begin(), pending_.size(), MSG_NOSIGNAL | MSG_DONTWAIT)
                         : ::write(fd_, pending_.begin(), pending_.size());
  ++send_calls_;
  (void)n;
  pending_.clear();
}

kj::Promise<void> UvSocketStream::whenWriteDisconnected() { return watcher_.WhenHangup(); }

void UvSocketStream::shutdownWrite() {
  if (flush_state_ != FlushState::kBlocked) SendPendingBestEffort();
  write_shut_ = true;
  if (::shutdown(fd_, SHUT_WR) < 0 && errno != ENOTCONN) ThrowSocketError(errno, "shutdown");
}

void UvSocketStream::abortRead() {
  if (is_socket_) ::shutdown(fd_, SHUT_RD);
}

void UvSocketStream::getsockopt(int level, int option, void* value, uint* length) {
  socklen_t len = *length;
  if (::getsockopt(fd_, level, option, value, &len) < 0) ThrowSocketError(errno, "getsockopt");
  *length = len;
}

void UvSocketStream::setsockopt(int level, int option, const void* value, uint length) {
  if (::setsockopt(fd_, level, option, value, length) < 0) ThrowSocketError(errno, "setsockopt");
}

void UvSocketStream::getsockname(struct sockaddr* addr, uint* length) {
  socklen_t len = *length;
  if (::getsockname(fd_, addr, &len) < 0) ThrowSocketError(errno, "getsockname");
  *length = len;
}

void UvSocketStream::getpeername(struct sockaddr* addr, uint* length) {
  socklen_t len = *length;
  if (::getpeername(fd_, addr, &len) < 0) ThrowSocketError(errno, "getpeername");
  *length = len;
}

}  // namespace dispatch::uvkj
