#include "reactor/etcd/gateway_json.h"

#include <capnp/message.h>
#include <kj/debug.h>

#include "reactor/etcd/etcd_gateway.capnp.h"

namespace dispatch::etcd {
namespace gw = gateway;
namespace {

capnp::Data::Reader Bytes(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(s.data()), s.size());
}

std::string String(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

std::string ToString(const kj::String& s) { return std::string(s.cStr(), s.size()); }

gw::CompareTarget ToGateway(CompareTarget t) {
  switch (t) {
    case CompareTarget::kVersion: return gw::CompareTarget::VERSION;
    case CompareTarget::kCreateRevision: return gw::CompareTarget::CREATE;
    case CompareTarget::kModRevision: return gw::CompareTarget::MOD;
    case CompareTarget::kValue: return gw::CompareTarget::VALUE;
    case CompareTarget::kLease: return gw::CompareTarget::LEASE;
  }
  KJ_UNREACHABLE;
}

gw::CompareResult ToGateway(CompareResult r) {
  switch (r) {
    case CompareResult::kEqual: return gw::CompareResult::EQUAL;
    case CompareResult::kGreater: return gw::CompareResult::GREATER;
    case CompareResult::kLess: return gw::CompareResult::LESS;
    case CompareResult::kNotEqual: return gw::CompareResult::NOT_EQUAL;
  }
  KJ_UNREACHABLE;
}

void SetRange(gw::RangeRequest::Builder out, const std::string& key, const std::string& range_end,
              int64_t limit) {
  out.setKey(Bytes(key));
  if (!range_end.empty()) out.setRangeEnd(Bytes(range_end));
  out.setLimit(limit);
}

void SetOp(const Op& op, gw::RequestOp::Builder out) {
  switch (op.kind) {
    case Op::Kind::kRange:
      SetRange(out.initRequestRange(), op.key, op.range_end, op.limit);
      break;
    case Op::Kind::kPut: {
      auto put = out.initRequestPut();
      put.setKey(Bytes(op.key));
      put.setValue(Bytes(op.value));
      put.setLease(op.lease);
      break;
    }
    case Op::Kind::kDelete: {
      auto del = out.initRequestDeleteRange();
      del.setKey(Bytes(op.key));
      if (!op.range_end.empty()) del.setRangeEnd(Bytes(op.range_end));
      break;
    }
  }
}

KeyValue FromGateway(gw::KeyValue::Reader kv) {
  KeyValue out;
  out.key = String(kv.getKey());
  out.value = String(kv.getValue());
  out.create_revision = kv.getCreateRevision();
  out.mod_revision = kv.getModRevision();
  out.version = kv.getVersion();
  out.lease = kv.getLease();
  return out;
}

RangeResult FromGateway(gw::RangeResponse::Reader r) {
  RangeResult out;
  out.revision = r.getHeader().getRevision();
  for (auto kv : r.getKvs()) out.kvs.push_back(FromGateway(kv));
  out.more = r.getMore();
  out.count = r.getCount();
  return out;
}

// Decodes `text` as a T into `message`; Internal naming `what` on failure.
template <typename T>
Result<typename T::Reader> Decode(const capnp::JsonCodec& codec, std::string_view text,
                                  capnp::MallocMessageBuilder& message, const char* what) {
  auto root = message.initRoot<T>();
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 codec.decode(kj::ArrayPtr<const char>(text.data(), text.size()), root);
               })) {
    return InternalError(std::string("etcd's answer to ") + what + " is not understood: " +
                         e->getDescription().cStr());
  }
  return root.asReader();
}

}  // namespace

std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    unsigned char& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

GatewayJson::GatewayJson() { codec_.handleByAnnotation<gw::AllMessages>(); }

std::string GatewayJson::EncodePut(const std::string& key, const std::string& value,
                                   int64_t lease) const {
  capnp::MallocMessageBuilder message;
  auto put = message.initRoot<gw::PutRequest>();
  put.setKey(Bytes(key));
  put.setValue(Bytes(value));
  put.setLease(lease);
  return ToString(codec_.encode(put.asReader()));
}

