#include "reactor/ha/wire/group_status.h"

#include <memory>

#include "reactor/ha/wire/journal_group_codec.h"

namespace dispatch::ha {
namespace {

// Four reads, one after the other; any failure ends it with that failure.
kj::Promise<Result<GroupStatus>> ReadJournalPosition(etcd::EtcdClient& client, const std::string& prefix,
                                                     std::unique_ptr<GroupStatus> group) {
  const std::string journal = prefix + "/journal/";
  return client.Range(journal, etcd::PrefixEnd(journal), 1, /*descending=*/true)
      .then([group = std::move(group)](Result<etcd::RangeResult> last) mutable -> Result<GroupStatus> {
        if (!last.ok()) return last.status();
        group->journal_keys = last->count;
        if (!last->kvs.empty()) {
          const etcd::KeyValue& kv = last->kvs.front();
          Result<DecodedGroup> decoded = DecodeJournalGroup(kv.value, kv.key);
          if (!decoded.ok()) return decoded.status();
          group->last_seq = decoded->first_seq + decoded->record_count - 1;
        }
        return std::move(*group);
      });
}

kj::Promise<Result<GroupStatus>> ReadMembers(etcd::EtcdClient& client, const std::string& prefix,
                                             std::unique_ptr<GroupStatus> group) {
  const std::string members = prefix + "/members/";
  return client.Range(members, etcd::PrefixEnd(members))
      .then([&client, prefix, group = std::move(group)](
                Result<etcd::RangeResult> range) mutable -> kj::Promise<Result<GroupStatus>> {
        if (!range.ok()) return Result<GroupStatus>(range.status());
        for (const etcd::KeyValue& kv : range->kvs) {
          Result<MemberRecord> record = DecodeMemberRecord(kv.value, kv.key);
          if (!record.ok()) return Result<GroupStatus>(record.status());
          group->members.push_back(GroupMember{kv.lease, std::move(record).value()});
        }
        return ReadJournalPosition(client, prefix, std::move(group));
      });
}

}  // namespace

kj::Promise<Result<GroupStatus>> ReadGroupStatus(etcd::EtcdClient& client, const std::string& prefix) {
  return client.Range(prefix + "/leader")
      .then([&client, prefix](Result<etcd::RangeResult> leader) -> kj::Promise<Result<GroupStatus>> {
        if (!leader.ok()) return Result<GroupStatus>(leader.status());
        auto group = std::make_unique<GroupStatus>();
        group->etcd_revision = leader->revision;
        if (leader->kvs.empty()) return ReadMembers(client, prefix, std::move(group));
        const etcd::KeyValue& kv = leader->kvs.front();
        group->leader = kv.value;
        group->leader_lease_id = kv.lease;
        group->leader_revision = kv.create_revision;
        return client.LeaseTimeToLive(kv.lease).then(
            [&client, prefix, group = std::move(group)](
                Result<etcd::Lease> lease) mutable -> kj::Promise<Result<GroupStatus>> {
              if (!lease.ok()) return Result<GroupStatus>(lease.status());
              group->lease_ttl_left = lease->ttl_seconds;
              group->lease_ttl_granted = lease->granted_ttl_seconds;
              return ReadMembers(client, prefix, std::move(group));
            });
      });
}

std::string FormatGroupStatus(const GroupStatus& group, const std::string& prefix) {
  std::string out = "group " + prefix + " (etcd revision " + std::to_string(group.etcd_revision) + ")\n";
  if (group.leader.empty()) {
    out += "leader   none\n";
  } else {
    out += "leader   " + group.leader + "  lease " + LeaseHex(group.leader_lease_id) +
           " (TTL " + std::to_string(group.lease_ttl_left) + " s left of " +
           std::to_string(group.lease_ttl_granted) + " s)  leader revision " +
           std::to_string(group.leader_revision) + "\n";
  }
  for (const GroupMember& m : group.members) {
    out += "member   " + m.record.rpc + "  lease " + LeaseHex(m.lease_id) + "  pid " +
           std::to_string(m.record.pid) + "  " + (m.record.http.empty() ? "http off" : m.record.http) +
           (m.lease_id == group.leader_lease_id ? "  (leader)" : "  (standby)") + "\n";
  }
  out += "journal  " + std::to_string(group.journal_keys) + " keys in etcd, last sequence number " +
         std::to_string(group.last_seq) + "\n";
  return out;
}

}  // namespace dispatch::ha
