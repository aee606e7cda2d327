#include "reactor/etcd/etcd_client.h"

#include <kj/debug.h>

#include "common/log.h"
#include "reactor/etcd/line_splitter.h"

namespace dispatch::etcd {
namespace {

constexpr size_t kReadPiece = 64 * 1024;
// An error answer is short; more of it is not read.
constexpr size_t kMaxErrorBytes = 64 * 1024;

// Appends `in` to `out` until its end, or until `out` passes `limit`
// (then `over` is set and the rest is not read).
kj::Promise<void> ReadAll(kj::AsyncInputStream& in, std::string& out, size_t limit, bool& over) {
  const size_t old = out.size();
  out.resize(old + kReadPiece);
  return in.tryRead(out.data() + old, 1, kReadPiece)
      .then([&in, &out, limit, &over, old](size_t n) -> kj::Promise<void> {
        out.resize(old + n);
        if (n == 0) return kj::READY_NOW;
        if (out.size() > limit) {
          over = true;
          return kj::READY_NOW;
        }
        return ReadAll(in, out, limit, over);
      });
}

std::string_view FirstLine(std::string_view text) {
  while (!text.empty() && (text.front() == '\n' || text.front() == '\r' || text.front() == ' ')) {
    text.remove_prefix(1);
  }
  return text.substr(0, text.find('\n'));
}

}  // namespace

struct EtcdWatch::Stream {
  Stream(size_t max_line_bytes, const kj::HttpHeaderTable& table, EtcdClient::WatchCallback callback)
      : headers(table), splitter(max_line_bytes), on_batch(std::move(callback)), buffer(kReadPiece) {}
  std::string url;
  std::string body;
  kj::HttpHeaders headers;
  LineSplitter splitter;
  EtcdClient::WatchCallback on_batch;
  std::vector<char> buffer;
  kj::Own<kj::AsyncInputStream> response_body;
  std::string error_body;
  bool error_over = false;
  bool ended = false;
};

EtcdWatch::EtcdWatch() = default;
// The task goes first: it refers to the stream.
EtcdWatch::~EtcdWatch() { task_ = nullptr; }

EtcdClient::EtcdClient(uvkj::UvAsyncIo& io, EtcdClientOptions options)
    : io_(io), options_(std::move(options)) {
  KJ_REQUIRE(!options_.endpoints.empty(), "EtcdClient needs at least one endpoint");
  header_table_ = kj::HttpHeaderTable::Builder().build();
  http_ = kj::newHttpClient(io_.timer(), *header_table_, io_.network(), nullptr);
}

EtcdClient::~EtcdClient() = default;

void EtcdClient::RetireConnections() {
  // Error answers are rare (a range at a compacted revision, a refused
  // request); the bound keeps a pathological stream of them from growing
  // the list: past it, the connection is left as it is and the next request
  // on it fails as unavailable (and is retried by its caller).
  constexpr size_t kMaxRetired = 64;
  if (retired_.size() >= kMaxRetired) return;
  ++counters_.connections_retired;
  retired_.push_back(kj::mv(http_));
  http_ = kj::newHttpClient(io_.timer(), *header_table_, io_.network(), nullptr);
}

void EtcdClient::NextEndpoint(size_t failed) {
  // Only the first failure of an endpoint moves on: several requests that
  // failed together must not skip the next endpoint too.
  if (failed != current_ || options_.endpoints.size() == 1) return;
  current_ = (current_ + 1) % options_.endpoints.size();
  ++counters_.endpoint_switches;
  Log(LogLevel::kInfo, "etcd: ", options_.endpoints[failed], " failed; next requests go to ",
      options_.endpoints[current_]);
}

kj::Promise<Result<EtcdClient::Answer>> EtcdClient::Post(const char* path, std::string body,
                                                          std::chrono::milliseconds timeout_ms) {
  ++counters_.requests;
  const size_t endpoint = current_;
  struct Call {
    Call(const kj::HttpHeaderTable& table) : headers(table) {}
    std::string url;
    std::string body;
    kj::HttpHeaders headers;
    Answer answer;
    bool over = false;
    kj::Own<kj::AsyncInputStream> response_body;
  };
  auto call = kj::heap<Call>(*header_table_);
  Call& c = *call;
  c.url = options_.endpoints[endpoint] + path;
  c.body = std::move(body);
  c.headers.set(kj::HttpHeaderId::CONTENT_TYPE, "application/json");
  auto request = http_->request(kj::HttpMethod::POST, c.url, c.headers, c.body.size());
  kj::Promise<void> write = request.body->write(c.body.data(), c.body.size()).attach(kj::mv(request.body));
  auto read = write.then([response = kj::mv(request.response)]() mutable { return kj::mv(response); })
                  .then([this, &c](kj::HttpClient::Response&& response) {
                    c.answer.status = response.statusCode;
                    c.response_body = kj::mv(response.body);
                    return ReadAll(*c.response_body, c.answer.body, options_.max_answer_bytes, c.over);
                  });
  if (timeout_ms.count() <= 0) timeout_ms = options_.request_timeout;
  const auto timeout = timeout_ms.count() * kj::MILLISECONDS;
  return io_.timer()
      .timeoutAfter(timeout, kj::mv(read))
      .then(
          [this, &c]() -> Result<Answer> {
            if (c.answer.status != 200) RetireConnections();
            if (c.over) {
              ++counters_.answers_over_limit;
              return ResourceExhaustedError("etcd's answer from " + c.url + " is over the limit of " +
                                            std::to_string(options_.max_answer_bytes) + " bytes");
            }
            return std::move(c.answer);
          },
          [this, &c, endpoint](kj::Exception&& e) -> Result<Answer> {
            ++counters_.unavailable;
            NextEndpoint(endpoint);
            return UnavailableError("etcd at " + c.url + " did not answer: " + e.getDescription().cStr());
          })
      .attach(kj::mv(call));
}

Result<std::string> EtcdClient::Expect200(const char* path, Result<Answer> answer) {
  if (!answer.ok()) return answer.status();
  if (answer->status == 200) return std::move(answer->body);
  ++counters_.errors;
  int code = 0;
  std::string message = json_.DecodeError(answer->body, &code);
  std::string text = std::string("etcd ") + endpoint() + path + " answered HTTP " +
                     std::to_string(answer->status) + ": " + message;
  switch (code) {
    case 3: return InvalidArgumentError(std::move(text));
    case 5: return NotFoundError(std::move(text));
    case 8: return ResourceExhaustedError(std::move(text));
    case 9: return FailedPreconditionError(std::move(text));
    default: return UnavailableError(std::move(text));
  }
}

kj::Promise<Result<int64_t>> EtcdClient::Put(const std::string& key, const std::string& value,
                                             int64_t lease) {
  return Post("/v3/kv/put", json_.EncodePut(key, value, lease)).then([this](Result<Answer> a) -> Result<int64_t> {
    auto body = Expect200("/v3/kv/put", std::move(a));
    if (!body.ok()) return body.status();
    return json_.DecodeRevisionOnly(*body);
  });
}

kj::Promise<Result<RangeResult>> EtcdClient::Range(const std::string& key, const std::string& range_end,
                                                   int64_t limit, bool descending, int64_t revision) {
  return Post("/v3/kv/range", json_.EncodeRange(key, range_end, limit, descending, revision))
      .then([this](Result<Answer> a) -> Result<RangeResult> {
        auto body = Expect200("/v3/kv/range", std::move(a));
        if (!body.ok()) return body.status();
        return json_.DecodeRange(*body);
      });
}

kj::Promise<Result<TxnResult>> EtcdClient::Commit(const Txn& txn) {
  return Post("/v3/kv/txn", json_.EncodeTxn(txn)).then([this](Result<Answer> a) -> Result<TxnResult> {
    auto body = Expect200("/v3/kv/txn", std::move(a));
    if (!body.ok()) return body.status();
    return json_.DecodeTxn(*body);
  });
}

kj::Promise<Result<int64_t>> EtcdClient::Compact(int64_t revision, bool physical) {
  return Post("/v3/kv/compaction", json_.EncodeCompaction(revision, physical))
      .then([this](Result<Answer> a) -> Result<int64_t> {
        auto body = Expect200("/v3/kv/compaction", std::move(a));
        if (!body.ok()) return body.status();
        return json_.DecodeRevisionOnly(*body);
      });
}

kj::Promise<Result<Lease>> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  return Post("/v3/lease/grant", json_.EncodeLeaseGrant(ttl_seconds))
      .then([this](Result<Answer> a) -> Result<Lease> {
        auto body = Expect200("/v3/lease/grant", std::move(a));
        if (!body.ok()) return body.status();
        return json_.DecodeLeaseGrant(*body);
      });
}

