#include "tests/compat/fixture_support.h"

#include <kj/encoding.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "reactor/durable_state.h"
#include "reactor/etcd/etcd_client.h"
#include "reactor/ha/etcd_state_reader.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "storage/store.h"
#include "tests/integration/client_loop.h"
#include "tests/support/subprocess.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

kj::ArrayPtr<const kj::byte> Bytes(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

// Runs `argv` to its end (60 s at most); OK when it exits 0.
Status RunToEnd(std::vector<std::string> argv) {
  const std::string what = argv[0];
  Subprocess process(std::move(argv));
  while (process.ReadLine(60s)) {
  }
  auto status = process.Wait(60s);
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return InternalError(what + " did not exit 0");
  }
  return Status::Ok();
}

// The outcomes `coordinator` reports until `ids` all came (releasing
// `release` first).
Status AwaitOutcomes(ClientLoop& loop, rpc::Coordinator::Client& coordinator,
                     std::set<uint64_t> ids, std::vector<uint64_t> release) {
  while (!ids.empty()) {
    auto request = coordinator.awaitResultsRequest();
    auto list = request.initRelease(release.size());
    for (size_t i = 0; i < release.size(); ++i) list.set(i, release[i]);
    release.clear();
    auto reply = loop.Wait(request.send());
    for (auto outcome : reply.getResults()) ids.erase(outcome.getClosureId());
  }
  return Status::Ok();
}

Status Traffic(ClientLoop& loop, const std::string& address) {
  auto conn = loop.Connect(address);
  rpc::Dispatcher::Client dispatcher = conn->dispatcher();
  Subprocess worker({DISPATCH_WORKER_BINARY, "--dispatcher=" + address, "--address=tcp:127.0.0.1:0",
                     "--seed=17", "--log-level=warning"});
  if (!WaitUntil(
          [&] { return loop.Wait(dispatcher.getWorkersRequest().send()).getWorkers().size() == 1; },
          loop)) {
    return InternalError("the worker did not register");
  }
  auto open = dispatcher.openCoordinatorRequest();
  open.setCoordinatorId(kFixtureCoordinator);
  rpc::Coordinator::Client coordinator = loop.Wait(open.send()).getCoordinator();

  // Five closures that finish: four small results (rows) and one over
  // kFixtureResultFileBytes (a file under results/).
  auto first = coordinator.scheduleRequest();
  auto specs = first.initClosures(5);
  for (uint32_t i = 0; i < 4; ++i) {
    specs[i].setFunction("echo");
    specs[i].setArgs(Bytes("result " + std::to_string(i)));
    specs[i].setRequestId(1 + i);
  }
  specs[4].setFunction("bytes");
  specs[4].setArgs(
      Bytes(std::to_string(kFixtureBigResultBytes) + ":" + std::to_string(kFixtureBigResultSeed)));
  specs[4].setRequestId(5);
  auto scheduled = loop.Wait(first.send());
  std::vector<uint64_t> ids;
  for (uint64_t id : scheduled.getClosureIds()) ids.push_back(id);
  DISPATCH_RETURN_IF_ERROR(AwaitOutcomes(loop, coordinator, {ids.begin(), ids.end()}, {}));

  // A user error (the coordinator's first error), then release two
  // results: the other three stay held for a later fetch.
  auto second = coordinator.scheduleRequest();
  auto failing = second.initClosures(1);
  failing[0].setFunction("fail");
  failing[0].setArgs(Bytes("the fixture's user error"));
  failing[0].setRequestId(6);
  auto failed = loop.Wait(second.send());
  std::set<uint64_t> failed_ids;
  for (uint64_t id : failed.getClosureIds()) failed_ids.insert(id);
  DISPATCH_RETURN_IF_ERROR(AwaitOutcomes(loop, coordinator, failed_ids, {ids[0], ids[1]}));

  // A dataset, a DYNAMIC job, its tasks, a job client and splits handed out
  // (a quarter of them read).
  DISPATCH_RETURN_IF_ERROR(
      RunToEnd({DISPATCHCTL_BINARY, "--dispatcher=" + address, "read", "--mode=dynamic",
                "--limit=250", "range", "count=1000", "splits=10"}));
  worker.Signal(SIGTERM);
  auto ended = worker.Wait(30s);
  if (!ended || !WIFEXITED(*ended) || WEXITSTATUS(*ended) != 0) {
    return InternalError("the worker did not stop cleanly");
  }
  // The worker's removal is journaled before this reply (the barrier).
  if (!WaitUntil(
          [&] { return loop.Wait(dispatcher.getWorkersRequest().send()).getWorkers().size() == 0; },
          loop)) {
    return InternalError("the worker was not removed");
  }
  return Status::Ok();
}

template <typename T>
T Await(uvkj::UvAsyncIo& io, kj::Promise<T> promise) {
  return io.timer().timeoutAfter(60 * kj::SECONDS, kj::mv(promise)).wait(io.wait_scope());
}

}  // namespace

std::string FixtureDir() { return DISPATCH_COMPAT_FIXTURE_DIR; }

