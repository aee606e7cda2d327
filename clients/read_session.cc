#include "clients/read_session.h"

#include <kj/debug.h>

#include <algorithm>
#include <deque>

#include "clients/dispatcher_addresses.h"
#include "common/address.h"
#include "common/log.h"
#include "common/rpc_status.h"

namespace dispatch::clients {
namespace {

constexpr uint64_t kMaxBytesPerCall = 32 << 20;
// How often the session looks at its job when nothing told it to.
constexpr auto kFollowInterval = 200 * kj::MILLISECONDS;

bool IsDisconnect(const kj::Exception& e) {
  return e.getType() == kj::Exception::Type::DISCONNECTED ||
         e.getType() == kj::Exception::Type::OVERLOADED;
}

}  // namespace

Status ValidateReaderOptions(const ReaderOptions& o) {
  Result<std::vector<std::string>> addresses = ParseDispatcherAddressList(o.dispatcher_address);
  if (!addresses.ok())
    return InvalidArgumentError("dispatcher address: " + addresses.status().message());
  if (o.dataset_id == 0 && o.dataset.definition.empty()) {
    return InvalidArgumentError("no dataset: give a definition or a registered dataset id");
  }
  if (o.job.num_consumers > 0) {
    if (o.consumer_index < 0 || o.consumer_index >= o.job.num_consumers) {
      return InvalidArgumentError("round robin over " + std::to_string(o.job.num_consumers) +
                                  " consumers needs a consumer index in [0, " +
                                  std::to_string(o.job.num_consumers) + "), got " +
                                  std::to_string(o.consumer_index));
    }
  } else if (o.consumer_index >= 0) {
    return InvalidArgumentError("a consumer index needs round robin (consumers > 0)");
  }
  if (o.max_buffered_elements == 0 || o.max_buffered_bytes == 0) {
    return InvalidArgumentError("the read-ahead buffer limits must be > 0");
  }
  if (o.max_elements_per_call == 0) return InvalidArgumentError("elements per call must be > 0");
  if (o.calls_per_task == 0 || o.calls_per_task > 16) {
    return InvalidArgumentError("calls in flight per task must be in [1, 16]");
  }
  if (o.max_bytes_per_call == 0 || o.max_bytes_per_call > kMaxBytesPerCall) {
    return InvalidArgumentError("bytes per call must be in [1, 32 MiB]");
  }
  if (o.job.heartbeat_interval_ms == 0)
    return InvalidArgumentError("heartbeat interval must be > 0");
  return Status::Ok();
}

ElementBatch BatchOfReply(capnp::Response<rpc::WorkerData::GetElementsResults>&& reply,
                          uint64_t task_id, int64_t round) {
  ElementBatch batch;
  batch.task_id = task_id;
  batch.round = round;
  auto elements = reply.getResult().getElements();
  batch.count = elements.size();
  for (capnp::Data::Reader data : elements) batch.bytes += data.size();
  if (batch.bytes >= kOwnedElementBytes * batch.count) {
    batch.owned.reserve(batch.count);
    for (capnp::Data::Reader data : elements)
      batch.owned.emplace_back(reinterpret_cast<const char*>(data.begin()), data.size());
    return batch;  // the reply is not kept
  }
  batch.elements.reserve(batch.count);
  for (capnp::Data::Reader data : elements) batch.elements.push_back(data);
  // The message stays where it is: moving the response moves its owner only.
  batch.reply = kj::heap(kj::mv(reply));
  return batch;
}

// One connection to a worker's transfer address, made again after a drop
// (with backoff) for as long as someone asks for it.
struct ReadSession::Transfer {
  Transfer(kj::Network& network, kj::Timer& timer, std::string address, uint64_t seed)
      : network(network), timer(timer), address(kj::mv(address)), backoff(20, 1000, seed) {}

