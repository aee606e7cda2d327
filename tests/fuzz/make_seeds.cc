// Writes the seed corpus of every fuzz target under DIR/<target>/ (the
// checked-in tests/fuzz/corpus was made by it): journal records valid and
// invalid for the small state (one per variant from the builders, and a run
// of generated ones), snapshots of states of several sizes, the bytes a
// real Cap'n Proto client sends on a gateway connection for a few sessions,
// dataset definitions, flag lines and etcd journal groups. Usage:
// fuzz_make_seeds DIR
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "reactor/ha/wire/journal_group_codec.h"
#include "schema/dispatcher.capnp.h"
#include "state/codec.h"
#include "tests/fuzz/small_state.h"
#include "tests/state/update_builders.h"

namespace dispatch::fuzz {
namespace {

namespace fs = std::filesystem;
using state::testing::OwnedUpdate;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void JournalRecords(const fs::path& dir) {
  for (journal::Update::Which which : state::testing::AllTransitionVariants()) {
    int i = 0;
    for (const OwnedUpdate& update : state::testing::BuilderExamples(which)) {
      Write(dir, std::string("example-") + state::testing::VariantName(which) + "-" +
                     std::to_string(i++),
            update.ToBytes());
    }
  }
  // Records valid for the small state: drawn right after building it.
  state::testing::UpdateGenerator generator(kSmallStateSeed);
  state::DispatcherState state = BuildSmallState(generator);
  for (int i = 0; i < 40; ++i) {
    OwnedUpdate update = generator.Next(state);
    Write(dir, "valid-" + std::to_string(i), update.ToBytes());
  }
}

void Snapshots(const fs::path& dir) {
  for (int count : {0, 1, 10, 60, 120}) {
    state::testing::UpdateGenerator generator(kSmallStateSeed + count);
    state::DispatcherState state = BuildSmallState(generator, count);
    Write(dir, "after-" + std::to_string(count) + "-updates", state::EncodeSnapshot(state));
  }
}

// The bytes a TwoPartyClient writes for `session` (requests pipelined on
// the gateway's bootstrap, no replies): what a real peer sends first.
std::string ClientBytes(const std::function<void(rpc::Gateway::Client, kj::Vector<kj::Promise<void>>&)>& session) {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto pipe = kj::newTwoWayPipe();
  std::string out;
  {
    capnp::TwoPartyClient client(*pipe.ends[0]);
    kj::Vector<kj::Promise<void>> calls;
    session(client.bootstrap().castAs<rpc::Gateway>(), calls);
    char buf[1 << 16];
    while (true) {
      auto read = pipe.ends[1]->tryRead(buf, 1, sizeof(buf));
      if (!read.poll(io.waitScope)) break;
      size_t n = read.wait(io.waitScope);
      if (n == 0) break;
      out.append(buf, n);
    }
  }
  return out;
}

rpc::Dispatcher::Client Authenticate(rpc::Gateway::Client gateway, kj::Vector<kj::Promise<void>>& calls,
                                     const char* token = "") {
  auto request = gateway.authenticateRequest();
  request.setToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(token), strlen(token)));
  auto promise = request.send();
  rpc::Dispatcher::Client dispatcher = promise.getDispatcher();
  calls.add(promise.ignoreResult());
  return dispatcher;
}

kj::ArrayPtr<const kj::byte> Bytes(const char* text) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(text), strlen(text));
}