kj::Promise<Result<int64_t>> EtcdClient::LeaseKeepAlive(int64_t id, std::chrono::milliseconds timeout) {
  // One POST per keepalive (several in one chunked body are answered only
  // when the body ends); the answer is a stream of one line.
  return Post("/v3/lease/keepalive", json_.EncodeLeaseId(id), timeout)
      .then([this, id](Result<Answer> a) -> Result<int64_t> {
        auto body = Expect200("/v3/lease/keepalive", std::move(a));
        if (!body.ok()) return body.status();
        std::string_view line = FirstLine(*body);
        if (line.empty()) return UnavailableError("etcd's keepalive answer is empty");
        return json_.DecodeKeepAliveLine(line, id);
      });
}

kj::Promise<Result<Lease>> EtcdClient::LeaseTimeToLive(int64_t id) {
  return Post("/v3/lease/timetolive", json_.EncodeLeaseId(id)).then([this](Result<Answer> a) -> Result<Lease> {
    auto body = Expect200("/v3/lease/timetolive", std::move(a));
    if (!body.ok()) return body.status();
    return json_.DecodeLeaseTimeToLive(*body);
  });
}

kj::Promise<Status> EtcdClient::LeaseRevoke(int64_t id) {
  return Post("/v3/lease/revoke", json_.EncodeLeaseId(id)).then([this](Result<Answer> a) -> Status {
    return Expect200("/v3/lease/revoke", std::move(a)).status();
  });
}

