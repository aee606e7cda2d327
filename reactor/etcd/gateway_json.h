// GatewayJson: the JSON text of etcd's v3 gateway, to and from the plain
// values of etcd_types.h, through Cap'n Proto's JSON codec and the structs of
// etcd_gateway.capnp (no JSON written or parsed by hand). Every Decode* takes
// an answer's body (or one line of a stream) and returns the value, or an
// Internal error naming what could not be read: etcd answered something this
// client does not understand. Pure: no I/O.
#pragma once

#include <string>
#include <string_view>

#include <capnp/compat/json.h>

#include "common/status.h"
#include "reactor/etcd/etcd_types.h"

namespace dispatch::etcd {

class GatewayJson {
 public:
  GatewayJson();
  GatewayJson(const GatewayJson&) = delete;
  GatewayJson& operator=(const GatewayJson&) = delete;

  std::string EncodePut(const std::string& key, const std::string& value, int64_t lease) const;
  // `descending`: the keys in reverse order (with limit 1: the last key).
  // `revision` 0: the latest; else the store as it was at that revision.
  std::string EncodeRange(const std::string& key, const std::string& range_end, int64_t limit,
                          bool descending = false, int64_t revision = 0) const;
  std::string EncodeTxn(const Txn& txn) const;
  std::string EncodeCompaction(int64_t revision, bool physical) const;
  std::string EncodeLeaseGrant(int64_t ttl_seconds) const;
  // /v3/lease/keepalive and /v3/lease/revoke.
  std::string EncodeLeaseId(int64_t id) const;
  std::string EncodeWatchCreate(const std::string& key, const std::string& range_end,
                                int64_t start_revision) const;

  // Each returns the header's revision, or the parsed answer.
  Result<int64_t> DecodeRevisionOnly(std::string_view body) const;
  Result<RangeResult> DecodeRange(std::string_view body) const;
  Result<TxnResult> DecodeTxn(std::string_view body) const;
  Result<Lease> DecodeLeaseGrant(std::string_view body) const;
  // /v3/lease/timetolive: the TTL left (-1: the lease is gone) and granted.
  Result<Lease> DecodeLeaseTimeToLive(std::string_view body) const;
  // One line of /v3/lease/keepalive: the lease's remaining TTL in seconds, or
  // NotFound when the answer has no TTL (etcd's only sign the lease is gone).
  Result<int64_t> DecodeKeepAliveLine(std::string_view line, int64_t id) const;
  // One line of /v3/watch.
  Result<WatchBatch> DecodeWatchLine(std::string_view line) const;
  // A non-200 answer: "MESSAGE (gRPC code N)", or the raw text when it is not
  // etcd's error object. `grpc_code` gets the code (0 if none).
  std::string DecodeError(std::string_view body, int* grpc_code) const;

 private:
  capnp::JsonCodec codec_;
};

}  // namespace dispatch::etcd
