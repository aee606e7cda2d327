// DispatcherService: workers. workerHeartbeat registers a worker, replaces
// another process's registration at its address, creates the tasks a worker
// lacks and answers the tasks to start and to delete, all decided by
// state::PlanWorkerHeartbeat (state/worker_planner.h); here the request is
// decoded and checked against the wire's limits, the old registration
// removed (its closures first), the plan carried, the worker's capability
// and closure slots recorded, and the answer encoded. workerUpdate finishes
// the tasks a worker reports completed (state::PlanWorkerUpdate).

#include <string>
#include <vector>

#include "reactor/data_service.h"
#include "reactor/service_util.h"
#include "reactor/services.h"
#include "reactor/task_info.h"
#include "state/worker_planner.h"

namespace dispatch::reactor {
namespace {

// Largest heartbeat reply we build (new tasks beyond it wait for the next).
constexpr uint64_t kMaxHeartbeatReplyBytes = 16u << 20;

// Words a Text of `text` takes in a message (with its NUL).
uint64_t TextWords(const std::string& text) { return (text.size() + 1 + 7) / 8; }

}  // namespace

kj::Promise<void> DispatcherService::workerHeartbeat(WorkerHeartbeatContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  auto request = context.getParams().getRequest();
  const std::string address(View(request.getAddress()));
  if (address.empty())
    ThrowStatus(InvalidArgumentError("a worker heartbeat needs a worker address"));
  // Each list is read once: reading one counts its size against the
  // message's traversal limit.
  state::WorkerHeartbeatRequest decoded;
  decoded.transfer_address = std::string(View(request.getTransferAddress()));
  decoded.tags = request.getTags();
  decoded.dataset_kinds = request.getDatasetKinds();
  ThrowIfError(data.CheckName("worker address", address));
  ThrowIfError(data.CheckName("transfer address", decoded.transfer_address));
  for (auto tag : decoded.tags) ThrowIfError(data.CheckName("worker tag", View(tag)));
  const auto functions = request.getFunctions();
  for (auto function : functions)
    ThrowIfError(data.CheckName("closure function name", View(function)));
  for (auto kind : decoded.dataset_kinds) {
    ThrowIfError(data.CheckName("dataset kind", View(kind)));
    if (kind.size() == 0) ThrowStatus(InvalidArgumentError("a dataset kind must not be empty"));
  }
  ThrowIfError(data.CheckWorkerAddress(address));

  decoded.address = address;
  decoded.incarnation = request.getWorkerIncarnation();
  const auto current = request.getCurrentTasks();
  decoded.current_tasks.reserve(current.size());
  for (uint64_t id : current) decoded.current_tasks.push_back(id);
  decoded.connection = connection_;
  state::WorkerHeartbeatPlan plan =
      state::PlanWorkerHeartbeat(state, data.soft(), decoded, data.NowMs(), data.Stamp());
  // Sized first: a registration the journal cannot hold (tags) is refused
  // before the old registration is removed.
  if (plan.registers) ThrowIfError(data.durable().pipeline().CheckFits(plan.updates[0]));
  if (plan.replaces_worker_id != 0) {
    // Another process at this address: the old one is gone.
    ThrowIfError(data.workers().Remove(address, "a new worker process took its address"));
    plan = state::PlanWorkerHeartbeat(state, data.soft(), decoded, data.NowMs(), data.Stamp());
  }
  ThrowIfError(data.Carry(plan.updates));
  const bool attached = data.mutable_soft().Apply(plan.soft);
  data.workers().Heartbeat(address, attached, request.hasControl(), request.getControl());
  const state::Worker& worker = *state.FindWorker(plan.worker_id);
  // Closures are pushed (runClosures): a worker that has handed us no
  // WorkerControl on this connection is given none, whatever slots it
  // announces, rather than have each push fail and burn an attempt.
  const uint32_t slots =
      data.workers().ControlOf(address) != nullptr ? request.getMaxClosures() : 0;
  data.closures().OnWorkerHeartbeat(worker, slots, functions, plan.registers || plan.attaches);

  // Size the reply's message: without a hint Cap'n Proto zero-allocates an
  // 8 KiB first segment for every reply, most of a known heartbeat's cost.
  // A hint that falls short costs a second segment, so count every word: a
  // struct list has a tag word even when it is empty.
  uint64_t words = capnp::sizeInWords<rpc::Dispatcher::WorkerHeartbeatResults>() +
                   capnp::sizeInWords<rpc::WorkerHeartbeatResponse>() + 1 +
                   plan.tasks_to_delete.size();
  // At most kMaxHeartbeatReplyBytes of new tasks (at least one): a worker
  // joining thousands of jobs with long addresses gets the rest with its next
  // heartbeats (a task it does not list as current is new again), never a
  // reply past its message limit.
  std::vector<const state::Task*> fresh;
  fresh.reserve(plan.tasks_to_start.size());
  for (uint64_t id : plan.tasks_to_start) {
    const state::Task* task = state.FindTask(id);
    const uint64_t task_words = capnp::sizeInWords<rpc::TaskInfo>() +
                                TextWords(task->worker_address) + TextWords(task->transfer_address);
    if (!fresh.empty() && (words + task_words) * 8 > kMaxHeartbeatReplyBytes) break;
    words += task_words;
    fresh.push_back(task);
  }
  auto response = context.getResults(capnp::MessageSize{words, 0}).initResponse();
  response.setWorkerId(plan.worker_id);
  response.setIncarnation(data.incarnation());
  response.setHeartbeatIntervalMillis(
      static_cast<uint32_t>(HeartbeatIntervalMs(data.options())));
  response.setMaxResultBytes(data.options().closures.max_result_bytes);
  auto new_tasks = response.initNewTasks(static_cast<unsigned>(fresh.size()));
  for (size_t i = 0; i < fresh.size(); ++i)
    FillTaskInfo(state, data.options(), *fresh[i], new_tasks[i]);
  const std::vector<uint64_t>& to_delete = plan.tasks_to_delete;
  auto deletes = response.initTasksToDelete(static_cast<unsigned>(to_delete.size()));
  for (size_t i = 0; i < to_delete.size(); ++i) deletes.set(i, to_delete[i]);
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::workerUpdate(WorkerUpdateContext context) {
  DataService& data = this->data();
  auto params = context.getParams();
  const auto entries = params.getUpdates();  // read once (the traversal limit)
  std::vector<state::TaskProgress> progress;
  progress.reserve(entries.size());
  for (auto entry : entries) progress.push_back({entry.getTaskId(), entry.getCompleted()});
  state::UpdateList updates =
      ValueOrThrow(state::PlanWorkerUpdate(data.state(), progress, data.Stamp()));
  ThrowIfError(data.Carry(updates));
  context.getResults().setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

}  // namespace dispatch::reactor
