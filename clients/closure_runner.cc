#include "clients/closure_runner.h"

#include <kj/debug.h>

#include <algorithm>
#include <exception>
#include <iterator>

#include "common/closure_limits.h"
#include "common/closure_trace.h"
#include "common/log.h"

namespace dispatch::clients {

class ClosureRunner::Call final : public ClosureCall {
 public:
  Call(const Job& job, const std::vector<std::string>& components, const std::string& address,
       const ClosureExecutor& executor)
      : job_(job), components_(components), address_(address), executor_(executor) {}
  std::string_view args() const override { return job_.args; }
  const std::vector<std::string>& resources() const override { return components_; }
  const std::vector<std::string>& inputs() const override { return job_.inputs; }
  const std::string& worker_address() const override { return address_; }
  bool SleepFor(std::chrono::milliseconds duration) const override {
    return executor_.SleepFor(duration, job_.cancelled.get());
  }
  bool stopping() const override { return executor_.stopping(); }
  bool cancelled() const override { return job_.cancelled != nullptr && job_.cancelled->load(); }

 private:
  const Job& job_;
  const std::vector<std::string>& components_;
  const std::string& address_;
  const ClosureExecutor& executor_;
};

void ClosureRunner::LimitOutcome(Outcome& outcome, uint64_t max_result_bytes) {
  std::string& data = outcome.output.mutable_data();
  if (outcome.output.ok()) {
    if (max_result_bytes == 0 || data.size() <= max_result_bytes) return;
    outcome.output = ClosureOutput::UserError(
        ResultOverLimitError(outcome.closure_id, data.size(), max_result_bytes));
    board_.Update([](WorkerAgentStatus& s) { ++s.closure_results_over_limit; });
    return;
  }
  if (data.size() > kMaxClosureErrorTextBytes) data = BoundedErrorText(data);
}

namespace {

// Runs `function`, turning an exception into a user error: a throwing
// function must fail its closure, never the worker.
ClosureOutput Invoke(const std::string& name, const ClosureFunction& function,
                     const ClosureCall& call) {
  std::string what;
  try {
    return function(call);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (const kj::Exception& e) {
    what = e.getDescription().cStr();
  } catch (...) {
    what = "an unknown exception";
  }
  return ClosureOutput::UserError("function " + name + " threw: " + what);
}

}  // namespace

ClosureRunner::ClosureRunner(LoopThread& loop_thread, const WorkerAgentOptions& options,
                             const FunctionRegistry& functions, StatusBoard& board)
    : loop_thread_(loop_thread),
      options_(options),
      functions_(functions),
      board_(board),
      executor_(std::max<uint32_t>(options.max_closures, 1)),
      tasks_(*this) {}

ClosureRunner::~ClosureRunner() noexcept(false) {
  executor_.Stop();  // no Complete() after this
}

void ClosureRunner::OnRunClosures(capnp::List<rpc::ClosureAssignment>::Reader closures,
                                  capnp::List<rpc::ResourceSpec>::Reader resources) {
  for (auto spec : resources) {
    auto args = spec.getArgs();
    const uint64_t id = spec.getResourceId();
    bool added = resources_.AddSpec(
        id, ResourceCache::Spec{spec.getFunction().cStr(),
                                std::string(reinterpret_cast<const char*>(args.begin()), args.size())});
    // Built now, on an executor thread, so that the first closure using it
    // finds it ready (or waits for this build). A failure is not kept: that
    // closure tries again and reports the builder's error.
    if (added) {
      executor_.Submit([this, id]() { (void)Component(id); });
    }
  }
  uint64_t session = link_ != nullptr ? link_->session() : 0;
  uint64_t received_ns = 0;  // read once, and only for a traced closure
  board_.Update([&](WorkerAgentStatus& s) { s.closures_received += closures.size(); });
  for (auto assignment : closures) {
    // Keyed by link session too: after a reconnect (a dispatcher restart may
    // hand out the same closure id and attempt again for another closure) a
    // push is new even while the old run finishes (its outcome is dropped).
    auto key = std::make_tuple(assignment.getClosureId(), assignment.getAttempt(), session);
    Job job;
    if (!running_.emplace(key, job.cancelled).second) continue;  // a redone push of what we run
    job.closure_id = assignment.getClosureId();
    job.attempt = assignment.getAttempt();
    job.session = session;
    job.function = assignment.getFunction().cStr();
    auto args = assignment.getArgs();
    job.args.assign(reinterpret_cast<const char*>(args.begin()), args.size());
    for (uint64_t id : assignment.getResources()) job.resources.push_back(id);
    for (auto input : assignment.getInputs())
      job.inputs.emplace_back(reinterpret_cast<const char*>(input.begin()), input.size());
    if (assignment.getTrace()) {
      if (received_ns == 0) received_ns = TraceNowNanos();
      job.trace_received_ns = received_ns;
    }

    auto found = functions_.find(job.function);
    if (found == functions_.end()) {
      Finish(Outcome{job.closure_id, job.attempt, session,
                     ClosureOutput::UserError("function " + job.function +
                                              " is not registered on this worker")});
      continue;
    }
    if (found->second.options.run_inline && job.resources.empty()) {
      Finish(Run(job));
      continue;
    }
    auto shared = std::make_shared<Job>(std::move(job));
    bool submitted = executor_.Submit([this, shared]() {
      if (shared->cancelled->load()) {
        Outcome dropped{shared->closure_id, shared->attempt, shared->session,
                        ClosureOutput::Result("")};
        dropped.dropped = true;
        Complete(std::move(dropped));
        return;
      }
      Complete(Run(*shared));
    });
    if (!submitted) running_.erase(key);  // stopping: the dispatcher puts it back
  }
}

ClosureRunner::Outcome ClosureRunner::Run(const Job& job) {
  if (job.trace_received_ns == 0)
    return Outcome{job.closure_id, job.attempt, job.session, Execute(job)};
  const uint64_t started = TraceNowNanos();
  Outcome outcome{job.closure_id, job.attempt, job.session, Execute(job)};
  outcome.trace = {job.trace_received_ns, started, TraceNowNanos()};
  return outcome;
}

ClosureOutput ClosureRunner::Execute(const Job& job) {
  std::vector<std::string> components;
  components.reserve(job.resources.size());
  for (uint64_t id : job.resources) {
    Result<std::string> component = Component(id);
    if (!component.ok()) return ClosureOutput::UserError(component.status().message());
    components.push_back(std::move(component).value());
  }
  auto found = functions_.find(job.function);
  if (found == functions_.end()) {
    return ClosureOutput::UserError("function " + job.function +
                                    " is not registered on this worker");
  }
  Call call(job, components, options_.worker_address, executor_);
  return Invoke(job.function, found->second.function, call);
}

Result<std::string> ClosureRunner::Component(uint64_t resource_id) {
  return resources_.Get(resource_id, [this](uint64_t id, const ResourceCache::Spec& spec) {
    return BuildResource(id, spec);
  });
}

Result<std::string> ClosureRunner::BuildResource(uint64_t resource_id,
                                                 const ResourceCache::Spec& spec) {
  std::string prefix = "building per-worker resource " + std::to_string(resource_id) + " with " +
                       spec.function + " failed: ";
  auto found = functions_.find(spec.function);
  if (found == functions_.end()) {
    return FailedPreconditionError(prefix + "function " + spec.function +
                                   " is not registered on this worker");
  }
  Job job;
  job.function = spec.function;
  job.args = spec.args;
  std::vector<std::string> none;
  Call call(job, none, options_.worker_address, executor_);
  ClosureOutput output = Invoke(spec.function, found->second.function, call);
  if (!output.ok()) return FailedPreconditionError(prefix + output.data());
  board_.Update([](WorkerAgentStatus& s) { ++s.resources_built; });
  return std::move(output.mutable_data());
}

void ClosureRunner::Complete(Outcome outcome) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = completed_.empty();
    completed_.push_back(std::move(outcome));
  }
  // One post per batch: the loop takes everything completed so far at once.
  // A posted function never outlives the agent thread's objects, this one
  // included; once the agent stops, Post() refuses and the outcome is
  // dropped with the rest (the dispatcher puts its closure back).
  if (wake) loop_thread_.Post([this]() { TakeCompleted(); });
}

