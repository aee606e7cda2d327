// Versions and compatibility (PROTOCOL.md, "Versions and compatibility"):
// a dispatcher refuses a work dir of a newer format, naming both versions and
// changing nothing, and tells a peer older than the oldest protocol it serves
// to upgrade, naming both versions; older-format-less peers (no version sent)
// and newer peers are served.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "common/protocol_version.h"
#include "common/rpc_status.h"
#include "reactor/dispatcher_server.h"
#include "storage/format.h"
#include "storage/sqlite.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/raw_peer.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

rpc::Dispatcher::Client AuthenticateAs(RawPeer& peer, uint32_t protocol) {
  auto request = peer.gateway().authenticateRequest();
  request.setProtocol(protocol);
  return peer.Wait(request.send()).getDispatcher();
}

TEST(PeerProtocol, APeerOlderThanTheOldestServedIsToldToUpgradeNamingBothVersions) {
  EXPECT_TRUE(CheckPeerProtocol(0, 1).ok());  // sent none: protocol 1
  EXPECT_TRUE(CheckPeerProtocol(1, 1).ok());
  EXPECT_TRUE(CheckPeerProtocol(7, 1).ok());  // newer peers are served
  Status old = CheckPeerProtocol(2, 3);
  EXPECT_EQ(old.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(old.message().find("protocol version 2 "), std::string::npos) << old.message();
  EXPECT_NE(old.message().find("protocol version 3 or newer"), std::string::npos) << old.message();
  EXPECT_NE(old.message().find("upgrade"), std::string::npos) << old.message();
  Status silent = CheckPeerProtocol(0, 2);
  EXPECT_EQ(silent.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(silent.message().find("protocol version 1 (it sent no version)"), std::string::npos)
      << silent.message();
}

// Today's dispatcher serves a peer built before Gateway.authenticate carried
// a version (it sends none), one of today's version, and a newer one.
TEST(PeerProtocol, TodaysDispatcherServesPeersWithoutAVersionAndNewerOnes) {
  DispatcherProcess dispatcher;
  for (uint32_t protocol : {0u, kProtocolVersion, kProtocolVersion + 5}) {
    RawPeer peer(dispatcher.address());
    auto cap = AuthenticateAs(peer, protocol);
    auto version = peer.Wait(cap.getVersionRequest().send()).getVersion();
    EXPECT_EQ(version.getProtocol(), kProtocolVersion) << "peer of protocol " << protocol;
  }
}

// A dispatcher embedded on a thread of its own, with the oldest protocol it
// serves raised above today's: what a later release that dropped today's
// protocol does to today's clients.
class LaterDispatcher {
 public:
  explicit LaterDispatcher(uint32_t oldest_peer_protocol) {
    std::promise<std::string> address;
    thread_ = std::thread([this, oldest_peer_protocol, &address]() {
      uvkj::UvLoop loop;
      {
        uvkj::UvAsyncIo io(loop.get());
        reactor::DispatcherOptions options;
        options.listen = "tcp:127.0.0.1:0";
        options.work_dir = dir_.File("work");
        options.token = "t0ken";
        options.oldest_peer_protocol = oldest_peer_protocol;
        {
          reactor::DispatcherServer server(io, options);
          auto bound = server.Start();
          server_ = &server;
          executor_ = &kj::getCurrentThreadExecutor();
          address.set_value(bound.ok() ? *bound : "");
          if (bound.ok()) io.Run();
        }
        io.wait_scope().poll();
      }
      loop.Close();
    });
    address_ = address.get_future().get();
  }
  ~LaterDispatcher() {
    if (!address_.empty()) executor_->executeSync([&]() { server_->BeginShutdown("test done"); });
    thread_.join();
  }
  const std::string& address() const { return address_; }

 private:
  TempDir dir_;
  std::thread thread_;
  std::string address_;
  reactor::DispatcherServer* server_ = nullptr;
  const kj::Executor* executor_ = nullptr;
};

TEST(PeerProtocol, ALaterDispatcherTellsTodaysClientToUpgradeAndKeepsItAtTheGate) {
  LaterDispatcher later(kProtocolVersion + 1);
  ASSERT_FALSE(later.address().empty());
  {
    // Our own client (every worker, consumer, coordinator and dispatchctl
    // connects through it) sends today's version and hears why it is refused.
    ClientLoop loop;
    Status refused;
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { loop.Connect(later.address(), "t0ken"); })) {
      refused = StatusFromException(*e);
    }
    EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
    const std::string today = "protocol version " + std::to_string(kProtocolVersion) + " ";
    const std::string oldest =
        "protocol version " + std::to_string(kProtocolVersion + 1) + " or newer";
    EXPECT_NE(refused.message().find(today), std::string::npos) << refused.message();
    EXPECT_NE(refused.message().find(oldest), std::string::npos) << refused.message();
    EXPECT_NE(refused.message().find("upgrade the worker or client"), std::string::npos)
        << refused.message();
  }
  RawPeer peer(later.address());
  // A wrong token learns nothing about versions.
  auto wrong = peer.gateway().authenticateRequest();
  wrong.setProtocol(kProtocolVersion);
  auto unauthenticated = peer.Failure(wrong.send());
  ASSERT_TRUE(unauthenticated.has_value());
  EXPECT_NE(std::string(unauthenticated->getDescription().cStr()).find("Unauthenticated: "),
            std::string::npos);
  // A peer without a version is protocol 1, too old here.
  auto silent = peer.gateway().authenticateRequest();
  silent.setToken(kj::StringPtr("t0ken").asBytes());
  auto old = peer.Failure(silent.send());
  ASSERT_TRUE(old.has_value());
  EXPECT_NE(std::string(old->getDescription().cStr()).find("FailedPrecondition: "),
            std::string::npos)
      << old->getDescription().cStr();
  // The connection stays at the gate: an upgraded peer gets in on it.
  auto upgraded = peer.gateway().authenticateRequest();
  upgraded.setToken(kj::StringPtr("t0ken").asBytes());
  upgraded.setProtocol(kProtocolVersion + 1);
  auto cap = peer.Wait(upgraded.send()).getDispatcher();
  EXPECT_EQ(peer.Wait(cap.pingRequest().send()).getPayload().size(), 0u);
}

