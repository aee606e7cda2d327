#include "reactor/http_endpoints.h"

#include <kj/debug.h>
#include <uv.h>

#include "common/log.h"

namespace dispatch::reactor {
namespace {

kj::StringPtr StatusText(unsigned status) {
  switch (status) {
    case 200: return "OK";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

// Equal strings, in time that depends on their lengths only.
bool ConstantTimeEquals(kj::StringPtr a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

class HttpEndpoints::Service final : public kj::HttpService {
 public:
  explicit Service(HttpEndpoints& owner) : owner_(owner) {}
  kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                            kj::AsyncInputStream&, Response& response) override {
    return owner_.Handle(method, url, headers, response);
  }

 private:
  HttpEndpoints& owner_;
};

// A connection that failed (a reset peer, a malformed request KJ already
// answered) concerns that peer only.
class HttpEndpoints::ErrorHandler final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& exception) override {
    Log(LogLevel::kDebug, "http connection ended: ", exception.getDescription());
  }
};

HttpEndpoints::HttpEndpoints(uvkj::UvAsyncIo& io, HttpEndpointsOptions options)
    : io_(io), options_(std::move(options)) {
  kj::HttpHeaderTable::Builder builder;
  authorization_ = builder.add("Authorization");
  header_table_ = builder.build();
  service_ = kj::heap<Service>(*this);
  server_ = kj::heap<kj::HttpServer>(io_.timer(), *header_table_, *service_);
  error_handler_ = kj::heap<ErrorHandler>();
  connections_ = kj::heap<kj::TaskSet>(*error_handler_);
}

HttpEndpoints::~HttpEndpoints() noexcept(false) { Stop(); }

void HttpEndpoints::AddRoute(std::string path, Route route, bool is_public) {
  routes_[std::move(path)] = RouteEntry{std::move(route), is_public};
}

Result<unsigned> HttpEndpoints::Listen() {
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 auto parsed = io_.network().parseAddress(options_.kj_address.c_str()).wait(io_.wait_scope());
                 receiver_ = parsed->listen();
               })) {
    return UnavailableError("cannot listen for HTTP on " + options_.kj_address + ": " +
                            e->getDescription().cStr());
  }
  unsigned port = options_.kj_address.rfind("unix:", 0) == 0 ? 0 : receiver_->getPort();
  accepting_ = AcceptLoop().eagerlyEvaluate([](kj::Exception&& e) {
    Log(LogLevel::kWarning, "the HTTP listener stopped: ", e.getDescription());
  });
  return port;
}

void HttpEndpoints::Stop() {
  accepting_ = nullptr;
  receiver_ = nullptr;
  // Dropping the tasks cancels each connection's I/O and closes its socket.
  connections_ = kj::heap<kj::TaskSet>(*error_handler_);
}

kj::Promise<void> HttpEndpoints::AcceptLoop() {
  return receiver_->accept().then([this](kj::Own<kj::AsyncIoStream> stream) {
    if (open_ >= options_.max_connections) {
      ++counters_.connections_refused;
      Log(LogLevel::kDebug, "http connection refused: ", open_, " open (the limit)");
      stream = nullptr;  // closes it
    } else {
      ++counters_.connections_accepted;
      ++open_;
      auto done = kj::defer([this]() { --open_; });
      connections_->add(server_->listenHttp(kj::mv(stream)).attach(kj::mv(done)));
    }
    return AcceptLoop();
  });
}

std::map<std::string, const Histogram*> HttpEndpoints::RenderTimes() const {
  std::map<std::string, const Histogram*> times;
  for (const auto& [path, entry] : routes_) times[path] = &entry.render_seconds;
  return times;
}

bool HttpEndpoints::Authorized(const kj::HttpHeaders& headers) const {
  if (options_.token.empty()) return true;
  KJ_IF_MAYBE (value, headers.get(authorization_)) {
    static constexpr kj::StringPtr kBearer = "Bearer "_kj;
    if (value->startsWith(kBearer)) return ConstantTimeEquals(value->slice(kBearer.size()), options_.token);
  }
  return false;
}

kj::Promise<void> HttpEndpoints::Handle(kj::HttpMethod method, kj::StringPtr url,
                                        const kj::HttpHeaders& headers,
                                        kj::HttpService::Response& response) {
  ++counters_.requests;
  std::string path(url.cStr());
  if (size_t query = path.find('?'); query != std::string::npos) path.resize(query);
  HttpReply reply;
  auto reply_headers = kj::heap<kj::HttpHeaders>(*header_table_);
  auto route = routes_.find(path);
  if (method != kj::HttpMethod::GET) {
    ++counters_.method_not_allowed;
    reply = {405, "text/plain; charset=utf-8", "only GET is served here\n"};
    reply_headers->add("Allow", "GET");
  } else if (route != routes_.end() && !route->second.is_public && !Authorized(headers)) {
    ++counters_.unauthorized;
    reply = {401, "text/plain; charset=utf-8",
             "this dispatcher has a token: send it as \"Authorization: Bearer TOKEN\"\n"};
    reply_headers->add("WWW-Authenticate", "Bearer realm=\"dispatch\"");
  } else if (route == routes_.end()) {
    ++counters_.not_found;
    reply = {404, "text/plain; charset=utf-8", "no such path: " + path + "\n"};
  } else {
    const uint64_t start = uv_hrtime();
    kj::Promise<HttpReply> pending = route->second.route();
    route->second.render_seconds.Observe(static_cast<double>(uv_hrtime() - start) * 1e-9);
    kj::HttpHeaders& headers_ref = *reply_headers;
    return pending
        .then([this, &headers_ref, &response](HttpReply ready) {
          return Send(std::move(ready), headers_ref, response);
        })
        .attach(kj::mv(reply_headers));
  }
  return Send(std::move(reply), *reply_headers, response).attach(kj::mv(reply_headers));
}

kj::Promise<void> HttpEndpoints::Send(HttpReply reply, kj::HttpHeaders& reply_headers,
                                      kj::HttpService::Response& response) {
  reply_headers.set(kj::HttpHeaderId::CONTENT_TYPE, reply.content_type.c_str());
  reply_headers.add("Cache-Control", "no-store");
  auto body = kj::heap<std::string>(std::move(reply.body));
  auto stream = response.send(reply.status, StatusText(reply.status), reply_headers, body->size());
  if (body->empty()) return kj::READY_NOW;
  auto write = stream->write(body->data(), body->size());
  return write.attach(kj::mv(stream), kj::mv(body));
}

}  // namespace dispatch::reactor