void ClosureRunner::TakeCompleted() {
  std::vector<Outcome> completed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    completed.swap(completed_);
  }
  for (auto& outcome : completed) Finish(std::move(outcome));
}

void ClosureRunner::OnCancelClosures(capnp::List<uint64_t>::Reader closure_ids) {
  uint64_t held = 0;
  for (uint64_t id : closure_ids) {
    // Every (attempt, session) of the closure held here.
    for (auto it = running_.lower_bound(std::make_tuple(id, uint32_t{0}, uint64_t{0}));
         it != running_.end() && std::get<0>(it->first) == id; ++it) {
      it->second->store(true);
      ++held;
    }
  }
  if (held > 0) executor_.WakeSleepers();
  board_.Update([held](WorkerAgentStatus& s) { s.closures_cancelled += held; });
}

void ClosureRunner::Finish(Outcome outcome) {
  running_.erase(std::make_tuple(outcome.closure_id, outcome.attempt, outcome.session));
  if (outcome.dropped) {
    board_.Update([](WorkerAgentStatus& s) { ++s.closures_dropped; });
    return;
  }
  ++unpublished_runs_;  // published once per flush: a status copy per closure costs too much
  unreported_.push_back(std::move(outcome));
  ScheduleFlush();
}

void ClosureRunner::ScheduleFlush() {
  if (flush_scheduled_) return;
  flush_scheduled_ = true;
  // Later in this loop pass, after every outcome ready now joined the batch.
  tasks_.add(kj::evalLater([this]() {
    flush_scheduled_ = false;
    Flush();
  }));
}

