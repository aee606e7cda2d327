#include "reactor/ha/wire/member_record.h"

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/exception.h>

#include <cinttypes>
#include <cstdio>

#include "reactor/ha/wire/member_record.capnp.h"

namespace dispatch::ha {

std::string LeaseHex(int64_t lease_id) {
  char hex[17];
  snprintf(hex, sizeof(hex), "%016" PRIx64, static_cast<uint64_t>(lease_id));
  return hex;
}

std::string MemberKey(const std::string& prefix, int64_t lease_id) {
  return prefix + "/members/" + LeaseHex(lease_id);
}

std::string EncodeMemberRecord(const MemberRecord& member) {
  capnp::MallocMessageBuilder message;
  auto record = message.initRoot<wire::MemberRecord>();
  record.setRpc(member.rpc);
  record.setHttp(member.http);
  record.setPid(member.pid);
  record.setStartedUnixMs(member.started_unix_ms);
  capnp::JsonCodec codec;
  kj::String text = codec.encode(record.asReader());
  return std::string(text.cStr(), text.size());
}

Result<MemberRecord> DecodeMemberRecord(const std::string& value, const std::string& key) {
  capnp::MallocMessageBuilder message;
  auto record = message.initRoot<wire::MemberRecord>();
  capnp::JsonCodec codec;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 codec.decode(kj::ArrayPtr<const char>(value.data(), value.size()), record);
               })) {
    return DataLossError("etcd key " + key + " is not a member record: " + e->getDescription().cStr());
  }
  MemberRecord out;
  out.rpc = record.getRpc().cStr();
  out.http = record.getHttp().cStr();
  out.pid = record.getPid();
  out.started_unix_ms = record.getStartedUnixMs();
  return out;
}

}  // namespace dispatch::ha
