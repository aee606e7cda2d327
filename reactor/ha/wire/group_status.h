// What `dispatchctl group` shows of an HA group, read from etcd alone (so it
// works whichever dispatchers are up): the leader key and its lease, the
// member records, and the journal's position.
// REQUIRES: the loop thread of `client`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kj/async.h>

#include "common/status.h"
#include "reactor/etcd/etcd_client.h"
#include "reactor/ha/wire/member_record.h"

namespace dispatch::ha {

struct GroupMember {
  int64_t lease_id = 0;
  MemberRecord record;
};

struct GroupStatus {
  int64_t etcd_revision = 0;       // when the leader key was read
  std::string leader;              // the leader's --advertise address; empty: none
  int64_t leader_lease_id = 0;
  int64_t leader_revision = 0;     // the leader key's create revision (the fencing token)
  int64_t lease_ttl_left = -1;     // seconds; -1: gone
  int64_t lease_ttl_granted = 0;
  std::vector<GroupMember> members;  // by lease id
  int64_t journal_keys = 0;        // PREFIX/journal/ keys (groups) in etcd
  uint64_t last_seq = 0;           // the last journaled record's sequence number; 0: none
};

kj::Promise<Result<GroupStatus>> ReadGroupStatus(etcd::EtcdClient& client, const std::string& prefix);

// Lines for people: the leader with its lease, each member (marking the
// leader), the journal's position.
std::string FormatGroupStatus(const GroupStatus& group, const std::string& prefix);

}  // namespace dispatch::ha