void ClosureRunner::Flush() {
  if (unpublished_runs_ > 0) {
    uint64_t runs = unpublished_runs_;
    unpublished_runs_ = 0;
    board_.Update([runs](WorkerAgentStatus& s) { s.closures_run += runs; });
  }
  if (reporting_ || unreported_.empty() || link_ == nullptr) return;
  uint64_t session = link_->session();
  std::vector<Outcome> batch;
  uint64_t dropped = 0;
  for (auto& outcome : unreported_) {
    if (outcome.session == session) {
      batch.push_back(std::move(outcome));
    } else {
      ++dropped;  // its connection ended: the dispatcher already put it back
    }
  }
  unreported_.clear();
  if (dropped > 0) {
    board_.Update([&](WorkerAgentStatus& s) { s.closure_reports_dropped += dropped; });
  }
  if (batch.empty()) return;
  if (!link_->registered()) {
    // Pushed before the heartbeat reply that tells us our worker id (or the
    // connection is going): wait for the registration, then look again.
    unreported_ = std::move(batch);
    if (!awaiting_registration_) {
      awaiting_registration_ = true;
      tasks_.add(link_->WhenRegistered().then([this]() {
        awaiting_registration_ = false;
        Flush();
      }));
    }
    return;
  }
  // What the dispatcher would refuse is not sent: a result over its limit
  // becomes the error it would make of it (sending it could even cross the
  // connection's message limit and cost the connection), and error texts are
  // cut as it would cut them. Then the call takes reports while their bytes
  // fit in the same limit (the first always goes); the rest wait for the
  // next call, which follows this one's reply.
  const uint64_t limit = link_->max_result_bytes();
  const uint64_t budget = limit > 0 ? std::min(limit, kMaxReportBatchBytes) : kMaxReportBatchBytes;
  uint64_t bytes = 0;
  size_t take = 0;
  for (Outcome& outcome : batch) {
    LimitOutcome(outcome, limit);
    const uint64_t size = outcome.output.data().size() + kReportOverheadBytes;
    if (take > 0 && (bytes + size > budget || take >= kMaxReportsPerCall)) break;
    bytes += size;
    ++take;
  }
  if (take < batch.size()) {
    unreported_.insert(unreported_.begin(), std::make_move_iterator(batch.begin() + take),
                       std::make_move_iterator(batch.end()));
    batch.erase(batch.begin() + static_cast<long>(take), batch.end());
    board_.Update([](WorkerAgentStatus& s) { ++s.closure_report_splits; });
  }
  auto request = link_->dispatcher().reportClosuresRequest();
  request.setWorkerId(link_->worker_id());
  auto reports = request.initReports(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    auto report = reports[i];
    const Outcome& outcome = batch[i];
    report.setClosureId(outcome.closure_id);
    report.setAttempt(outcome.attempt);
    const std::string& data = outcome.output.data();
    switch (outcome.output.kind()) {
      case ClosureOutput::Kind::kResult:
        report.setResult(kj::arrayPtr(reinterpret_cast<const kj::byte*>(data.data()), data.size()));
        break;
      case ClosureOutput::Kind::kUserError:
        report.setUserError(data);
        break;
      case ClosureOutput::Kind::kTransientError:
        report.setTransientError(data);
        break;
      case ClosureOutput::Kind::kUnavailable:
        report.setUnavailable(data);
        break;
    }
  }
  uint64_t count = batch.size();
  uint64_t sent_ns = 0;  // read once, and only for a traced closure
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::array<uint64_t, 3>& trace = batch[i].trace;
    if (trace[0] == 0) continue;
    if (sent_ns == 0) sent_ns = TraceNowNanos();
    auto stamps = reports[i].initTrace(kTraceWorkerStamps);
    for (unsigned s = 0; s < trace.size(); ++s) stamps.set(s, trace[s]);
    stamps.set(3, sent_ns);
  }
  reporting_ = true;
  tasks_.add(request.send()
                 .then(
                     [this, count](capnp::Response<rpc::Dispatcher::ReportClosuresResults> r) {
                       uint32_t ignored = r.getIgnored();
                       board_.Update([&](WorkerAgentStatus& s) {
                         ++s.closure_report_calls;
                         s.closure_reports_sent += count;
                         s.closure_reports_ignored += ignored;
                       });
                     },
                     [this, count](kj::Exception&& e) {
                       // Lost with the connection: the dispatcher puts those closures back.
                       Log(LogLevel::kDebug, "worker ", options_.worker_address.c_str(),
                           ": dropping ", count, " closure reports: ", e.getDescription());
                       board_.Update(
                           [&](WorkerAgentStatus& s) { s.closure_reports_dropped += count; });
                     })
                 .then([this]() {
                   reporting_ = false;
                   Flush();
                 }));
}

void ClosureRunner::taskFailed(kj::Exception&& exception) {
  Log(LogLevel::kWarning, "worker ", options_.worker_address.c_str(),
      ": closure reporting failed: ", exception.getDescription());
  reporting_ = false;
  awaiting_registration_ = false;
}

}  // namespace dispatch::clients