  // Resolves once connected (`client` is set), after as many attempts as it takes.
  kj::Promise<void> Ready() {
    if (client != nullptr) return kj::READY_NOW;
    if (connecting == nullptr) connecting = Connect().fork();
    KJ_IF_MAYBE (f, connecting) {
      return f->addBranch();
    }
    KJ_UNREACHABLE;
  }

  kj::Promise<void> Connect() {
    Result<std::string> kj_address = ToKjAddress(address);
    if (!kj_address.ok()) {
      return ExceptionFromStatus(InvalidArgumentError("task transfer address " + address + ": " +
                                                      kj_address.status().message()));
    }
    return network.parseAddress(kj_address->c_str())
        .then([](kj::Own<kj::NetworkAddress> a) { return a->connect().attach(kj::mv(a)); })
        .then(
            [this](kj::Own<kj::AsyncIoStream> s) -> kj::Promise<void> {
              stream = kj::mv(s);
              // As large as the worker's own limit: one reply may carry a big element.
              capnp::ReaderOptions limits;
              limits.traversalLimitInWords = (uint64_t{128} << 20) / sizeof(capnp::word);
              vat = kj::heap<capnp::TwoPartyVatNetwork>(*stream, capnp::rpc::twoparty::Side::CLIENT,
                                                        limits);
              rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(
                  capnp::makeRpcClient(*vat));
              capnp::MallocMessageBuilder message(8);
              auto server = message.initRoot<capnp::rpc::twoparty::VatId>();
              server.setSide(capnp::rpc::twoparty::Side::SERVER);
              client = rpc->bootstrap(server).castAs<rpc::WorkerData>();
              ++generation;
              backoff.Reset();
              return kj::READY_NOW;
            },
            [this](kj::Exception&& e) -> kj::Promise<void> {
              Log(LogLevel::kDebug, "reader: cannot reach worker at ", address.c_str(), ": ",
                  e.getDescription());
              return timer.afterDelay(backoff.NextDelayMs() * kj::MILLISECONDS).then([this]() {
                return Connect();
              });
            });
  }

  void Drop(uint64_t failed_generation) {
    if (failed_generation != generation || client == nullptr) return;
    client = nullptr;
    rpc = nullptr;
    vat = nullptr;
    stream = nullptr;
    connecting = nullptr;  // resolved: the next Ready() connects again
  }

  kj::Network& network;
  kj::Timer& timer;
  const std::string address;
  Backoff backoff;
  // Declared in carrying order: destroyed RPC system first, stream last.
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyVatNetwork> vat;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  kj::Maybe<rpc::WorkerData::Client> client;
  uint64_t generation = 0;
  kj::Maybe<kj::ForkedPromise<void>> connecting;  // declared last: cancelled first
};

// Reads one task to its end of sequence for this consumer, with
// `calls_per_task` calls in flight: each "lane" is a consumer of its own at
// the worker (its own id and sequence, so acknowledgements and retries work
// lane by lane), and replies are taken in the order the calls went out, which
// is the order the worker handed the elements out on this connection.
class ReadSession::TaskStream {
 public:
  TaskStream(ReadSession& session, TaskDescription task) : session_(session), task_(kj::mv(task)) {
    lanes_.resize(std::max<uint32_t>(1, session.options_.calls_per_task));
    for (Lane& lane : lanes_) lane.consumer_id = session.NewConsumerId();
    loop_ = Loop().eagerlyEvaluate([this](kj::Exception&& e) {
      session_.sink_.Fail(StatusFromException(e));
      done_ = true;
      session_.WakeFollow();
    });
  }
  bool done() const { return done_; }

 private:
  using Reply = capnp::Response<rpc::WorkerData::GetElementsResults>;
  struct Lane {
    uint64_t consumer_id = 0;
    uint64_t sequence = 1;
    bool busy = false;   // a call is out
    bool ended = false;  // end of sequence
  };
  struct Call {
    size_t lane;
    kj::Promise<Reply> reply;
  };

