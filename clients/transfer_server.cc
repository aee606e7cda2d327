#include "clients/transfer_server.h"

#include <capnp/rpc-twoparty.h>
#include <kj/debug.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "common/address.h"
#include "common/log.h"
#include "common/rpc_status.h"
#include "schema/data_transfer.capnp.h"

namespace dispatch::clients {
namespace {

// Cap'n Proto applies one size limit to both directions: it must fit the
// largest reply (ProducerLimits::max_reply_bytes plus one element, which may
// be large); requests are tiny, and the nesting limit keeps them flat.
capnp::ReaderOptions MessageLimits() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = (uint64_t{128} << 20) / sizeof(capnp::word);
  options.nestingLimit = 16;
  return options;
}

}  // namespace

class TransferServer::Session final : public rpc::WorkerData::Server {
 public:
  Session(ProducerDirectory& directory, kj::Timer& timer, uint32_t max_wait_ms, uint64_t connection)
      : directory_(directory), timer_(timer), max_wait_ms_(max_wait_ms), connection_(connection) {}
  ~Session() noexcept(false) {
    // The consumers may come back on another connection: their producers
    // hold what they have not acknowledged for a while (TaskProducer).
    for (const auto& [task_id, consumer_id] : consumers_) {
      if (TaskProducer* producer = directory_.Find(task_id)) {
        producer->DetachConsumer(consumer_id, connection_);
      }
    }
  }

  // Both calls may be held up to max_wait_ms, and a held call changes nothing
  // until it answers (TryServe is synchronous), so dropping it is safe: a
  // consumer that hangs up, or this worker's own shutdown, cancels it at
  // once instead of leaving it running past the RPC system that owned it.
  kj::Promise<void> getElement(GetElementContext context) override {
    context.allowCancellation();
    auto request = context.getParams().getRequest();
    return Serve(request, 1, [context]() mutable { return context.getResults().initResult(); });
  }
  kj::Promise<void> getElements(GetElementsContext context) override {
    context.allowCancellation();
    auto request = context.getParams().getRequest();
    return Serve(request, request.getMaxElements(),
                 [context]() mutable { return context.getResults().initResult(); });
  }

 private:
  using InitResult = kj::Function<rpc::ElementResult::Builder()>;

  kj::Promise<void> Serve(rpc::ElementRequest::Reader request, uint32_t max_elements,
                          InitResult init) {
    ElementAsk ask;
    ask.consumer_id = request.getConsumerId();
    ask.sequence = request.getSequence();
    ask.consumer_index = request.getConsumerIndex();
    ask.round = request.getRound();
    ask.max_elements = std::max<uint32_t>(1, max_elements);
    ask.max_bytes = request.getMaxBytes();
    ask.connection = connection_;
    const uint64_t task_id = request.getTaskId();
    if (ask.consumer_id != 0) consumers_.insert({task_id, ask.consumer_id});
    const uint32_t wait_ms = std::min(request.getWaitMillis(), max_wait_ms_);
    const kj::TimePoint deadline = timer_.now() + wait_ms * kj::MILLISECONDS;
    return Attempt(task_id, ask, deadline, kj::mv(init));
  }