void GatewaySessions(const fs::path& dir) {
  Write(dir, "bootstrap", ClientBytes([](rpc::Gateway::Client, kj::Vector<kj::Promise<void>>&) {}));
  Write(dir, "ping", ClientBytes([](rpc::Gateway::Client g, kj::Vector<kj::Promise<void>>& calls) {
          auto d = Authenticate(g, calls);
          auto ping = d.pingRequest();
          ping.setPayload(Bytes("hello"));
          calls.add(ping.send().ignoreResult());
          calls.add(d.getVersionRequest().send().ignoreResult());
          calls.add(d.getServerStatsRequest().send().ignoreResult());
        }));
  Write(dir, "dataset-and-job",
        ClientBytes([](rpc::Gateway::Client g, kj::Vector<kj::Promise<void>>& calls) {
          auto d = Authenticate(g, calls);
          auto reg = d.getOrRegisterDatasetRequest();
          reg.setDefinition(Bytes("range count=100 splits=4"));
          reg.initSplitSource().setIndexed(4);
          calls.add(reg.send().ignoreResult());
          calls.add(d.listDatasetsRequest().send().ignoreResult());
          auto def = d.getDatasetDefRequest();
          def.setDatasetId(1);
          calls.add(def.send().ignoreResult());
          auto job = d.getOrCreateJobRequest();
          job.initRequest().setDatasetId(1);
          job.getRequest().setProcessingMode(rpc::ProcessingMode::DYNAMIC);
          job.getRequest().setJobName("fuzz");
          calls.add(job.send().ignoreResult());
          calls.add(d.listJobsRequest().send().ignoreResult());
          calls.add(d.listJobClientsRequest().send().ignoreResult());
          auto split = d.getSplitRequest();
          split.initRequest().setTaskId(1);
          split.getRequest().setSequence(1);
          calls.add(split.send().ignoreResult());
        }));
  Write(dir, "worker", ClientBytes([](rpc::Gateway::Client g, kj::Vector<kj::Promise<void>>& calls) {
          auto d = Authenticate(g, calls);
          auto hb = d.workerHeartbeatRequest();
          auto r = hb.initRequest();
          r.setAddress("fuzz-worker:1");
          r.setTransferAddress("tcp:127.0.0.1:1");
          r.setWorkerIncarnation(7);
          r.setMaxClosures(2);
          r.initFunctions(1).set(0, "noop");
          calls.add(hb.send().ignoreResult());
          calls.add(d.getWorkersRequest().send().ignoreResult());
          calls.add(d.listTasksRequest().send().ignoreResult());
        }));
  Write(dir, "coordinator",
        ClientBytes([](rpc::Gateway::Client g, kj::Vector<kj::Promise<void>>& calls) {
          auto d = Authenticate(g, calls);
          auto open = d.openCoordinatorRequest();
          open.setCoordinatorId(11);
          auto opened = open.send();
          auto coordinator = opened.getCoordinator();
          calls.add(opened.ignoreResult());
          auto schedule = coordinator.scheduleRequest();
          auto specs = schedule.initClosures(2);
          specs[0].setFunction("noop");
          specs[0].setRequestId(1);
          specs[1].setFunction("echo");
          specs[1].setArgs(Bytes("x"));
          calls.add(schedule.send().ignoreResult());
          auto join = coordinator.joinRequest();
          join.setWait(false);
          calls.add(join.send().ignoreResult());
          auto outcomes = coordinator.getOutcomesRequest();
          outcomes.initClosureIds(1).set(0, 1);
          calls.add(outcomes.send().ignoreResult());
          calls.add(d.getClosureStatsRequest().send().ignoreResult());
        }));
}

void DatasetDefinitions(const fs::path& dir) {
  Write(dir, "range", "range count=1000 splits=10");
  Write(dir, "synthetic", "synthetic size=64 count=5 splits=2");
  Write(dir, "lines", "lines\n/nonexistent/a.txt\n/nonexistent/b.txt\n");
  Write(dir, "bad-arg", "range count=-1 splits=0 x");
}

void FlagLines(const fs::path& dir) {
  auto join = [](std::vector<std::string> args) {
    std::string out;
    for (size_t i = 0; i < args.size(); ++i) {
      if (i > 0) out.push_back('\0');
      out += args[i];
    }
    return out;
  };
  Write(dir, "all", join({"--listen=unix:/tmp/x.sock", "--log-level", "debug", "--tick-ms=5",
                          "--budget", "1048576", "--flag", "--list=a,b,c"}));
  Write(dir, "bad", join({"--tick-ms=0", "--flag=maybe"}));
  Write(dir, "positional", join({"run", "--", "--help"}));
}

// Journal groups as the etcd journal writes them (gzipped and packed), each
// twice: as the whole value (first byte 0) and as the body behind the CRC
// (first byte 1), the two ways journal_group_fuzzer.cc reads its input.
void JournalGroups(const fs::path& dir) {
  std::vector<JournalBatch> passes(3);
  passes[0].AddRecord("a short record");
  passes[0].PutDataset("dataset-1", "range count=1000 splits=10");
  for (int i = 0; i < 50; ++i) passes[1].AddRecord(std::string(40, static_cast<char>('a' + i % 26)));
  passes[1].PutResult(7, "result of closure 7");
  passes[2].DeleteResult(7);
  std::string noise(300, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 13);
  passes[2].AddRecord(noise);
  const std::vector<std::pair<std::string, std::vector<const JournalBatch*>>> groups = {
      {"one-pass", {&passes[0]}},
      {"repetitive", {&passes[1]}},
      {"three-passes", {&passes[0], &passes[1], &passes[2]}},
      {"incompressible", {&passes[2]}},
  };
  for (const auto& [name, group] : groups) {
    const std::string value = ha::EncodeJournalGroup(41, group);
    Write(dir, name + "-value", std::string(1, '\0') + value);
    Write(dir, name + "-body", std::string(1, '\1') + value.substr(4));
  }
}

}  // namespace
}  // namespace dispatch::fuzz

int main(int argc, char** argv) {
  using namespace dispatch::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  JournalRecords(root / "journal_record");
  Snapshots(root / "snapshot");
  GatewaySessions(root / "gateway_rpc");
  DatasetDefinitions(root / "dataset_definition");
  FlagLines(root / "flags");
  JournalGroups(root / "journal_group");
  return 0;
}