  // Every lane that has not ended gets a call out, in lane order.
  void SendCalls() {
    for (size_t i = 0; i < lanes_.size(); ++i) {
      Lane& lane = lanes_[i];
      if (lane.busy || lane.ended) continue;
      lane.busy = true;
      in_flight_.push_back(Call{i, session_.Call(task_, lane.consumer_id, lane.sequence, -1)});
    }
  }

  kj::Promise<void> Loop() {
    SendCalls();
    if (in_flight_.empty()) {  // every lane ended
      done_ = true;
      session_.ended_[task_.task_id] = true;
      session_.WakeFollow();
      return kj::READY_NOW;
    }
    Call call = kj::mv(in_flight_.front());
    in_flight_.pop_front();
    const size_t i = call.lane;
    return call.reply.then(
        [this, i](Reply&& r) -> kj::Promise<void> {
          Lane& lane = lanes_[i];
          lane.busy = false;
          ++lane.sequence;  // the lane's next call acknowledges this reply
          auto result = r.getResult();
          switch (result.getStatus()) {
            case rpc::ElementStatus::READY: {
              if (!session_.sink_.Push(BatchOfReply(kj::mv(r), task_.task_id, -1))) {
                return session_.sink_.WhenRoom().then([this]() { return Loop(); });
              }
              return Loop();
            }
            case rpc::ElementStatus::NOT_READY:
              return Loop();
            case rpc::ElementStatus::END_OF_SEQUENCE:
              lane.ended = true;
              return Loop();
          }
          return KJ_EXCEPTION(FAILED, "unknown element status from the worker");
        },
        [this, i](kj::Exception&& e) -> kj::Promise<void> {
          if (!IsDisconnect(e)) return kj::mv(e);
          // The same sequence again: a lost reply is repeated, not skipped.
          lanes_[i].busy = false;
          return session_.timer_.afterDelay(20 * kj::MILLISECONDS).then([this]() {
            return Loop();
          });
        });
  }