  kj::Promise<void> Attempt(uint64_t task_id, const ElementAsk& ask, kj::TimePoint deadline,
                            InitResult init) {
    TaskProducer* producer = directory_.Find(task_id);
    const bool expired = timer_.now() >= deadline;
    if (producer == nullptr) {
      if (directory_.Finished(task_id)) {
        init().setStatus(rpc::ElementStatus::END_OF_SEQUENCE);
        return kj::READY_NOW;
      }
      if (expired) {
        NotReady(init());
        return kj::READY_NOW;
      }
      // Not started here yet (the dispatcher's push may still be on its
      // way). Woken in line with the other calls for it: one that arrives
      // once the task runs is not answered before this one (it was, when
      // this one polled every 20 ms, and a reader then read a later batch
      // of elements first).
      return directory_.WhenChanged()
          .exclusiveJoin(timer_.atTime(deadline))
          .then([]() {}, [](kj::Exception&&) {})
          .then([this, task_id, ask, deadline, init = kj::mv(init)]() mutable {
            return Attempt(task_id, ask, deadline, kj::mv(init));
          });
    }
    // TryServe writes the result only when it answers.
    std::shared_ptr<const void> pin;
    const bool answered = producer->TryServe(
        ask, [&init]() { return init(); }, &pin);
    // The reply points at large elements: they live until this connection
    // writes the consumer's next reply, or closes.
    if (answered && pin != nullptr) pinned_[{task_id, ask.consumer_id}] = kj::mv(pin);
    if (answered) return kj::READY_NOW;
    if (expired) {
      NotReady(init());
      return kj::READY_NOW;
    }
    // The producer may go away while we wait (its task deleted): look it up again.
    return producer->WhenChanged()
        .exclusiveJoin(timer_.atTime(deadline))
        .then([]() {}, [](kj::Exception&&) {})
        .then([this, task_id, ask, deadline, init = kj::mv(init)]() mutable {
          return Attempt(task_id, ask, deadline, kj::mv(init));
        });
  }

  static void NotReady(rpc::ElementResult::Builder result) {
    result.setStatus(rpc::ElementStatus::NOT_READY);
    result.setRound(-1);
  }

  ProducerDirectory& directory_;
  kj::Timer& timer_;
  const uint32_t max_wait_ms_;
  const uint64_t connection_;                          // this connection's id, unique in the server
  std::set<std::pair<uint64_t, uint64_t>> consumers_;  // (task, consumer) seen here
  // The elements of the latest reply to each (task, consumer).
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const void>> pinned_;
};

struct TransferServer::Connection {
  Connection(kj::Own<kj::AsyncIoStream> s, capnp::Capability::Client bootstrap)
      : stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER, MessageLimits()),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
  // Destroyed bottom-up: the RPC system, then the network, then the stream.
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

class TransferServer::ErrorHandler final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& e) override {
    Log(LogLevel::kDebug, "transfer server: ", e.getDescription());
  }
};

TransferServer::TransferServer(ProducerDirectory& directory, TransferServerOptions options)
    : directory_(directory), options_(std::move(options)) {}

// Nothing is left to close here: Run's promise closed the connections on the
// loop thread (see Run), and one that never ran opened none.
TransferServer::~TransferServer() noexcept(false) = default;

void TransferServer::SetListening(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  listening_ = std::move(status);
  listening_cv_.notify_all();
}

std::optional<Status> TransferServer::WaitListening(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  listening_cv_.wait_for(lock, timeout, [this] { return listening_.has_value(); });
  return listening_;
}

Result<std::string> TransferServer::ListenOnFreePort(const std::string& address) {
  if (!IsTcpPortZero(address)) {
    return InvalidArgumentError("address '" + address + "' is not tcp:HOST:0");
  }
  if (bound_.get() >= 0) return FailedPreconditionError("the transfer server is already bound");
  const std::string host_port = *ToKjAddress(address);
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto failed = [&address](const std::string& why) {
    return UnavailableError("cannot listen on " + address + ": " + why);
  };
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), "0", &hints, &found);
  if (rc != 0) return failed(gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
  kj::AutoCloseFd fd(socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0 || bind(fd, found->ai_addr, found->ai_addrlen) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    return failed(strerror(errno));
  }
  // The numeric host it bound ("localhost" may name two), and the kernel's port.
  sockaddr_storage bound = {};
  socklen_t length = sizeof(bound);
  char numeric_host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    return failed(strerror(errno));
  }
  rc = getnameinfo(reinterpret_cast<sockaddr*>(&bound), length, numeric_host, sizeof(numeric_host),
                   port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
  if (rc != 0) return failed(gai_strerror(rc));
  const bool v6 = bound.ss_family == AF_INET6;
  address_ = std::string("tcp:") + (v6 ? "[" : "") + numeric_host + (v6 ? "]:" : ":") + port;
  bound_ = kj::mv(fd);
  return address_;
}