std::string GatewayJson::EncodeRange(const std::string& key, const std::string& range_end,
                                     int64_t limit, bool descending, int64_t revision) const {
  capnp::MallocMessageBuilder message;
  auto range = message.initRoot<gw::RangeRequest>();
  SetRange(range, key, range_end, limit);
  if (descending) range.setSortOrder(gw::SortOrder::DESCEND);
  range.setRevision(revision);
  return ToString(codec_.encode(range.asReader()));
}

std::string GatewayJson::EncodeTxn(const Txn& txn) const {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<gw::TxnRequest>();
  auto compares = out.initCompare(static_cast<unsigned>(txn.compare.size()));
  for (unsigned i = 0; i < txn.compare.size(); ++i) {
    const Compare& c = txn.compare[i];
    auto b = compares[i];
    b.setKey(Bytes(c.key));
    b.setTarget(ToGateway(c.target));
    b.setResult(ToGateway(c.result));
    switch (c.target) {
      case CompareTarget::kVersion: b.setVersion(c.number); break;
      case CompareTarget::kCreateRevision: b.setCreateRevision(c.number); break;
      case CompareTarget::kModRevision: b.setModRevision(c.number); break;
      case CompareTarget::kValue: b.setValue(Bytes(c.value)); break;
      case CompareTarget::kLease: b.setLease(c.number); break;
    }
  }
  auto success = out.initSuccess(static_cast<unsigned>(txn.success.size()));
  for (unsigned i = 0; i < txn.success.size(); ++i) SetOp(txn.success[i], success[i]);
  auto failure = out.initFailure(static_cast<unsigned>(txn.failure.size()));
  for (unsigned i = 0; i < txn.failure.size(); ++i) SetOp(txn.failure[i], failure[i]);
  return ToString(codec_.encode(out.asReader()));
}

std::string GatewayJson::EncodeCompaction(int64_t revision, bool physical) const {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<gw::CompactionRequest>();
  out.setRevision(revision);
  out.setPhysical(physical);
  return ToString(codec_.encode(out.asReader()));
}

std::string GatewayJson::EncodeLeaseGrant(int64_t ttl_seconds) const {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<gw::LeaseGrantRequest>();
  out.setTtl(ttl_seconds);
  return ToString(codec_.encode(out.asReader()));
}

std::string GatewayJson::EncodeLeaseId(int64_t id) const {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<gw::LeaseIdRequest>();
  out.setId(id);
  return ToString(codec_.encode(out.asReader()));
}

std::string GatewayJson::EncodeWatchCreate(const std::string& key, const std::string& range_end,
                                           int64_t start_revision) const {
  capnp::MallocMessageBuilder message;
  auto create = message.initRoot<gw::WatchRequest>().initCreateRequest();
  create.setKey(Bytes(key));
  if (!range_end.empty()) create.setRangeEnd(Bytes(range_end));
  create.setStartRevision(start_revision);
  return ToString(codec_.encode(message.getRoot<gw::WatchRequest>().asReader()));
}

Result<int64_t> GatewayJson::DecodeRevisionOnly(std::string_view body) const {
  capnp::MallocMessageBuilder message;
  auto answer = Decode<gw::PutResponse>(codec_, body, message, "a write");
  if (!answer.ok()) return answer.status();
  return answer->getHeader().getRevision();
}

Result<RangeResult> GatewayJson::DecodeRange(std::string_view body) const {
  capnp::MallocMessageBuilder message;
  auto answer = Decode<gw::RangeResponse>(codec_, body, message, "a range");
  if (!answer.ok()) return answer.status();
  return FromGateway(*answer);
}

