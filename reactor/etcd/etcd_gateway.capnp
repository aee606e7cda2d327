# etcd 3.4's v3 HTTP/JSON gateway messages, declared as Cap'n Proto structs so
# that Cap'n Proto's JSON codec (capnp/compat/json.h) writes and reads them:
# no JSON by hand. Only the fields the dispatcher uses are declared; unknown
# fields in etcd's answers are ignored by the codec. Mapping rules (see
# docs/high_availability.md §9 and ../shared/notes/etcd.md):
#  - names: etcd answers with the protobuf names (snake_case), so every
#    multi-word field carries $Json.name; etcd also accepts them in requests.
#  - keys, values, range ends: standard base64 ($Json.base64).
#  - 64-bit integers: Int64/UInt64, which the codec writes and reads as JSON
#    strings, as etcd does (lease ids exceed 2^53).
#  - etcd omits default values (a failed txn has no `succeeded`, a keepalive
#    on a dead lease no `TTL`): an absent field decodes as the default here.
#  - enums as etcd's names (EQUAL, CREATE, DELETE, ...).
# Internal to the dispatcher's etcd client: not a wire protocol of ours.
@0x84100711c2cf9d37;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dispatch::etcd::gateway");
using Json = import "/capnp/compat/json.capnp";

struct ResponseHeader {
  clusterId @0 :UInt64 $Json.name("cluster_id");
  memberId @1 :UInt64 $Json.name("member_id");
  revision @2 :Int64;
  raftTerm @3 :UInt64 $Json.name("raft_term");
}

struct KeyValue {
  key @0 :Data $Json.base64;
  createRevision @1 :Int64 $Json.name("create_revision");
  modRevision @2 :Int64 $Json.name("mod_revision");
  version @3 :Int64;
  value @4 :Data $Json.base64;
  lease @5 :Int64;
}

struct RangeRequest {
  key @0 :Data $Json.base64;
  rangeEnd @1 :Data $Json.base64 $Json.name("range_end");
  limit @2 :Int64;
  revision @3 :Int64;
  keysOnly @4 :Bool $Json.name("keys_only");
  countOnly @5 :Bool $Json.name("count_only");
  sortOrder @6 :SortOrder $Json.name("sort_order");  # by key (sort_target's default)
}

enum SortOrder {
  none @0 $Json.name("NONE");
  ascend @1 $Json.name("ASCEND");
  descend @2 $Json.name("DESCEND");
}

struct RangeResponse {
  header @0 :ResponseHeader;
  kvs @1 :List(KeyValue);
  more @2 :Bool;
  count @3 :Int64;
}

struct PutRequest {
  key @0 :Data $Json.base64;
  value @1 :Data $Json.base64;
  lease @2 :Int64;
}

struct PutResponse {
  header @0 :ResponseHeader;
}

struct DeleteRangeRequest {
  key @0 :Data $Json.base64;
  rangeEnd @1 :Data $Json.base64 $Json.name("range_end");
}

struct DeleteRangeResponse {
  header @0 :ResponseHeader;
  deleted @1 :Int64;
}

enum CompareResult {
  equal @0 $Json.name("EQUAL");
  greater @1 $Json.name("GREATER");
  less @2 $Json.name("LESS");
  notEqual @3 $Json.name("NOT_EQUAL");
}

enum CompareTarget {
  version @0 $Json.name("VERSION");
  create @1 $Json.name("CREATE");
  mod @2 $Json.name("MOD");
  value @3 $Json.name("VALUE");
  lease @4 $Json.name("LEASE");
}

struct Compare {
  result @0 :CompareResult;
  target @1 :CompareTarget;
  key @2 :Data $Json.base64;
  # etcd's oneof target_union: only the active member is written.
  union {
    version @3 :Int64;
    createRevision @4 :Int64 $Json.name("create_revision");
    modRevision @5 :Int64 $Json.name("mod_revision");
    value @6 :Data $Json.base64;
    lease @7 :Int64;
  }
}

struct RequestOp {
  union {
    requestRange @0 :RangeRequest $Json.name("request_range");
    requestPut @1 :PutRequest $Json.name("request_put");
    requestDeleteRange @2 :DeleteRangeRequest $Json.name("request_delete_range");
  }
}

