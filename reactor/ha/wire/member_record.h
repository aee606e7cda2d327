// One member of an HA group as etcd stores it (member_record.capnp):
// PREFIX/members/LEASE, attached to the member's lease.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace dispatch::ha {

struct MemberRecord {
  std::string rpc;
  std::string http;
  uint32_t pid = 0;
  uint64_t started_unix_ms = 0;
};

// A lease id as etcd's tools print it: 16 hexadecimal digits.
std::string LeaseHex(int64_t lease_id);
// PREFIX/members/ followed by LeaseHex(lease_id).
std::string MemberKey(const std::string& prefix, int64_t lease_id);
std::string EncodeMemberRecord(const MemberRecord& member);
// DataLoss naming `key` when `value` is not a member record.
Result<MemberRecord> DecodeMemberRecord(const std::string& value, const std::string& key);

}  // namespace dispatch::ha