kj::Promise<void> TransferServer::Run(AgentEnvironment& environment) {
  // The agent drops this promise on its loop thread as it stops, and this
  // object dies later, off that thread, after the loop closed: the
  // connections (their RPC systems, streams and held calls) must go with the
  // promise, while there is a loop to close them on.
  return Listen(environment).attach(kj::defer([this]() { CloseConnections(); }));
}

void TransferServer::CloseConnections() {
  tasks_ = nullptr;  // first: its tasks watch the connections
  connections_.clear();
}

kj::Promise<void> TransferServer::Listen(AgentEnvironment& environment) {
  error_handler_ = kj::heap<ErrorHandler>();
  tasks_ = kj::heap<kj::TaskSet>(*error_handler_);
  kj::Timer& timer = environment.timer();
  if (bound_.get() >= 0) {
    constexpr uint kBoundFlags = kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP |
                                 kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC |
                                 kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK;
    return Serve(environment.low_level().wrapListenSocketFd(bound_.release(), kBoundFlags), timer);
  }
  const WorkerAgentOptions& agent = environment.options();
  address_ = !options_.listen_address.empty()  ? options_.listen_address
             : !agent.transfer_address.empty() ? agent.transfer_address
                                               : agent.worker_address;
  Result<std::string> kj_address = ToKjAddress(address_);
  if (!kj_address.ok()) {
    Status failed = InvalidArgumentError("transfer address: " + kj_address.status().message());
    SetListening(failed);
    return ExceptionFromStatus(failed);
  }
  return environment.network()
      .parseAddress(kj_address->c_str())
      .then([](kj::Own<kj::NetworkAddress> address) { return address->listen(); })
      .then(
          [this, &timer](kj::Own<kj::ConnectionReceiver> receiver) {
            return Serve(kj::mv(receiver), timer);
          },
          [this](kj::Exception&& e) -> kj::Promise<void> {
            SetListening(UnavailableError("cannot listen on " + address_ + ": " +
                                          e.getDescription().cStr()));
            return kj::mv(e);
          });
}

kj::Promise<void> TransferServer::Serve(kj::Own<kj::ConnectionReceiver> receiver,
                                        kj::Timer& timer) {
  Log(LogLevel::kInfo, "transfer server listening on ", address_.c_str());
  SetListening(Status::Ok());
  auto& ref = *receiver;
  return AcceptLoop(ref, timer).attach(kj::mv(receiver));
}

kj::Promise<void> TransferServer::AcceptLoop(kj::ConnectionReceiver& receiver, kj::Timer& timer) {
  return receiver.accept().then([this, &receiver, &timer](kj::Own<kj::AsyncIoStream> stream) {
    if (connections_.size() >= options_.max_connections) {
      // Dropping the stream closes the socket: the peer sees EOF at once.
      refused_connections_.fetch_add(1);
      Log(LogLevel::kWarning, "transfer server: refusing a connection, ", connections_.size(),
          " open (the limit); ", refused_connections_.load(), " refused so far");
    } else {
      const uint64_t id = next_connection_++;
      auto connection = kj::heap<Connection>(
          kj::mv(stream), kj::heap<Session>(directory_, timer, options_.max_wait_ms, id));
      auto closed = connection->network.onDisconnect();
      connections_.emplace(id, kj::mv(connection));
      // Destroyed on a later turn, not inside the network's own callback.
      tasks_->add(closed.then(
          [this, id]() { return kj::evalLater([this, id]() { connections_.erase(id); }); }));
    }
    return AcceptLoop(receiver, timer);
  });
}

}  // namespace dispatch::clients
