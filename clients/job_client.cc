#include "clients/job_client.h"

#include <kj/debug.h>

#include "common/log.h"
#include "common/rpc_status.h"

namespace dispatch::clients {

namespace {

kj::Promise<capnp::Response<rpc::Dispatcher::GetOrCreateJobResults>> SendGetOrCreateJob(
    rpc::Dispatcher::Client dispatcher, const JobOptions& options) {
  auto request = dispatcher.getOrCreateJobRequest();
  auto job = request.initRequest();
  job.setDatasetId(options.dataset_id);
  job.setProcessingMode(options.processing_mode);
  job.setJobName(options.job_name);
  job.setJobNameIndex(options.job_name_index);
  job.setNumConsumers(options.num_consumers);
  job.setTargetWorkers(options.target_workers);
  job.setRequeueUnfinishedSplits(options.requeue_unfinished_splits);
  return request.send();
}

}  // namespace

kj::Promise<kj::Own<JobClient>> JobClient::Create(rpc::Dispatcher::Client dispatcher,
                                                  kj::Timer& timer, JobOptions options) {
  auto sent = SendGetOrCreateJob(dispatcher, options);
  return sent.then([dispatcher, &timer, options = kj::mv(options)](
                       capnp::Response<rpc::Dispatcher::GetOrCreateJobResults> r) mutable {
    return kj::heap<JobClient>(kj::mv(dispatcher), nullptr, timer, kj::mv(options), r.getJobId(),
                               r.getJobClientId(), r.getIncarnation());
  });
}

kj::Promise<kj::Own<JobClient>> JobClient::Create(ReconnectingConnection& connection,
                                                  kj::Timer& timer, JobOptions options) {
  return connection.Ready()
      .then(
          [&connection, options]() { return SendGetOrCreateJob(connection.dispatcher(), options); })
      .then([&connection, &timer, options = kj::mv(options)](
                capnp::Response<rpc::Dispatcher::GetOrCreateJobResults> r) mutable {
        return kj::heap<JobClient>(connection.dispatcher(), connection, timer, kj::mv(options),
                                   r.getJobId(), r.getJobClientId(), r.getIncarnation());
      });
}

JobClient::JobClient(rpc::Dispatcher::Client dispatcher,
                     kj::Maybe<ReconnectingConnection&> reconnecting, kj::Timer& timer,
                     JobOptions options, uint64_t job_id, uint64_t job_client_id,
                     uint64_t incarnation)
    : dispatcher_(kj::mv(dispatcher)),
      reconnecting_(reconnecting),
      timer_(timer),
      options_(kj::mv(options)),
      job_id_(job_id),
      job_client_id_(job_client_id),
      incarnation_(incarnation) {
  beat_requested_ = true;  // the first heartbeat goes at once
  loop_ = Loop().eagerlyEvaluate([](kj::Exception&& e) {
    Log(LogLevel::kWarning, "job client heartbeats ended: ", e.getDescription());
  });
}

rpc::Dispatcher::Client JobClient::Dispatcher() {
  KJ_IF_MAYBE (connection, reconnecting_) {
    return connection->dispatcher();
  }
  return dispatcher_;
}

void JobClient::SetRounds(int64_t current_round, int64_t blocked_round) {
  current_round_ = current_round;
  blocked_round_ = blocked_round;
}

kj::Promise<void> JobClient::Loop() {
  kj::Promise<void> wait = nullptr;
  if (beat_requested_) {
    beat_requested_ = false;
    wait = kj::READY_NOW;
  } else {
    auto paf = kj::newPromiseAndFulfiller<void>();
    wake_ = kj::mv(paf.fulfiller);
    wait = timer_.afterDelay(options_.heartbeat_interval_ms * kj::MILLISECONDS)
               .exclusiveJoin(kj::mv(paf.promise))
               .then([this]() { wake_ = nullptr; });
  }
  return wait.then([this]() { return Beat(); }).then([this]() -> kj::Promise<void> {
    if (closed_ || !status_.ok()) return kj::READY_NOW;  // terminal: no more heartbeats
    return Loop();
  });
}

kj::Promise<void> JobClient::Beat() {
  // Those who asked for a heartbeat before this one was sent get its outcome.
  // Held once for both branches below (two lambdas cannot both own it).
  auto waiters = kj::heap<kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>>(kj::mv(beat_waiters_));
  beat_waiters_ = kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>();
  auto& ref = *waiters;
  kj::Promise<void> ready = kj::READY_NOW;
  KJ_IF_MAYBE (connection, reconnecting_) {
    ready = connection->Ready();
  }
  return ready
      .then([this]() {
        KJ_IF_MAYBE (connection, reconnecting_) {
          sent_generation_ = connection->generation();
        }
        auto request = Dispatcher().clientHeartbeatRequest();
        auto heartbeat = request.initRequest();
        heartbeat.setJobClientId(job_client_id_);
        heartbeat.setCurrentRound(current_round_);
        heartbeat.setBlockedRound(blocked_round_);
        heartbeat.setKnownTaskListVersion(known_version_);
        return request.send();
      })
      .then(
          [this, &ref](capnp::Response<rpc::Dispatcher::ClientHeartbeatResults> r) {
            Apply(r.getResponse());
            for (auto& waiter : ref) waiter->fulfill();
          },
          [this, &ref](kj::Exception&& e) {
            Fail(e, sent_generation_);
            for (auto& waiter : ref) waiter->reject(kj::cp(e));
          })
      .attach(kj::mv(waiters));
}

void JobClient::Apply(rpc::ClientHeartbeatResponse::Reader response) {
  ++heartbeats_;
  bool changed = false;
  uint64_t incarnation = response.getIncarnation();
  bool restarted = incarnation != 0 && incarnation_ != 0 && incarnation != incarnation_;
  incarnation_ = incarnation;
  if (response.getTaskListChanged()) {
    std::vector<TaskDescription> tasks;
    tasks.reserve(response.getTasks().size());
    for (auto info : response.getTasks()) tasks.push_back(TaskDescription::FromReader(info));
    changed = tasks != tasks_;
    tasks_ = std::move(tasks);
    known_version_ = response.getTaskListVersion();
    ++task_list_reads_;
  } else if (restarted && known_version_ != 0) {
    // A restarted dispatcher may number its lists anew: read it whole.
    Log(LogLevel::kInfo, "job client ", job_client_id_,
        ": the dispatcher restarted; re-reading the task list");
    known_version_ = 0;
    beat_requested_ = true;
  }
  block_round_ = response.getBlockRound();
  if (response.getJobFinished() && !job_finished_) {
    job_finished_ = true;
    changed = true;
  }
  if (changed) NotifyChanged();
}

void JobClient::Fail(const kj::Exception& e, uint64_t generation) {
  Status status = StatusFromException(e);
  Log(LogLevel::kWarning, "job client ", job_client_id_, " of job ", job_id_,
      ": heartbeat failed: ", status.ToString().c_str());
  bool disconnected = e.getType() == kj::Exception::Type::DISCONNECTED;
  KJ_IF_MAYBE (connection, reconnecting_) {
    if (disconnected) {
      connection->Drop(generation);  // the next heartbeat connects again
      disconnected = false;
    }
  }
  bool terminal = status.code() == StatusCode::kNotFound ||
                  status.code() == StatusCode::kFailedPrecondition || disconnected;
  if (!terminal) return;  // try again at the next interval
  status_ = status;
  NotifyChanged();
}

void JobClient::NotifyChanged() {
  auto waiters = kj::mv(change_waiters_);
  change_waiters_ = kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>();
  for (auto& waiter : waiters) waiter->fulfill();
}

kj::Promise<void> JobClient::HeartbeatNow() {
  if (closed_) return KJ_EXCEPTION(FAILED, "the job client is closed");
  if (!status_.ok()) return ExceptionFromStatus(status_);
  auto paf = kj::newPromiseAndFulfiller<void>();
  beat_waiters_.add(kj::mv(paf.fulfiller));
  KJ_IF_MAYBE (wake, wake_) {
    (*wake)->fulfill();
  } else {
    beat_requested_ = true;
  }
  return kj::mv(paf.promise);
}

kj::Promise<void> JobClient::WhenChanged() {
  if (!status_.ok() || closed_) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  change_waiters_.add(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

kj::Promise<void> JobClient::Close() {
  if (closed_) return kj::READY_NOW;
  closed_ = true;
  loop_ = nullptr;
  wake_ = nullptr;
  NotifyChanged();
  kj::Promise<void> ready = kj::READY_NOW;
  KJ_IF_MAYBE (connection, reconnecting_) {
    ready = connection->Ready();
  }
  return ready.then([this]() {
    auto request = Dispatcher().releaseJobClientRequest();
    request.setJobClientId(job_client_id_);
    return request.send().ignoreResult();
  });
}

}  // namespace dispatch::clients