void EtcdClient::EndWatch(EtcdWatch::Stream& stream, Status status) {
  if (stream.ended) return;
  stream.ended = true;
  stream.on_batch(std::move(status));
}

kj::Promise<void> EtcdClient::PumpWatch(EtcdWatch::Stream& s) {
  return s.response_body->tryRead(s.buffer.data(), 1, s.buffer.size())
      .then([this, &s](size_t n) -> kj::Promise<void> {
        if (n == 0) {
          EndWatch(s, UnavailableError("etcd's watch stream from " + s.url + " ended"));
          return kj::READY_NOW;
        }
        Status status = s.splitter.Feed(std::string_view(s.buffer.data(), n), [&](std::string_view line) {
          auto batch = json_.DecodeWatchLine(line);
          if (!batch.ok()) return batch.status();
          ++counters_.watch_lines;
          s.on_batch(std::move(batch));
          return Status::Ok();
        });
        if (!status.ok()) {
          if (status.code() == StatusCode::kResourceExhausted) ++counters_.stream_lines_over_limit;
          EndWatch(s, std::move(status));
          return kj::READY_NOW;
        }
        return PumpWatch(s);
      });
}

std::unique_ptr<EtcdWatch> EtcdClient::Watch(const std::string& key, const std::string& range_end,
                                             int64_t start_revision, WatchCallback on_batch) {
  ++counters_.watches_started;
  const size_t endpoint = current_;
  auto watch = std::make_unique<EtcdWatch>();
  watch->stream_ = std::make_unique<EtcdWatch::Stream>(options_.max_stream_line_bytes, *header_table_,
                                                       std::move(on_batch));
  EtcdWatch::Stream& s = *watch->stream_;
  s.url = options_.endpoints[endpoint] + "/v3/watch";
  s.body = json_.EncodeWatchCreate(key, range_end, start_revision);
  s.headers.set(kj::HttpHeaderId::CONTENT_TYPE, "application/json");
  auto request = http_->request(kj::HttpMethod::POST, s.url, s.headers, s.body.size());
  kj::Promise<void> write = request.body->write(s.body.data(), s.body.size()).attach(kj::mv(request.body));
  watch->task_ =
      write.then([response = kj::mv(request.response)]() mutable { return kj::mv(response); })
          .then([this, &s](kj::HttpClient::Response&& response) -> kj::Promise<void> {
            s.response_body = kj::mv(response.body);
            if (response.statusCode == 200) return PumpWatch(s);
            const unsigned status = response.statusCode;
            return ReadAll(*s.response_body, s.error_body, kMaxErrorBytes, s.error_over)
                .then([this, &s, status]() {
                  EndWatch(s, Expect200("/v3/watch", Answer{status, std::move(s.error_body)}).status());
                });
          })
          .then([]() {},
                [this, &s, endpoint](kj::Exception&& e) {
                  ++counters_.unavailable;
                  NextEndpoint(endpoint);
                  EndWatch(s, UnavailableError("etcd's watch stream from " + s.url +
                                               " failed: " + e.getDescription().cStr()));
                })
          .eagerlyEvaluate(nullptr);
  return watch;
}

}  // namespace dispatch::etcd
