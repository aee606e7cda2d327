// The fixtures of tests/compat/ (issue 49, "formats that last"): what writes
// them (real dispatcher, worker and dispatchctl processes driven through a
// fixed script of calls) and what reads them back (a copy of the work dir
// replayed through Store::Open and DurableState::Recover; the etcd dump put
// into a real etcd and read back through the HA state reader). A fixture's
// digest file holds the state digest its replay gave when it was written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "schema/dispatcher.capnp.h"
#include "tests/integration/client_loop.h"

namespace dispatch::testing {

// The coordinator id of the fixture's closures.
inline constexpr uint64_t kFixtureCoordinator = 7;
// The prefix of the HA group whose etcd keys the dump holds.
inline constexpr const char* kFixturePrefix = "/test/group";  // HaGroup's
// The `bytes` closure's arguments and the size over which results are files.
inline constexpr uint64_t kFixtureBigResultBytes = 6000;
inline constexpr uint64_t kFixtureBigResultSeed = 3;
inline constexpr uint64_t kFixtureResultFileBytes = 4096;

// Source-tree paths of the committed fixtures.
std::string FixtureDir();

// Drives the dispatcher at `address` through the fixture's script: a
// dispatch-worker registers; coordinator kFixtureCoordinator schedules
// closures (echo, one `bytes` result over kFixtureResultFileBytes, one user
// error), fetches all and releases some; dispatchctl reads part of a DYNAMIC
// `range` dataset. Returns once every reply arrived and the worker stopped.
Status DriveFixtureTraffic(const std::string& address);

// What `dispatcher` serves kFixtureCoordinator of the fixture's closures:
// how many finished results it holds, and the large one (kept in a result
// file), if it is among them.
struct HeldFixtureResults {
  size_t finished = 0;
  std::optional<std::string> big;
};
HeldFixtureResults FetchHeldFixtureResults(ClientLoop& loop, rpc::Dispatcher::Client dispatcher);

// The state digest and update count of the work dir `dir` replayed (it is
// opened for writing: pass a copy).
struct Replayed {
  uint64_t digest = 0;
  uint64_t applied = 0;
};
Result<Replayed> ReplayWorkDir(const std::string& dir);

// "digest=D\napplied=N\n", and back.
std::string FormatDigestFile(const Replayed& replayed);
Result<Replayed> ParseDigestFile(const std::string& text);

// The dump of etcd keys: one line per key, "BASE64(key) BASE64(value)".
std::string FormatDump(const std::vector<std::pair<std::string, std::string>>& kvs);
Result<std::vector<std::pair<std::string, std::string>>> ParseDump(const std::string& text);

// Puts the dump's keys into the etcd at `endpoints`, reads them back the way
// a dispatcher taking over does (EtcdStateReader: snapshot, then journal)
// into a fresh store in `scratch_dir`, and replays that.
Result<Replayed> ReplayEtcdDump(const std::vector<std::string>& endpoints,
                                const std::vector<std::pair<std::string, std::string>>& kvs,
                                const std::string& scratch_dir);
// Every key under `prefix` in etcd (journal and snapshot keys only).
Result<std::vector<std::pair<std::string, std::string>>> ReadEtcdKeys(
    const std::vector<std::string>& endpoints, const std::string& prefix);

std::string ReadWholeFile(const std::string& path);
Status WriteWholeFile(const std::string& path, const std::string& bytes);
// Copies directory `from` (recursively) to `to`.
Status CopyDir(const std::string& from, const std::string& to);

}  // namespace dispatch::testing
