// Fuzz target: raw bytes from a peer, on a fresh connection to an in-process
// DispatcherServer (its own loop and work dir, made once per process),
// through everything a peer reaches after the kernel: the accept path
// (RpcServer::Serve runs what the listener runs for an accepted socket), the
// message guard (framing, --max-message-bytes, the peer memory budget),
// Cap'n Proto's RPC protocol, the gateway (any token is accepted, so the
// dispatcher's methods are reachable) and the services, journal and replies.
// The connection is an in-memory pipe (kj::newTwoWayPipe), not a socket: a
// socket per input cost a connect, an accept and 1 ms polls, and ran the
// target at ~225 inputs/s. The input is written, the write side shut, and
// the loop run until the server closes the connection or kInputDeadline
// passes (then the input counts as slow, not as a failure). Properties: no
// crash; the server never stops (a storage failure or a shutdown would end
// it); a closed connection is forgotten (the open connection count returns
// to zero). Every kInputsPerDispatcher inputs the dispatcher shuts down
// cleanly and a fresh one starts in a new work dir: what the inputs
// registered and scheduled accumulates in one state, and past ~30,000
// inputs its size, not the input, set the cost of each (openCoordinator
// walks the coordinator's closures), so a campaign slowed as it ran.
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include <kj/async-io.h>

#include "common/log.h"
#include "reactor/dispatcher_server.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "tests/fuzz/fuzz_check.h"

namespace dispatch::fuzz {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kInputDeadline = 2000;  // ms
constexpr auto kForgetDeadline = std::chrono::seconds(2);
constexpr uint64_t kInputsPerDispatcher = 5000;

struct Harness {
  std::string dir;
  uvkj::UvLoop loop;
  std::unique_ptr<uvkj::UvAsyncIo> io;
  std::unique_ptr<reactor::DispatcherServer> server;
  uint64_t generation = 0;  // dispatchers started so far
  uint64_t inputs = 0;      // inputs given to the current one
  uint64_t slow_inputs = 0;
};

// A dispatcher in its own work dir under the harness dir, as the first one.
void StartDispatcher(Harness& h) {
  const std::string base = h.dir + "/" + std::to_string(h.generation++);
  std::filesystem::create_directories(base);
  reactor::DispatcherOptions options;
  // The listener is bound but unused: inputs come in through Serve().
  options.listen = "unix:" + base + "/gw.sock";
  options.work_dir = base + "/work";
  options.synchronous = storage::Synchronous::kNormal;  // no fsync per input
  options.tick_ms = 20;
  // Limits small enough for short inputs to cross them.
  options.limits.max_message_bytes = 64 << 10;
  options.limits.max_calls_in_flight_per_connection = 32;
  options.limits.max_nesting_depth = 16;
  h.server = std::make_unique<reactor::DispatcherServer>(*h.io, options);
  Result<std::string> bound = h.server->Start();
  FUZZ_CHECK(bound.ok(), "dispatcher did not start: %s", bound.status().ToString().c_str());
  h.inputs = 0;
}

// Shuts the current dispatcher down the way SIGTERM does (the loop runs until
// it is done), then removes its work dir and starts a fresh one.
void ReplaceDispatcher(Harness& h) {
  h.server->BeginShutdown("fuzz: fresh dispatcher");
  h.io->Run();
  FUZZ_CHECK(h.server->exit_code() == 0, "the dispatcher's shutdown failed (exit code %d)",
             h.server->exit_code());
  h.server.reset();
  h.io->wait_scope().poll();
  std::error_code ignored;
  std::filesystem::remove_all(h.dir + "/" + std::to_string(h.generation - 1), ignored);
  StartDispatcher(h);
}

std::string* g_dir = nullptr;
void RemoveDir() {
  std::error_code ignored;
  if (g_dir != nullptr) std::filesystem::remove_all(*g_dir, ignored);
}

// Never destroyed: the process ends with the fuzzer (atexit removes the dir).
Harness& TheHarness() {
  static Harness* h = [] {
    auto* harness = new Harness;
    std::string tmpl = (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                       std::string("/dispatch-fuzz-XXXXXX");
    FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp: %s", strerror(errno));
    harness->dir = tmpl;
    g_dir = &harness->dir;
    atexit(RemoveDir);
    // Quiet (KJ's own log too): a peer's bad bytes are not news. DISPATCH_FUZZ_LOG=1: everything.
    SetLogLevel(std::getenv("DISPATCH_FUZZ_LOG") ? LogLevel::kDebug : LogLevel::kError);
    harness->io = std::make_unique<uvkj::UvAsyncIo>(harness->loop.get());
    StartDispatcher(*harness);
    return harness;
  }();
  return *h;
}

// Reads (and drops) the server's replies until it closes the connection.
kj::Promise<void> ReadUntilClosed(kj::AsyncIoStream& peer, kj::byte* buf, size_t size) {
  return peer.tryRead(buf, 1, size).then([&peer, buf, size](size_t n) -> kj::Promise<void> {
    if (n == 0) return kj::READY_NOW;
    return ReadUntilClosed(peer, buf, size);
  });
}

}  // namespace
}  // namespace dispatch::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dispatch::fuzz;
  Harness& h = TheHarness();
  if (h.inputs == kInputsPerDispatcher) ReplaceDispatcher(h);
  ++h.inputs;
  kj::WaitScope& wait_scope = h.io->wait_scope();

  auto pipe = kj::newTwoWayPipe();
  kj::Own<kj::AsyncIoStream> peer = kj::mv(pipe.ends[0]);
  h.server->rpc().Serve(kj::mv(pipe.ends[1]));

  // The write fails when the server closes before reading it all: fine.
  kj::Promise<void> write = peer->write(data, size)
                                .then([&peer]() { peer->shutdownWrite(); })
                                .eagerlyEvaluate([](kj::Exception&&) {});
  static kj::byte buf[1 << 16];
  bool slow = false;
  ReadUntilClosed(*peer, buf, sizeof(buf))
      .catch_([](kj::Exception&&) {})  // a broken pipe is a close too
      .exclusiveJoin(h.io->timer().afterDelay(kInputDeadline * kj::MILLISECONDS).then([&slow]() {
        slow = true;
      }))
      .wait(wait_scope);
  if (slow) ++h.slow_inputs;
  write = nullptr;
  peer = nullptr;  // the server sees the peer go away
  FUZZ_CHECK(!h.server->shutting_down(), "the dispatcher stopped (exit code %d)",
             h.server->exit_code());
  const auto closed_at = Clock::now();
  // The close takes a few loop passes; a pass costs microseconds, a timer
  // tick a millisecond (libuv's resolution), which once made the target run
  // at ~800 inputs/s. Timer ticks only if the passes are not enough.
  for (int pass = 0; pass < 64 && h.server->rpc().connection_count() != 0; ++pass) {
    wait_scope.poll();
  }
  while (h.server->rpc().connection_count() != 0) {
    FUZZ_CHECK(Clock::now() - closed_at < kForgetDeadline,
               "%zu connections still open after the peer closed",
               h.server->rpc().connection_count());
    h.io->timer().afterDelay(1 * kj::MILLISECONDS).wait(wait_scope);
  }
  return 0;
}