// A work dir written by a newer dispatcher (a higher user_version in
// dispatch.db) is refused at start-up with exit 1, naming both versions, and
// the journal database is left byte for byte as it was.
TEST(WorkDirFormat, ANewerFormatIsRefusedNamingBothVersionsAndChangesNothing) {
  TempDir dir;
  const std::string work = dir.File("work");
  {
    DispatcherProcess first({.work_dir = work});
    ASSERT_TRUE(first.Terminate().has_value());
  }
  const int newer = storage::kFormatVersion + 1;
  {
    auto db = storage::OpenSqlite(work + "/dispatch.db", SQLITE_OPEN_READWRITE, "test");
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    const std::string pragma = "PRAGMA user_version=" + std::to_string(newer);
    ASSERT_TRUE(storage::ExecSql(db->get(), pragma.c_str(), "test").ok());
    ASSERT_TRUE(storage::ExecSql(db->get(), "PRAGMA wal_checkpoint(TRUNCATE)", "test").ok());
  }
  const std::string before = ReadFile(work + "/dispatch.db");
  const std::string log = dir.File("stderr");
  Subprocess process(
      {DispatcherBinary(), "--listen=tcp:127.0.0.1:0", "--http=off", "--work-dir=" + work}, log);
  auto status = process.Wait(30s);
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  const std::string said = ReadFile(log);
  EXPECT_NE(said.find("format version " + std::to_string(newer)), std::string::npos) << said;
  EXPECT_NE(said.find("versions 1 to " + std::to_string(storage::kFormatVersion)),
            std::string::npos)
      << said;
  EXPECT_EQ(ReadFile(work + "/dispatch.db"), before);
}

}  // namespace
}  // namespace dispatch::testing
