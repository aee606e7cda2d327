#include "tests/support/stalling_relay.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>

#include "tests/support/loopback_listener.h"
#include "tests/support/raw_socket.h"

namespace dispatch::testing {

struct StallingRelay::Connection {
  int client = -1;
  std::unique_ptr<RawSocket> server;
  std::string sent;  // what the client sent, to match Stall()'s needle
  bool stalled = false;
  ~Connection() {
    if (client >= 0) ::close(client);
  }
};

StallingRelay::StallingRelay(std::string target) : target_(std::move(target)) {
  listener_ = ListenOnLoopback(64, &port_);
  if (::pipe(wake_) != 0) {
    ::close(listener_);
    throw std::runtime_error("relay: pipe");
  }
  thread_ = std::thread([this] { Run(); });
}

StallingRelay::~StallingRelay() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  (void)!::write(wake_[1], "x", 1);
  thread_.join();
  for (int fd : {listener_, wake_[0], wake_[1]}) ::close(fd);
}

size_t StallingRelay::Stall(const std::string& needle) {
  std::unique_lock<std::mutex> lock(mu_);
  stall_needle_ = needle;
  stall_pending_ = true;
  (void)!::write(wake_[1], "s", 1);
  // The relay thread answers at its next turn; a failed thread never does.
  stall_done_.wait_for(lock, std::chrono::seconds(30), [this] { return !stall_pending_ || !failure_.empty(); });
  return stall_pending_ ? 0 : stalled_;
}

void StallingRelay::StallFirstToSend(const std::string& needle) {
  std::lock_guard<std::mutex> lock(mu_);
  armed_needle_ = needle;
}

size_t StallingRelay::stalled() {
  std::lock_guard<std::mutex> lock(mu_);
  return stalled_total_;
}

size_t StallingRelay::CutStalled() {
  std::unique_lock<std::mutex> lock(mu_);
  cut_pending_ = true;
  (void)!::write(wake_[1], "c", 1);
  stall_done_.wait_for(lock, std::chrono::seconds(30), [this] { return !cut_pending_ || !failure_.empty(); });
  return cut_pending_ ? 0 : cut_;
}

size_t StallingRelay::HeldServerBytes() {
  std::unique_lock<std::mutex> lock(mu_);
  count_pending_ = true;
  (void)!::write(wake_[1], "n", 1);
  stall_done_.wait_for(lock, std::chrono::seconds(30),
                       [this] { return !count_pending_ || !failure_.empty(); });
  return count_pending_ ? 0 : held_bytes_;
}

std::string StallingRelay::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void StallingRelay::Run() {
  try {
    Relay();
  } catch (const std::exception& e) {  // reported to the test, not terminate()
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = e.what();
    stall_done_.notify_all();
  }
}

void StallingRelay::ApplyStall(std::vector<std::unique_ptr<Connection>>& connections) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stall_pending_) return;
  stalled_ = 0;
  for (auto& c : connections) {
    if (c->sent.find(stall_needle_) != std::string::npos) {
      if (!c->stalled) ++stalled_total_;
      c->stalled = true;
      ++stalled_;
    }
  }
  stall_pending_ = false;
  stall_done_.notify_all();
}

void StallingRelay::ApplyCut(std::vector<std::unique_ptr<Connection>>& connections) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cut_pending_) return;
  const size_t before = connections.size();
  std::erase_if(connections, [](const std::unique_ptr<Connection>& c) { return c->stalled; });
  cut_ = before - connections.size();
  cut_pending_ = false;
  stall_done_.notify_all();
}

void StallingRelay::ApplyCount(std::vector<std::unique_ptr<Connection>>& connections) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!count_pending_) return;
  held_bytes_ = 0;
  for (auto& c : connections) {
    int waiting = 0;
    if (c->stalled && ::ioctl(c->server->fd(), FIONREAD, &waiting) == 0 && waiting > 0) {
      held_bytes_ += static_cast<size_t>(waiting);
    }
  }
  count_pending_ = false;
  stall_done_.notify_all();
}

void StallingRelay::MatchArmed(Connection& c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (armed_needle_.empty() || c.stalled || c.sent.find(armed_needle_) == std::string::npos) return;
  c.stalled = true;
  ++stalled_total_;
  armed_needle_.clear();
}

void StallingRelay::Relay() {
  constexpr size_t kKeptRequestBytes = 1 << 20;  // enough to match request lines
  std::vector<std::unique_ptr<Connection>> connections;
  char buffer[1 << 16];
  for (;;) {
    std::vector<pollfd> wait = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    for (auto& c : connections) {
      wait.push_back({c->client, POLLIN, 0});
      // A stalled connection's server bytes stay where they are.
      wait.push_back({c->server->fd(), static_cast<short>(c->stalled ? 0 : POLLIN), 0});
    }
    if (::poll(wait.data(), wait.size(), -1) < 0) continue;  // EINTR
    if (wait[0].revents != 0) {
      char byte;
      (void)!::read(wake_[0], &byte, 1);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
      }
      ApplyStall(connections);
      ApplyCut(connections);
      ApplyCount(connections);
      continue;  // the poll set changed
    }
    std::vector<bool> closed(connections.size(), false);
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = *connections[i];
      for (int side = 0; side < 2 && !closed[i]; ++side) {
        if (wait[2 + 2 * i + side].revents == 0 || (side == 1 && c.stalled)) continue;
        const int from = side == 0 ? c.client : c.server->fd();
        const int to = side == 0 ? c.server->fd() : c.client;
        const ssize_t n = ::recv(from, buffer, sizeof(buffer), 0);
        if (n <= 0 || ::send(to, buffer, n, MSG_NOSIGNAL) != n) {
          closed[i] = true;
          break;
        }
        if (side == 0 && c.sent.size() < kKeptRequestBytes) {
          c.sent.append(buffer, n);
          MatchArmed(c);
        }
      }
    }
    for (size_t i = connections.size(); i-- > 0;) {
      if (closed[i]) connections.erase(connections.begin() + i);
    }
    if (wait[1].revents != 0) {
      const int accepted = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (accepted >= 0) {
        auto c = std::make_unique<Connection>();
        c->client = accepted;
        c->server = std::make_unique<RawSocket>(target_);
        connections.push_back(std::move(c));
      }
    }
  }
}

}  // namespace dispatch::testing