struct ResponseOp {
  union {
    none @0 :Void;  # no member present in the answer
    responseRange @1 :RangeResponse $Json.name("response_range");
    responsePut @2 :PutResponse $Json.name("response_put");
    responseDeleteRange @3 :DeleteRangeResponse $Json.name("response_delete_range");
  }
}

struct TxnRequest {
  compare @0 :List(Compare);
  success @1 :List(RequestOp);
  failure @2 :List(RequestOp);
}

struct TxnResponse {
  header @0 :ResponseHeader;
  succeeded @1 :Bool;
  responses @2 :List(ResponseOp);
}

struct CompactionRequest {
  revision @0 :Int64;
  physical @1 :Bool;
}

struct CompactionResponse {
  header @0 :ResponseHeader;
}

struct LeaseGrantRequest {
  ttl @0 :Int64 $Json.name("TTL");
  id @1 :Int64 $Json.name("ID");
}

struct LeaseGrantResponse {
  header @0 :ResponseHeader;
  id @1 :Int64 $Json.name("ID");
  ttl @2 :Int64 $Json.name("TTL");
  error @3 :Text;
}

struct LeaseIdRequest {
  # /v3/lease/keepalive and /v3/lease/revoke.
  id @0 :Int64 $Json.name("ID");
}

struct LeaseKeepAliveResponse {
  header @0 :ResponseHeader;
  id @1 :Int64 $Json.name("ID");
  # Absent (0) when the lease is gone: etcd answers HTTP 200 all the same.
  ttl @2 :Int64 $Json.name("TTL");
}

struct LeaseRevokeResponse {
  header @0 :ResponseHeader;
}

struct LeaseTimeToLiveResponse {
  # /v3/lease/timetolive: TTL is -1 once the lease expired or was revoked.
  header @0 :ResponseHeader;
  id @1 :Int64 $Json.name("ID");
  ttl @2 :Int64 $Json.name("TTL");
  grantedTtl @3 :Int64 $Json.name("grantedTTL");
}

struct WatchCreateRequest {
  key @0 :Data $Json.base64;
  rangeEnd @1 :Data $Json.base64 $Json.name("range_end");
  startRevision @2 :Int64 $Json.name("start_revision");
  progressNotify @3 :Bool $Json.name("progress_notify");
}

struct WatchRequest {
  createRequest @0 :WatchCreateRequest $Json.name("create_request");
}

enum EventType {
  put @0 $Json.name("PUT");
  delete @1 $Json.name("DELETE");
}

struct Event {
  type @0 :EventType;
  kv @1 :KeyValue;
}

struct WatchResponse {
  header @0 :ResponseHeader;
  watchId @1 :Int64 $Json.name("watch_id");
  created @2 :Bool;
  canceled @3 :Bool;
  compactRevision @4 :Int64 $Json.name("compact_revision");
  cancelReason @5 :Text $Json.name("cancel_reason");
  events @6 :List(Event);
}

# A unary call's error answer (any HTTP status but 200).
struct ErrorAnswer {
  error @0 :Text;
  message @1 :Text;
  code @2 :Int32;
}

# An error in a stream.
struct StreamError {
  grpcCode @0 :Int32 $Json.name("grpc_code");
  httpCode @1 :Int32 $Json.name("http_code");
  message @2 :Text;
  httpStatus @3 :Text $Json.name("http_status");
}

# One line of a stream answer (/v3/watch, /v3/lease/keepalive).
struct WatchLine {
  result @0 :WatchResponse;
  error @1 :StreamError;
}

struct KeepAliveLine {
  result @0 :LeaseKeepAliveResponse;
  error @1 :StreamError;
}

# Every top-level message, so one handleByAnnotation call registers them all.
struct AllMessages {
  a @0 :RangeRequest; b @1 :RangeResponse; c @2 :PutRequest; d @3 :PutResponse;
  e @4 :DeleteRangeRequest; f @5 :DeleteRangeResponse; g @6 :TxnRequest; h @7 :TxnResponse;
  i @8 :CompactionRequest; j @9 :CompactionResponse; k @10 :LeaseGrantRequest;
  l @11 :LeaseGrantResponse; m @12 :LeaseIdRequest; n @13 :LeaseRevokeResponse;
  o @14 :WatchRequest; p @15 :WatchLine; q @16 :KeepAliveLine; r @17 :ErrorAnswer;
  s @18 :LeaseTimeToLiveResponse;
}
