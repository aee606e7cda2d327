// EtcdClient: etcd v3 over its HTTP/JSON gateway, on the dispatcher's own
// libuv loop (KJ's HTTP client through the uvkj bridge): no thread of its own,
// no gRPC. JSON goes through GatewayJson (Cap'n Proto's JSON codec).
// Endpoints: a list of "http://HOST:PORT"; every request goes to the current
// one; a request that fails for the connection's sake (refused, reset, timed
// out) is Unavailable naming the endpoint, and the next request goes to the
// next endpoint. The client never retries by itself: only its caller knows
// whether a request is safe to repeat (docs/high_availability.md §4, §9).
// Errors: etcd's error answers become a Status naming the path, the HTTP
// status and etcd's message (gRPC code 5 NotFound, 3 InvalidArgument, 8
// ResourceExhausted, 9 FailedPrecondition, others Unavailable).
// Limits (each counted): an answer's body, one line of a stream.
// REQUIRES: constructed, used and destroyed on the loop thread; every promise
// and EtcdWatch it returned destroyed (or done) before it.
#pragma once

#include <kj/async.h>
#include <kj/compat/http.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "reactor/etcd/etcd_types.h"
#include "reactor/etcd/gateway_json.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::etcd {

struct EtcdClientOptions {
  // "http://127.0.0.1:23790" each; at least one.
  std::vector<std::string> endpoints;
  // A unary request's whole time, connect included.
  std::chrono::milliseconds request_timeout{5000};
  // Largest answer body read (etcd refuses requests over ~1.5 MiB; ranges
  // are paged with a limit by their callers).
  size_t max_answer_bytes = size_t{8} << 20;
  // Longest line of a stream (a watch event carries a whole value).
  size_t max_stream_line_bytes = size_t{4} << 20;
};

struct EtcdCounters {
  uint64_t requests = 0;             // unary requests sent
  uint64_t errors = 0;               // answered with an error by etcd
  uint64_t unavailable = 0;          // no answer: connection failed, reset or timed out
  uint64_t endpoint_switches = 0;    // moves to the next endpoint
  uint64_t answers_over_limit = 0;   // bodies over max_answer_bytes
  uint64_t connections_retired = 0;  // fresh connections after an error answer (RetireConnections)
  uint64_t watches_started = 0;
  uint64_t watch_lines = 0;          // stream lines decoded
  uint64_t stream_lines_over_limit = 0;  // lines over max_stream_line_bytes
};

// A watch in progress. Destroying it cancels the watch and closes its stream.
// REQUIRES: not destroyed from inside its own callback (defer it).
class EtcdWatch {
 public:
  EtcdWatch();
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

 private:
  friend class EtcdClient;
  struct Stream;
  std::unique_ptr<Stream> stream_;
  kj::Promise<void> task_ = nullptr;
};

class EtcdClient {
 public:
  EtcdClient(uvkj::UvAsyncIo& io, EtcdClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // The store's revision after the put.
  kj::Promise<Result<int64_t>> Put(const std::string& key, const std::string& value,
                                   int64_t lease = 0);
  // `range_end` empty: the key alone; PrefixEnd(key): every key under it.
  // `descending`: the keys in reverse order (with limit 1: the last key).
  // `revision` 0: the latest; else the keys as they were at that revision
  // (an error once etcd compacted past it).
  kj::Promise<Result<RangeResult>> Range(const std::string& key, const std::string& range_end = {},
                                         int64_t limit = 0, bool descending = false, int64_t revision = 0);
  kj::Promise<Result<TxnResult>> Commit(const Txn& txn);
  // Drops the history before `revision`; `physical` waits until the backend
  // really freed it (see the note: without it a defrag at once frees little).
  kj::Promise<Result<int64_t>> Compact(int64_t revision, bool physical);

  kj::Promise<Result<Lease>> LeaseGrant(int64_t ttl_seconds);
  // The lease's remaining TTL in seconds; NotFound when the lease is gone
  // (expired or revoked): etcd then answers 200 without a TTL.
  // `timeout` (0: the client's request_timeout) bounds this keepalive; when
  // it passes, the keepalive is Unavailable and the next request goes to the
  // next endpoint, as for any unanswered request.
  kj::Promise<Result<int64_t>> LeaseKeepAlive(int64_t id, std::chrono::milliseconds timeout = {});
  kj::Promise<Status> LeaseRevoke(int64_t id);
  // The lease's TTL left in seconds (-1 once it expired or was revoked) and
  // its granted TTL; reading it does not keep the lease alive.
  kj::Promise<Result<Lease>> LeaseTimeToLive(int64_t id);

  // Every message of the stream goes to `on_batch`, in order; an error
  // Result is the last call (the stream ended, failed, or a line was over the
  // limit). A batch with `canceled` is etcd ending the watch (e.g. its start
  // revision was compacted); the stream may stay open, the caller drops it.
  using WatchCallback = std::function<void(Result<WatchBatch>)>;
  std::unique_ptr<EtcdWatch> Watch(const std::string& key, const std::string& range_end,
                                   int64_t start_revision, WatchCallback on_batch);

  const EtcdCounters& counters() const { return counters_; }
  const std::string& endpoint() const { return options_.endpoints[current_]; }

 private:
  struct Answer {
    unsigned status = 0;
    std::string body;
  };
  // POSTs `body` to `path` on the current endpoint: the answer's status and
  // body, or Unavailable / ResourceExhausted.
  kj::Promise<Result<Answer>> Post(const char* path, std::string body,
                                   std::chrono::milliseconds timeout = {});
  // A 200 answer's body, or the Status its error maps to.
  Result<std::string> Expect200(const char* path, Result<Answer> answer);
  void NextEndpoint(size_t failed);
  // etcd's gateway sends an error answer chunked with a trailer, which KJ's
  // client leaves unread on the connection: the next answer there would not
  // parse. New requests go through a fresh client (fresh connections).
  void RetireConnections();
  kj::Promise<void> PumpWatch(EtcdWatch::Stream& stream);
  // Gives the watch its last callback, once.
  static void EndWatch(EtcdWatch::Stream& stream, Status status);

  uvkj::UvAsyncIo& io_;
  const EtcdClientOptions options_;
  GatewayJson json_;
  EtcdCounters counters_;
  size_t current_ = 0;
  kj::Own<kj::HttpHeaderTable> header_table_;
  kj::Own<kj::HttpClient> http_;
  // Clients retired after an error answer (RetireConnections), kept while
  // requests and watches they carry may still run; at most kMaxRetired.
  std::vector<kj::Own<kj::HttpClient>> retired_;
};

}  // namespace dispatch::etcd
