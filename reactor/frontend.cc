#include "reactor/frontend.h"

#include <errno.h>
#include <kj/debug.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <random>

#include "common/address.h"
#include "common/log.h"
#include "common/rpc_status.h"
#include "reactor/service_util.h"
#include "reactor/status_page.h"

namespace dispatch::reactor {
namespace {

uint64_t RandomIncarnation() {
  std::random_device device;
  uint64_t value = (static_cast<uint64_t>(device()) << 32) | device();
  return value == 0 ? 1 : value;
}

// A Unix socket path left by a dispatcher that died: nobody accepts on it.
void RemoveStaleUnixSocket(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool alive = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  int error = errno;
  close(fd);
  if (!alive && error == ECONNREFUSED) unlink(path.c_str());
}

}  // namespace

Frontend::Frontend(uvkj::UvAsyncIo& io, FrontendOptions options)
    : io_(io),
      options_(std::move(options)),
      incarnation_(options_.incarnation != 0 ? options_.incarnation : RandomIncarnation()),
      start_ns_(uv_hrtime()) {
  loop_thread_.Bind();
  rpc_metrics_ = kj::refcounted<RpcMetrics>();
  rpc_ = kj::heap<RpcServer>(io_, options_.limits, [this](RpcServer::ConnectionId id) {
    return capnp::Capability::Client(kj::heap<GatewayService>(*this, id));
  });
  rpc_->AddDisconnectListener([this](RpcServer::ConnectionId id) {
    if (gate_ != nullptr) gate_->OnDisconnect(id);
  });
  tick_ =
      std::make_unique<uvkj::UvRepeatingTimer>(io_.loop(), options_.tick_ms, [this]() { Tick(); });
  loop_passes_ = std::make_unique<LoopPassMeter>(io_.loop());
}

Frontend::~Frontend() noexcept(false) {
  http_.reset();
  off_loop_.reset();
  tick_.reset();
  loop_passes_.reset();
  gate_ = nullptr;
  rpc_ = nullptr;
  if (!unix_socket_path_.empty()) unlink(unix_socket_path_.c_str());
}

Result<std::string> Frontend::Bind() {
  Result<std::string> address = ToKjAddress(options_.listen);
  if (!address.ok()) return address.status();
  bool is_unix = address->rfind("unix:", 0) == 0;
  if (is_unix) RemoveStaleUnixSocket(address->substr(5));

  kj::Own<kj::ConnectionReceiver> receiver;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 auto parsed = io_.network().parseAddress(address->c_str()).wait(io_.wait_scope());
                 receiver = parsed->listen();
               })) {
    return UnavailableError("cannot listen on " + options_.listen + ": " +
                            e->getDescription().cStr());
  }

  std::string bound;
  if (is_unix) {
    unix_socket_path_ = address->substr(5);
    bound = options_.listen;
  } else {
    std::string host = address->substr(0, address->rfind(':'));
    bound = "tcp:" + host + ":" + std::to_string(receiver->getPort());
  }
  rpc_->Listen(kj::mv(receiver));
  DISPATCH_RETURN_IF_ERROR(StartHttp());
  tick_->Start();
  return bound;
}

Status Frontend::StartHttp() {
  if (options_.http == "off") return Status::Ok();
  Result<std::string> address = ToKjAddress(options_.http);
  if (!address.ok()) {
    return InvalidArgumentError("--http: " + address.status().message());
  }
  HttpEndpointsOptions http_options;
  http_options.kj_address = *address;
  http_options.token = options_.token;
  http_options.max_connections = options_.http_max_connections;
  http_ = std::make_unique<HttpEndpoints>(io_, http_options);
  off_loop_ = std::make_unique<OffLoop>(io_.loop());
  http_->AddRoute("/healthz", []() -> kj::Promise<HttpReply> {
    return HttpReply{200, "text/plain; charset=utf-8", "ok\n"};
  });
  // The page holds no data (it asks /api/status, with the token), so a
  // browser that cannot send a header may load it.
  http_->AddRoute(
      "/",
      []() -> kj::Promise<HttpReply> {
        return HttpReply{200, "text/html; charset=utf-8", std::string(StatusPageHtml())};
      },
      /*is_public=*/true);
  Result<unsigned> port = http_->Listen();
  if (!port.ok()) {
    http_.reset();
    return UnavailableError("--http=" + options_.http + ": " + port.status().message());
  }
  if (address->rfind("unix:", 0) == 0) {
    http_url_ = "http+" + *address;
  } else {
    http_url_ =
        "http://" + address->substr(0, address->rfind(':')) + ":" + std::to_string(*port) + "/";
  }
  return Status::Ok();
}

