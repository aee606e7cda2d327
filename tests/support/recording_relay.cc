#include "tests/support/recording_relay.h"

#include <capnp/serialize.h>
#include <kj/io.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "tests/support/loopback_listener.h"
#include "tests/support/raw_socket.h"

namespace dispatch::testing {

RecordingRelay::RecordingRelay(const std::string& target) : target_(target) {
  int port = 0;
  listener_ = ListenOnLoopback(1, &port);
  address_ = "tcp:127.0.0.1:" + std::to_string(port);
  if (::pipe(stop_) != 0) throw std::runtime_error("relay: pipe");
  thread_ = std::thread([this] { Run(); });
}

RecordingRelay::~RecordingRelay() {
  (void)!::write(stop_[1], "x", 1);
  thread_.join();
  for (int fd : {listener_, stop_[0], stop_[1]}) ::close(fd);
}

std::vector<RecordingRelay::Chunk> RecordingRelay::chunks(From from) {
  std::lock_guard<std::mutex> lock(mu_);
  return chunks_[static_cast<int>(from)];
}

std::string RecordingRelay::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

bool RecordingRelay::Has(const Chunk& chunk, capnp::rpc::Message::Which type) {
  for (auto t : chunk) {
    if (t == type) return true;
  }
  return false;
}

size_t RecordingRelay::Count(const std::vector<Chunk>& chunks, capnp::rpc::Message::Which type) {
  size_t n = 0;
  for (const Chunk& chunk : chunks) {
    for (auto t : chunk) n += t == type;
  }
  return n;
}

void RecordingRelay::Run() {
  try {
    Relay();
  } catch (const std::exception& e) {  // reported to the test, not terminate()
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = e.what();
  }
}

void RecordingRelay::Relay() {
  pollfd accept_wait[2] = {{listener_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
  ::poll(accept_wait, 2, -1);
  if (accept_wait[1].revents != 0) return;
  kj::AutoCloseFd accepted(::accept(listener_, nullptr, nullptr));
  const int client = accepted.get();
  RawSocket connection(target_);
  const int server = connection.fd();
  std::string pending[2];  // each side's bytes not yet a whole message
  char buffer[1 << 16];
  for (bool open = true; open;) {
    pollfd wait[3] = {{client, POLLIN, 0}, {server, POLLIN, 0}, {stop_[0], POLLIN, 0}};
    ::poll(wait, 3, -1);
    if (wait[2].revents != 0) break;
    for (int side = 0; side < 2 && open; ++side) {
      if (wait[side].revents == 0) continue;
      const int from = side == 0 ? client : server;
      const int to = side == 0 ? server : client;
      ssize_t n = ::recv(from, buffer, sizeof(buffer), 0);
      if (n <= 0 || ::send(to, buffer, n, MSG_NOSIGNAL) != n) {
        open = false;
        break;
      }
      Record(side == 0 ? From::kClient : From::kServer, pending[side], buffer, n);
    }
  }
}

void RecordingRelay::Record(From from, std::string& pending, const char* data, size_t size) {
  pending.append(data, size);
  Chunk chunk;
  while (pending.size() >= 8) {
    uint32_t segments = 0, words = 0;
    std::memcpy(&segments, pending.data(), 4);
    std::memcpy(&words, pending.data() + 4, 4);
    // Our peers write single-segment RPC messages.
    if (segments != 0) throw std::runtime_error("relay: a multi-segment message");
    const size_t total = 8 + size_t{words} * 8;
    if (pending.size() < total) break;
    kj::Array<capnp::word> copy = kj::heapArray<capnp::word>(total / 8);
    std::memcpy(copy.begin(), pending.data(), total);
    capnp::FlatArrayMessageReader reader(copy);
    chunk.push_back(reader.getRoot<capnp::rpc::Message>().which());
    pending.erase(0, total);
  }
  std::lock_guard<std::mutex> lock(mu_);
  chunks_[static_cast<int>(from)].push_back(std::move(chunk));
}

}  // namespace dispatch::testing
