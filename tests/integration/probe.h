// Helpers for tests that attack the dispatcher and check that an ordinary
// client is still served: a probe connection that pings and reads the server
// counters, and the header of a Cap'n Proto frame for raw-socket peers.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "tests/integration/client_loop.h"

namespace dispatch::testing {

struct Probe {
  ClientLoop& loop;
  kj::Own<clients::DispatcherConnection> conn;

  // A ping of `size` bytes comes back with the same bytes.
  void PingOk(size_t size = 100) {
    auto payload = kj::heapArray<kj::byte>(size);
    for (size_t i = 0; i < size; ++i) payload[i] = static_cast<kj::byte>(i * 7);
    auto request = conn->dispatcher().pingRequest();
    request.setPayload(payload);
    auto response = loop.Wait(request.send());
    ASSERT_EQ(response.getPayload(), payload.asPtr());
  }

  capnp::Response<rpc::Dispatcher::GetServerStatsResults> Stats() {
    return loop.Wait(conn->dispatcher().getServerStatsRequest().send());
  }

  // Waits until exactly `n` connections are open on the server.
  bool OpenConnectionsReach(uint32_t n) {
    return WaitUntil([&] { return Stats().getStats().getConnectionsOpen() == n; }, loop);
  }
};

// A Cap'n Proto frame header: one segment of `words` words.
inline std::string FrameHeader(uint32_t words) {
  std::string header(8, '\0');
  uint32_t segments_minus_one = 0;
  memcpy(&header[0], &segments_minus_one, 4);
  memcpy(&header[4], &words, 4);
  return header;
}

}  // namespace dispatch::testing