  ReadSession& session_;
  const TaskDescription task_;
  std::vector<Lane> lanes_;
  std::deque<Call> in_flight_;  // in the order the calls went out
  bool done_ = false;
  kj::Promise<void> loop_ = nullptr;  // declared last: cancelled first
};

ReadSession::ReadSession(kj::Network& network, kj::Timer& timer, const ReaderOptions& options,
                         ElementSink& sink)
    : network_(network),
      timer_(timer),
      options_(options),
      sink_(sink),
      rng_(options.seed != 0 ? options.seed : std::random_device{}()),
      connection_(network, timer, options.dispatcher_address, options.token, rng_()) {}

ReadSession::~ReadSession() noexcept(false) {
  round_robin_ = nullptr;
  streams_.clear();
  transfers_.clear();
}

uint64_t ReadSession::NewConsumerId() { return rng_() | 1; }

void ReadSession::WakeFollow() {
  KJ_IF_MAYBE (f, follow_wake_) {
    (*f)->fulfill();
  }
  follow_wake_ = nullptr;
}

kj::Promise<kj::Own<JobClient>> ReadSession::OpenJob() {
  return connection_.Ready()
      .then([this]() -> kj::Promise<kj::Own<JobClient>> {
        const uint64_t generation = connection_.generation();
        kj::Promise<uint64_t> dataset_id = options_.dataset_id;
        if (options_.dataset_id == 0) {
          dataset_id = RegisterDataset(connection_.dispatcher(), options_.dataset)
                           .then([](RegisteredDataset d) { return d.dataset_id; });
        }
        return dataset_id
            .then([this](uint64_t id) {
              JobOptions job = options_.job;
              job.dataset_id = id;
              return JobClient::Create(connection_, timer_, kj::mv(job));
            })
            .catch_([this, generation](kj::Exception&& e) -> kj::Promise<kj::Own<JobClient>> {
              // Only a dropped connection: OVERLOADED is also a refusal
              // (ResourceExhausted) that would come again.
              if (closed_ || e.getType() != kj::Exception::Type::DISCONNECTED) return kj::mv(e);
              Log(LogLevel::kDebug, "reader: the connection dropped while opening the job (",
                  e.getDescription(), "); again on the next one");
              connection_.Drop(generation);  // Ready() connects again, with back-off
              return OpenJob();
            });
      });
}

kj::Promise<void> ReadSession::Run() {
  return OpenJob()
      .then([this](kj::Own<JobClient> job) {
        job_ = kj::mv(job);
        sink_.Opened(job_->job_id(), job_->job_client_id());
        if (options_.job.num_consumers > 0) {
          rr_consumer_id_ = NewConsumerId();
          round_robin_ = RoundRobin().eagerlyEvaluate([this](kj::Exception&& e) {
            sink_.Fail(StatusFromException(e));
            WakeFollow();
          });
        }
        return Follow();
      });
}

kj::Promise<void> ReadSession::Follow() {
  if (closed_ || sink_done_) return kj::READY_NOW;
  if (!job_->status().ok()) {
    sink_.Fail(job_->status());
    return kj::READY_NOW;
  }
  if (options_.job.num_consumers == 0) {
    SyncStreams();
    if (job_->job_finished() && streams_.empty()) {
      sink_.End();
      return kj::READY_NOW;
    }
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  follow_wake_ = kj::mv(paf.fulfiller);
  return job_->WhenChanged()
      .exclusiveJoin(kj::mv(paf.promise))
      .exclusiveJoin(timer_.afterDelay(kFollowInterval))
      .then([this]() { return Follow(); });
}

void ReadSession::SyncStreams() {
  const std::vector<TaskDescription>& tasks = job_->tasks();
  std::map<uint64_t, const TaskDescription*> listed;
  for (const TaskDescription& task : tasks) listed[task.task_id] = &task;
  // Streams of tasks that ended, finished (every element acknowledged), or left the list.
  for (auto it = streams_.begin(); it != streams_.end();) {
    auto found = listed.find(it->first);
    if (it->second->done() || found == listed.end() || found->second->finished) {
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
  bool all_ended = !tasks.empty();
  for (const TaskDescription& task : tasks) {
    const bool ended = task.finished || ended_.contains(task.task_id);
    if (!ended) all_ended = false;
    if (ended || task.pending || streams_.contains(task.task_id)) continue;
    ++task_list_changes_;
    streams_.emplace(task.task_id, kj::heap<TaskStream>(*this, task));
  }
  // Every task ended here: ask now whether the job finished instead of
  // waiting for the next heartbeat.
  if (all_ended && !job_->job_finished() && !heartbeat_asked_) {
    heartbeat_asked_ = true;
    background_.add(
        job_->HeartbeatNow().then([this]() { heartbeat_asked_ = false; },
                                  [this](kj::Exception&&) { heartbeat_asked_ = false; }));
  }
}

kj::Promise<void> ReadSession::RoundRobin() {
  if (closed_) return kj::READY_NOW;
  std::vector<const TaskDescription*> eligible;
  for (const TaskDescription& task : job_->tasks()) {
    if (!task.pending && task.starting_round <= round_) eligible.push_back(&task);
  }
  std::sort(
      eligible.begin(), eligible.end(),
      [](const TaskDescription* a, const TaskDescription* b) { return a->task_id < b->task_id; });
  const int64_t block = job_->block_round();
  auto wait_for_change = [this]() {
    return job_->WhenChanged().exclusiveJoin(timer_.afterDelay(kFollowInterval)).then([this]() {
      return RoundRobin();
    });
  };
  if (block >= 0 && round_ >= block) {
    // A task is waiting to join at this round: every consumer waits here.
    job_->SetRounds(round_, round_);
    return wait_for_change();
  }
  if (eligible.empty()) return wait_for_change();
  TaskDescription task = *eligible[static_cast<size_t>(round_) % eligible.size()];
  uint64_t& sequence = rr_sequences_.emplace(task.task_id, 1).first->second;
  return Call(task, rr_consumer_id_, sequence, round_)
      .then(
          [this, task_id = task.task_id](
              capnp::Response<rpc::WorkerData::GetElementsResults> r) -> kj::Promise<void> {
            ++rr_sequences_[task_id];
            auto result = r.getResult();
            switch (result.getStatus()) {
              case rpc::ElementStatus::READY: {
                ElementBatch batch = BatchOfReply(kj::mv(r), task_id, round_);
                ++round_;
                job_->SetRounds(round_, -1);
                if (!sink_.Push(kj::mv(batch))) {
                  return sink_.WhenRoom().then([this]() { return RoundRobin(); });
                }
                return RoundRobin();
              }
              case rpc::ElementStatus::NOT_READY:
                return RoundRobin();
              case rpc::ElementStatus::END_OF_SEQUENCE:
                sink_.End();
                sink_done_ = true;
                WakeFollow();
                return kj::READY_NOW;
            }
            return KJ_EXCEPTION(FAILED, "unknown element status from the worker");
          },
          [this](kj::Exception&& e) -> kj::Promise<void> {
            if (!IsDisconnect(e)) return kj::mv(e);
            return timer_.afterDelay(20 * kj::MILLISECONDS).then([this]() { return RoundRobin(); });
          });
}

ReadSession::Transfer& ReadSession::TransferTo(const std::string& address) {
  auto it = transfers_.find(address);
  if (it == transfers_.end()) {
    it = transfers_.emplace(address, kj::heap<Transfer>(network_, timer_, address, rng_())).first;
  }
  return *it->second;
}

kj::Promise<capnp::Response<rpc::WorkerData::GetElementsResults>> ReadSession::Call(
    const TaskDescription& task, uint64_t consumer_id, uint64_t sequence, int64_t round) {
  Transfer& transfer = TransferTo(task.transfer_address);
  const uint64_t task_id = task.task_id;
  return transfer.Ready().then([this, &transfer, task_id, consumer_id, sequence, round]() {
    rpc::WorkerData::Client client = nullptr;
    KJ_IF_MAYBE (c, transfer.client) {
      client = *c;
    } else {
      return kj::Promise<capnp::Response<rpc::WorkerData::GetElementsResults>>(
          KJ_EXCEPTION(DISCONNECTED, "transfer connection dropped", transfer.address.c_str()));
    }
    const uint64_t generation = transfer.generation;
    auto request = client.getElementsRequest();
    auto ask = request.initRequest();
    ask.setTaskId(task_id);
    ask.setConsumerId(consumer_id);
    ask.setSequence(sequence);
    ask.setConsumerIndex(options_.job.num_consumers > 0 ? options_.consumer_index : -1);
    ask.setRound(options_.job.num_consumers > 0 ? round : -1);
    ask.setMaxElements(options_.job.num_consumers > 0 ? 1 : options_.max_elements_per_call);
    ask.setMaxBytes(options_.max_bytes_per_call);
    ask.setWaitMillis(options_.wait_ms);
    return kj::Promise<capnp::Response<rpc::WorkerData::GetElementsResults>>(request.send())
        .catch_([&transfer, generation](kj::Exception&& e)
                    -> kj::Promise<capnp::Response<rpc::WorkerData::GetElementsResults>> {
          if (IsDisconnect(e)) transfer.Drop(generation);
          return kj::mv(e);
        });
  });
}

kj::Promise<void> ReadSession::Close() {
  if (closed_) return kj::READY_NOW;
  closed_ = true;
  round_robin_ = nullptr;
  streams_.clear();
  transfers_.clear();
  WakeFollow();
  if (job_.get() == nullptr) return kj::READY_NOW;
  return job_->Close();
}

void ReadSession::taskFailed(kj::Exception&& e) {
  Log(LogLevel::kDebug, "reader: ", e.getDescription());
}

}  // namespace dispatch::clients