void Frontend::StopAccepting() {
  rpc_->StopAccepting();
  if (!unix_socket_path_.empty()) {
    unlink(unix_socket_path_.c_str());
    unix_socket_path_.clear();
  }
}

std::optional<uint64_t> Frontend::StartDrain(bool* shutting_down, const char* why,
                                             uint64_t drain_timeout_ms) {
  loop_thread().Check();
  if (*shutting_down) {
    Log(LogLevel::kInfo, "shutdown already in progress (", why, ")");
    return std::nullopt;
  }
  *shutting_down = true;
  Log(LogLevel::kInfo, "shutting down (", why, "): no new connections, draining replies");
  StopAccepting();
  return uv_now(io_.loop()) + drain_timeout_ms;
}

void Frontend::Close() {
  if (http_ != nullptr) http_->Stop();
  rpc_->CloseAll();
  tick_->Stop();
}

kj::Promise<void> Frontend::DrainReplies(uint64_t deadline_ms) {
  // Replies already computed sit in each connection's outbound queue until
  // the kernel takes them; wait for that (or the deadline).
  if (!rpc_->Quiescent() && uv_now(io_.loop()) < deadline_ms) {
    return io_.timer().afterDelay(2 * kj::MILLISECONDS).then([this, deadline_ms]() {
      return DrainReplies(deadline_ms);
    });
  }
  if (!rpc_->Quiescent())
    Log(LogLevel::kWarning, "drain deadline passed with replies still queued");
  return kj::READY_NOW;
}

uint64_t Frontend::uptime_micros() const { return (uv_hrtime() - start_ns_) / 1000; }

void Frontend::Tick() {
  loop_thread_.Check();
  loop_lag_.Observe(static_cast<double>(tick_->last_lateness_us()) * 1e-6);
  if (tick_hook_) tick_hook_();
  rpc_->EnforceLimits();
}

bool Frontend::TokenMatches(kj::ArrayPtr<const kj::byte> token) const {
  if (options_.token.empty()) return true;
  if (token.size() != options_.token.size()) return false;
  // Constant time in the token's bytes: no early exit on the first mismatch.
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i)
    diff |= token[i] ^ static_cast<unsigned char>(options_.token[i]);
  return diff == 0;
}

capnp::Capability::Server::DispatchCallResult GatewayService::dispatchCall(
    uint64_t interface_id, uint16_t method_id,
    capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) {
  DispatchCallResult result = DispatchWithPeerErrors(
      [&]() { return rpc::Gateway::Server::dispatchCall(interface_id, method_id, context); });
  result.promise = front_.rpc_metrics().Track(interface_id, method_id, kj::mv(result.promise));
  return result;
}

kj::Promise<void> GatewayService::authenticate(AuthenticateContext context) {
  front_.loop_thread().Check();
  // A closed gate (an HA standby) serves nothing here; its error says why.
  Gate* gate = front_.gate();
  if (gate == nullptr) ThrowStatus(UnavailableError("the dispatcher is shutting down"));
  if (Status open = gate->Open(); !open.ok()) ThrowStatus(open);
  if (!front_.TokenMatches(context.getParams().getToken())) {
    front_.rpc().CountAuthenticationFailure();
    if (++failed_attempts_ >= kMaxFailedAttempts) {
      front_.rpc().Close(connection_, "too many failed authentication attempts");
    }
    ThrowStatus(UnauthenticatedError("the gateway refused this token"));
  }
  // After the token: only a peer that may get in learns which versions do.
  Status protocol =
      CheckPeerProtocol(context.getParams().getProtocol(), front_.options().oldest_peer_protocol);
  if (!protocol.ok()) ThrowStatus(protocol);
  front_.rpc().MarkAuthenticated(connection_);
  context.getResults().setDispatcher(gate->Admit(connection_));
  return kj::READY_NOW;
}

}  // namespace dispatch::reactor
