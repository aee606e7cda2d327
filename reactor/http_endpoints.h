// HttpEndpoints: a small HTTP/1.1 server (KJ's kj-http) on the dispatcher's
// own loop, for operators: each route is a function of no arguments that
// reads what it needs on the loop thread (so without a lock) and returns its
// reply, or a promise of it when the bulk of the work (formatting) runs off
// the loop (OffLoop); the reply's bytes then go out asynchronously like any
// other write. Each connection serves one request at a time, so replies in
// preparation are bounded by the connection limit.
// Only GET is served. When a token is set, every route but the public ones
// needs "Authorization: Bearer TOKEN" (401 otherwise). Open connections are
// limited (one more is closed at once and counted); KJ's header timeout
// (15 s) and pipeline timeout (5 s) close idle ones.
// REQUIRES: constructed, used and destroyed on the loop thread.
#pragma once

#include <kj/async-io.h>
#include <kj/compat/http.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "common/status.h"
#include "reactor/histogram.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::reactor {

struct HttpReply {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpEndpointsOptions {
  // KJ's address form: "127.0.0.1:8050", "unix:/path" (see common/address.h).
  std::string kj_address;
  // Empty: no check.
  std::string token;
  // Open HTTP connections at once; more are closed on accept and counted.
  uint64_t max_connections = 64;
};

struct HttpCounters {
  uint64_t requests = 0;               // requests routed (any status)
  uint64_t unauthorized = 0;           // 401: missing or wrong bearer token
  uint64_t not_found = 0;              // 404
  uint64_t method_not_allowed = 0;     // 405: anything but GET
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;    // over max_connections
};

class HttpEndpoints {
 public:
  using Route = std::function<kj::Promise<HttpReply>()>;

  HttpEndpoints(uvkj::UvAsyncIo& io, HttpEndpointsOptions options);
  ~HttpEndpoints() noexcept(false);
  HttpEndpoints(const HttpEndpoints&) = delete;
  HttpEndpoints& operator=(const HttpEndpoints&) = delete;

  // `path` is matched exactly, without the query string. A public route is
  // served without the token.
  void AddRoute(std::string path, Route route, bool is_public = false);

  // Binds the address and starts accepting; returns the port bound (for TCP;
  // 0 for a Unix socket). Blocks on the loop: call before the loop runs.
  Result<unsigned> Listen();
  // Stops accepting and closes every open connection. Idempotent.
  void Stop();

  const HttpCounters& counters() const { return counters_; }
  // Time each route ran on the loop thread (its promise's work elsewhere not
  // included), by path.
  std::map<std::string, const Histogram*> RenderTimes() const;
  uint64_t connections_open() const { return open_; }

 private:
  class Service;
  class ErrorHandler;
  struct RouteEntry {
    Route route;
    bool is_public = false;
    Histogram render_seconds{Histogram::SecondsBounds()};
  };

  kj::Promise<void> AcceptLoop();
  kj::Promise<void> Send(HttpReply reply, kj::HttpHeaders& headers, kj::HttpService::Response& response);
  kj::Promise<void> Handle(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                           kj::HttpService::Response& response);
  bool Authorized(const kj::HttpHeaders& headers) const;

  uvkj::UvAsyncIo& io_;
  const HttpEndpointsOptions options_;
  std::map<std::string, RouteEntry, std::less<>> routes_;
  HttpCounters counters_;
  uint64_t open_ = 0;
  kj::Own<kj::HttpHeaderTable> header_table_;
  kj::HttpHeaderId authorization_;
  kj::Own<Service> service_;
  kj::Own<kj::HttpServer> server_;
  kj::Own<kj::ConnectionReceiver> receiver_;
  kj::Promise<void> accepting_ = nullptr;
  kj::Own<ErrorHandler> error_handler_;
  // Declared last: destroyed first, with every connection it serves.
  kj::Own<kj::TaskSet> connections_;
};

}  // namespace dispatch::reactor
