// A WorkerAgent releases each heartbeat reply only when it sends the next
// heartbeat, so the Finish message Cap'n Proto owes the dispatcher for the
// reply travels in the same write as the next call: the dispatcher reads both
// at once instead of waking for a Finish of its own. Observed on the wire
// through a relay between the agent and the real dispatcher, which records
// every read of the agent's bytes and decodes the RPC messages in them.
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <kj/io.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/clients/client_test_support.h"
#include "tests/support/loopback_listener.h"
#include "tests/support/raw_socket.h"

namespace dispatch::testing {
namespace {

// The RPC message types in one read of the agent's bytes.
using Chunk = std::vector<capnp::rpc::Message::Which>;

// Accepts one connection on a free loopback port and relays it to `target`,
// both ways, on its own thread; records the agent's bytes read by read.
class RecordingRelay {
 public:
  explicit RecordingRelay(const std::string& target) : target_(target) {
    int port = 0;
    listener_ = ListenOnLoopback(1, &port);
    address_ = "tcp:127.0.0.1:" + std::to_string(port);
    if (::pipe(stop_) != 0) throw std::runtime_error("relay: pipe");
    thread_ = std::thread([this] { Run(); });
  }
  ~RecordingRelay() {
    (void)!::write(stop_[1], "x", 1);
    thread_.join();
    for (int fd : {listener_, stop_[0], stop_[1]}) ::close(fd);
  }
  const std::string& address() const { return address_; }
  std::vector<Chunk> chunks() {
    std::lock_guard<std::mutex> lock(mu_);
    return chunks_;
  }
  // Why the relay stopped early (empty: it did not).
  std::string failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }

 private:
  void Run() {
    try {
      Relay();
    } catch (const std::exception& e) {  // reported to the test, not terminate()
      std::lock_guard<std::mutex> lock(mu_);
      failure_ = e.what();
    }
  }

  void Relay() {
    pollfd accept_wait[2] = {{listener_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
    ::poll(accept_wait, 2, -1);
    if (accept_wait[1].revents != 0) return;
    kj::AutoCloseFd accepted(::accept(listener_, nullptr, nullptr));
    const int agent = accepted.get();
    RawSocket connection(target_);
    const int dispatcher = connection.fd();
    std::string pending;  // the agent's bytes not yet a whole message
    char buffer[1 << 16];
    for (bool open = true; open;) {
      pollfd wait[3] = {{agent, POLLIN, 0}, {dispatcher, POLLIN, 0}, {stop_[0], POLLIN, 0}};
      ::poll(wait, 3, -1);
      if (wait[2].revents != 0) break;
      for (int side = 0; side < 2 && open; ++side) {
        if (wait[side].revents == 0) continue;
        const int from = side == 0 ? agent : dispatcher;
        const int to = side == 0 ? dispatcher : agent;
        ssize_t n = ::recv(from, buffer, sizeof(buffer), 0);
        if (n <= 0 || ::send(to, buffer, n, MSG_NOSIGNAL) != n) {
          open = false;
          break;
        }
        if (side == 0) Record(pending, buffer, n);
      }
    }
  }

  // Decodes the whole messages the agent's bytes now hold.
  void Record(std::string& pending, const char* data, size_t size) {
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
    chunks_.push_back(std::move(chunk));
  }

  const std::string target_;
  int listener_ = -1;
  int stop_[2] = {-1, -1};
  std::string address_;
  std::mutex mu_;
  std::vector<Chunk> chunks_;
  std::string failure_;
  std::thread thread_;
};

bool Has(const Chunk& chunk, capnp::rpc::Message::Which type) {
  for (auto t : chunk) {
    if (t == type) return true;
  }
  return false;
}

size_t CallsIn(const std::vector<Chunk>& chunks) {
  size_t calls = 0;
  for (const Chunk& c : chunks) {
    for (auto t : c) calls += t == capnp::rpc::Message::CALL;
  }
  return calls;
}

TEST(HeartbeatFinish, TravelsWithTheNextHeartbeatNeverAlone) {
  DispatcherProcess dispatcher;
  RecordingRelay relay(dispatcher.address());
  // 20 ms heartbeats: a Finish sent as the reply arrives would be a read of
  // its own, 20 ms before the next call.
  TestAgent a(relay.address(), "agent-finish", TestSeed(), 20);
  ASSERT_TRUE(a.agent->Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return CallsIn(relay.chunks()) >= 30; }))
      << CallsIn(relay.chunks()) << " calls seen";
  a.agent->Stop();
  EXPECT_EQ(relay.failure(), "");
  // Connecting (bootstrap, authenticate) and registering finish their own
  // calls: only the steady heartbeats after the first ten calls are judged.
  size_t calls = 0, finishes = 0;
  for (const Chunk& chunk : relay.chunks()) {
    const bool steady = calls >= 10;
    for (auto t : chunk) calls += t == capnp::rpc::Message::CALL;
    if (!steady || !Has(chunk, capnp::rpc::Message::FINISH)) continue;
    ++finishes;
    EXPECT_TRUE(Has(chunk, capnp::rpc::Message::CALL))
        << "a Finish was sent alone, after call " << calls;
  }
  EXPECT_GE(finishes, 10u);
}

}  // namespace
}  // namespace dispatch::testing