Result<TxnResult> GatewayJson::DecodeTxn(std::string_view body) const {
  capnp::MallocMessageBuilder message;
  auto answer = Decode<gw::TxnResponse>(codec_, body, message, "a transaction");
  if (!answer.ok()) return answer.status();
  TxnResult out;
  out.succeeded = answer->getSucceeded();
  out.revision = answer->getHeader().getRevision();
  for (auto r : answer->getResponses()) {
    OpResult op;
    switch (r.which()) {
      case gw::ResponseOp::NONE:
        return InternalError("etcd's answer to a transaction has an operation of no known kind");
      case gw::ResponseOp::RESPONSE_RANGE:
        op.kind = Op::Kind::kRange;
        op.range = FromGateway(r.getResponseRange());
        break;
      case gw::ResponseOp::RESPONSE_PUT:
        op.kind = Op::Kind::kPut;
        break;
      case gw::ResponseOp::RESPONSE_DELETE_RANGE:
        op.kind = Op::Kind::kDelete;
        op.deleted = r.getResponseDeleteRange().getDeleted();
        break;
    }
    out.responses.push_back(std::move(op));
  }
  return out;
}

Result<Lease> GatewayJson::DecodeLeaseGrant(std::string_view body) const {
  capnp::MallocMessageBuilder message;
  auto answer = Decode<gw::LeaseGrantResponse>(codec_, body, message, "a lease grant");
  if (!answer.ok()) return answer.status();
  if (answer->hasError() && answer->getError().size() > 0) {
    return UnavailableError(std::string("etcd refused the lease: ") + answer->getError().cStr());
  }
  if (answer->getId() == 0 || answer->getTtl() <= 0) {
    return InternalError("etcd's answer to a lease grant has no lease id or TTL");
  }
  return Lease{answer->getId(), answer->getTtl()};
}

Result<Lease> GatewayJson::DecodeLeaseTimeToLive(std::string_view body) const {
  capnp::MallocMessageBuilder message;
  auto answer = Decode<gw::LeaseTimeToLiveResponse>(codec_, body, message, "a lease time-to-live");
  if (!answer.ok()) return answer.status();
  return Lease{answer->getId(), answer->getTtl(), answer->getGrantedTtl()};
}

Result<int64_t> GatewayJson::DecodeKeepAliveLine(std::string_view line, int64_t id) const {
  capnp::MallocMessageBuilder message;
  auto answer = Decode<gw::KeepAliveLine>(codec_, line, message, "a lease keepalive");
  if (!answer.ok()) return answer.status();
  if (answer->hasError()) {
    return UnavailableError(std::string("etcd's keepalive of lease ") + std::to_string(id) +
                            " failed: " + answer->getError().getMessage().cStr());
  }
  const int64_t ttl = answer->getResult().getTtl();
  if (ttl <= 0) {
    return NotFoundError("lease " + std::to_string(id) +
                         " is gone: etcd's keepalive answer has no TTL");
  }
  return ttl;
}

Result<WatchBatch> GatewayJson::DecodeWatchLine(std::string_view line) const {
  capnp::MallocMessageBuilder message;
  auto answer = Decode<gw::WatchLine>(codec_, line, message, "a watch");
  if (!answer.ok()) return answer.status();
  if (answer->hasError()) {
    return UnavailableError(std::string("etcd's watch stream failed: ") +
                            answer->getError().getMessage().cStr());
  }
  if (!answer->hasResult()) return InternalError("a line of etcd's watch stream has no result");
  auto r = answer->getResult();
  WatchBatch out;
  out.revision = r.getHeader().getRevision();
  out.created = r.getCreated();
  out.canceled = r.getCanceled();
  out.compact_revision = r.getCompactRevision();
  out.cancel_reason = r.getCancelReason().cStr();
  for (auto e : r.getEvents()) {
    out.events.push_back(WatchEvent{e.getType() == gw::EventType::DELETE, FromGateway(e.getKv())});
  }
  return out;
}

std::string GatewayJson::DecodeError(std::string_view body, int* grpc_code) const {
  *grpc_code = 0;
  capnp::MallocMessageBuilder message;
  auto answer = Decode<gw::ErrorAnswer>(codec_, body, message, "an error");
  if (!answer.ok() || !answer->hasMessage()) {
    return std::string(body.substr(0, 200));
  }
  *grpc_code = answer->getCode();
  return std::string(answer->getMessage().cStr()) + " (gRPC code " + std::to_string(*grpc_code) + ")";
}

}  // namespace dispatch::etcd
