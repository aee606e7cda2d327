// A candidate in its own process, for the election tests to kill -9 and
// SIGSTOP: `election_helper ENDPOINTS KEY NAME TTL_SECONDS [REQUEST_TIMEOUT_MS]`. It prints one line
// per event on stdout: "leader REVISION", "following VALUE", "lost MESSAGE"
// (then it exits with 3, as a dispatcher that lost its lease stops serving).
// With $ELECTION_HELPER_READY_FILE set, each campaign waits until that file
// exists (LeaderElectionCallbacks::ready_to_lead, as a loading standby does),
// printing "holding back" when it has to wait. With $ELECTION_HELPER_SAY_LEASE
// set it first prints "granted LEASE" (hex) once its lease is granted.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

#include "reactor/etcd/etcd_client.h"
#include "reactor/etcd/leader_election.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"

using namespace dispatch;

namespace {

kj::Promise<void> WaitForFile(uvkj::UvAsyncIo& io, std::string path) {
  if (access(path.c_str(), F_OK) == 0) return kj::READY_NOW;
  return io.timer().afterDelay(20 * kj::MILLISECONDS).then([&io, path]() { return WaitForFile(io, path); });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s ENDPOINTS KEY NAME TTL_SECONDS [REQUEST_TIMEOUT_MS]\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  etcd::EtcdClientOptions client_options;
  std::stringstream list(argv[1]);
  for (std::string e; std::getline(list, e, ',');) client_options.endpoints.push_back(e);
  if (argc == 6) client_options.request_timeout = std::chrono::milliseconds(std::atoll(argv[5]));
  uvkj::UvLoop loop;
  int exit_code = 0;
  {
    auto io = std::make_unique<uvkj::UvAsyncIo>(loop.get());
    auto client = std::make_unique<etcd::EtcdClient>(*io, client_options);
    etcd::LeaderElectionCallbacks callbacks;
    etcd::LeaderElection* self = nullptr;
    callbacks.elected = [&self](int64_t revision) {
      std::printf("leader %lld lease %llx\n", static_cast<long long>(revision),
                  static_cast<unsigned long long>(self->lease_id()));
    };
    if (std::getenv("ELECTION_HELPER_SAY_LEASE") != nullptr) {
      callbacks.granted = [](int64_t lease) {
        std::printf("granted %llx\n", static_cast<unsigned long long>(lease));
      };
    }
    callbacks.following = [](const etcd::KeyValue& leader) { std::printf("following %s\n", leader.value.c_str()); };
    callbacks.lost = [&](const Status& why) {
      std::printf("lost %s\n", why.ToString().c_str());
      exit_code = 3;
      io->Stop();
    };
    const char* ready_file = std::getenv("ELECTION_HELPER_READY_FILE");
    if (ready_file != nullptr) {
      callbacks.ready_to_lead = [&io, path = std::string(ready_file)]() -> kj::Promise<void> {
        if (access(path.c_str(), F_OK) == 0) return kj::READY_NOW;
        std::printf("holding back\n");
        return WaitForFile(*io, path);
      };
    }
    auto election = std::make_unique<etcd::LeaderElection>(
        *io, *client, etcd::LeaderElectionOptions{argv[2], argv[3], std::atoll(argv[4])}, callbacks);
    self = election.get();
    election->Start();
    io->Run();
    std::fflush(stdout);
    // Exit without unwinding the loop's remaining handles: the process is done.
    std::_Exit(exit_code);
  }
}