HeldFixtureResults FetchHeldFixtureResults(ClientLoop& loop, rpc::Dispatcher::Client dispatcher) {
  auto open = dispatcher.openCoordinatorRequest();
  open.setCoordinatorId(kFixtureCoordinator);
  auto coordinator = loop.Wait(open.send()).getCoordinator();
  auto held = loop.Wait(coordinator.awaitResultsRequest().send());
  HeldFixtureResults out;
  for (auto outcome : held.getResults()) {
    if (outcome.getState() != rpc::ClosureState::FINISHED) continue;
    ++out.finished;
    auto bytes = outcome.getResult();
    if (bytes.size() == kFixtureBigResultBytes) {
      out.big.emplace(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
    }
  }
  return out;
}

Status DriveFixtureTraffic(const std::string& address) {
  ClientLoop loop;
  Status status;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { status = Traffic(loop, address); })) {
    return InternalError(std::string("the fixture's traffic failed: ") +
                         e->getDescription().cStr());
  }
  return status;
}

Result<Replayed> ReplayWorkDir(const std::string& dir) {
  uvkj::UvLoop loop;
  Replayed replayed;
  {
    storage::StoreOptions options;
    options.work_dir = dir;
    options.synchronous = storage::Synchronous::kNormal;
    auto store = storage::Store::Open(options);
    if (!store.ok()) return store.status();
    auto durable =
        reactor::DurableState::Recover(loop.get(), **store, reactor::DurableStateOptions{});
    if (!durable.ok()) return durable.status();
    replayed.digest = (*durable)->state().Digest();
    replayed.applied = (*durable)->state().NumApplied();
  }
  loop.Close();
  return replayed;
}

std::string FormatDigestFile(const Replayed& replayed) {
  return "digest=" + std::to_string(replayed.digest) +
         "\napplied=" + std::to_string(replayed.applied) + "\n";
}

Result<Replayed> ParseDigestFile(const std::string& text) {
  Replayed replayed;
  int found = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    const uint64_t value = std::stoull(line.substr(eq + 1));
    if (key == "digest") replayed.digest = value, ++found;
    if (key == "applied") replayed.applied = value, ++found;
  }
  if (found != 2) return InvalidArgumentError("a digest file needs digest= and applied=");
  return replayed;
}

std::string FormatDump(const std::vector<std::pair<std::string, std::string>>& kvs) {
  std::string out;
  for (const auto& [key, value] : kvs) {
    out += kj::encodeBase64(Bytes(key)).cStr();
    out += " ";
    out += kj::encodeBase64(Bytes(value)).cStr();
    out += "\n";
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> ParseDump(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> kvs;
  std::istringstream in(text);
  std::string line;
  auto decode = [](const std::string& b64) {
    auto bytes = kj::decodeBase64(kj::arrayPtr(b64.data(), b64.size()));
    return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  };
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) return DataLossError("a dump line without a space");
    kvs.emplace_back(decode(line.substr(0, space)), decode(line.substr(space + 1)));
  }
  return kvs;
}

namespace {

// Runs `body` with an etcd client of its own loop; returns what it returned.
Status WithEtcdClient(const std::vector<std::string>& endpoints,
                      const std::function<Status(uvkj::UvAsyncIo&, etcd::EtcdClient&)>& body) {
  uvkj::UvLoop loop;
  Status status;
  {
    uvkj::UvAsyncIo io(loop.get());
    etcd::EtcdClientOptions options;
    options.endpoints = endpoints;
    options.max_answer_bytes = size_t{64} << 20;
    etcd::EtcdClient client(io, options);
    status = body(io, client);
  }
  loop.Close();
  return status;
}

}  // namespace

Result<std::vector<std::pair<std::string, std::string>>> ReadEtcdKeys(
    const std::vector<std::string>& endpoints, const std::string& prefix) {
  std::vector<std::pair<std::string, std::string>> kvs;
  Status status =
      WithEtcdClient(endpoints, [&](uvkj::UvAsyncIo& io, etcd::EtcdClient& client) -> Status {
        for (const std::string sub : {"/journal/", "/snapshot/"}) {
          const std::string from = prefix + sub;
          auto range = Await(io, client.Range(from, etcd::PrefixEnd(from)));
          if (!range.ok()) return range.status();
          for (auto& kv : range->kvs) kvs.emplace_back(kv.key, kv.value);
        }
        return Status::Ok();
      });
  if (!status.ok()) return status;
  return kvs;
}

Result<Replayed> ReplayEtcdDump(const std::vector<std::string>& endpoints,
                                const std::vector<std::pair<std::string, std::string>>& kvs,
                                const std::string& scratch_dir) {
  Status status =
      WithEtcdClient(endpoints, [&](uvkj::UvAsyncIo& io, etcd::EtcdClient& client) -> Status {
        for (const auto& [key, value] : kvs) {
          auto put = Await(io, client.Put(key, value));
          if (!put.ok()) return put.status();
        }
        storage::StoreOptions store_options;
        store_options.work_dir = scratch_dir;
        store_options.synchronous = storage::Synchronous::kNormal;
        auto store = storage::Store::Open(store_options);
        if (!store.ok()) return store.status();
        ha::EtcdStateReader reader(client, kFixturePrefix);
        DISPATCH_RETURN_IF_ERROR(Await(io, reader.LoadSnapshot(**store, 0)));
        return Await(io, reader.ReadJournal(**store, 0));
      });
  if (!status.ok()) return status;
  return ReplayWorkDir(scratch_dir);
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Status WriteWholeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  out.close();
  if (!out) return UnavailableError("cannot write " + path);
  return Status::Ok();
}

Status CopyDir(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive, ec);
  if (ec) return UnavailableError("cannot copy " + from + " to " + to + ": " + ec.message());
  return Status::Ok();
}

}  // namespace dispatch::testing
