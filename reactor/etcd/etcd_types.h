// The etcd operations the dispatcher uses, as plain C++ values: what callers
// of EtcdClient build and read. Keys and values are byte strings. Revisions,
// versions and lease ids are etcd's 64-bit integers; 0 means "none", as in
// etcd (a key that does not exist has create revision 0 and version 0).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dispatch::etcd {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

enum class CompareTarget { kVersion, kCreateRevision, kModRevision, kValue, kLease };
enum class CompareResult { kEqual, kGreater, kLess, kNotEqual };

// One condition of a transaction: `target(key) result operand`.
struct Compare {
  std::string key;
  CompareTarget target = CompareTarget::kVersion;
  CompareResult result = CompareResult::kEqual;
  int64_t number = 0;   // for every target but kValue
  std::string value;    // for kValue

  // Fencing: the key still is the one created at `revision` (0: absent).
  static Compare CreateRevisionIs(std::string key, int64_t revision) {
    return {std::move(key), CompareTarget::kCreateRevision, CompareResult::kEqual, revision, {}};
  }
  static Compare VersionIs(std::string key, int64_t version) {
    return {std::move(key), CompareTarget::kVersion, CompareResult::kEqual, version, {}};
  }
  static Compare ModRevisionIs(std::string key, int64_t revision) {
    return {std::move(key), CompareTarget::kModRevision, CompareResult::kEqual, revision, {}};
  }
};

// One operation of a transaction.
struct Op {
  enum class Kind { kRange, kPut, kDelete };
  Kind kind = Kind::kRange;
  std::string key;
  std::string value;      // kPut
  std::string range_end;  // kRange, kDelete; empty: the key alone
  int64_t lease = 0;      // kPut; 0: no lease
  int64_t limit = 0;      // kRange; 0: no limit

  static Op Put(std::string key, std::string value, int64_t lease = 0) {
    Op op;
    op.kind = Kind::kPut;
    op.key = std::move(key);
    op.value = std::move(value);
    op.lease = lease;
    return op;
  }
  static Op Get(std::string key, std::string range_end = {}, int64_t limit = 0) {
    Op op;
    op.key = std::move(key);
    op.range_end = std::move(range_end);
    op.limit = limit;
    return op;
  }
  static Op Delete(std::string key, std::string range_end = {}) {
    Op op;
    op.kind = Kind::kDelete;
    op.key = std::move(key);
    op.range_end = std::move(range_end);
    return op;
  }
};

struct RangeResult {
  int64_t revision = 0;  // the store's revision when read
  std::vector<KeyValue> kvs;
  bool more = false;     // a limit cut the answer short
  int64_t count = 0;     // keys in the range (before the limit)
};

// The answer to one operation of a transaction's chosen branch.
struct OpResult {
  Op::Kind kind = Op::Kind::kRange;
  RangeResult range;     // kRange
  int64_t deleted = 0;   // kDelete
};

struct Txn {
  std::vector<Compare> compare;
  std::vector<Op> success;
  std::vector<Op> failure;
};

struct TxnResult {
  bool succeeded = false;  // every compare held: `success` ran, else `failure`
  int64_t revision = 0;    // the store's revision after the transaction
  std::vector<OpResult> responses;
};

struct Lease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;  // as granted (etcd may raise a small TTL); time to live: left, -1 gone
  int64_t granted_ttl_seconds = 0;  // time to live only: the TTL it was granted with
};

struct WatchEvent {
  bool is_delete = false;
  KeyValue kv;  // a delete carries the key and its mod revision only
};

// One message of a watch stream.
struct WatchBatch {
  int64_t revision = 0;  // the header's revision
  bool created = false;  // the first message: the watch is in place
  bool canceled = false;  // etcd ended the watch (e.g. its start was compacted)
  int64_t compact_revision = 0;
  std::string cancel_reason;
  std::vector<WatchEvent> events;
};

// The range end that covers every key starting with `prefix` (etcd's rule:
// the prefix with its last byte below 0xff incremented, what follows dropped;
// "\0" — every key — when there is no such byte).
std::string PrefixEnd(std::string prefix);

}  // namespace dispatch::etcd
