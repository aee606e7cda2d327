// DispatcherService: workers. The first heartbeat of an address registers the
// worker (journaled, with the dataset kinds it announces) and creates its
// tasks for every unfinished job whose dataset it can produce; every
// heartbeat refreshes its liveness and its WorkerControl capability and
// answers the tasks it should start and delete. A heartbeat from a new
// process at a registered address (another worker incarnation) replaces the
// old registration. workerUpdate records finished tasks.

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "reactor/data_service.h"
#include "reactor/service_util.h"
#include "reactor/services.h"
#include "state/task_routing.h"
#include "reactor/task_info.h"

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
  ThrowIfError(data.CheckName("worker address", address));
  ThrowIfError(data.CheckName("transfer address", View(request.getTransferAddress())));
  for (auto tag : request.getTags()) ThrowIfError(data.CheckName("worker tag", View(tag)));
  const auto functions = request.getFunctions();
  for (auto function : functions)
    ThrowIfError(data.CheckName("closure function name", View(function)));
  for (auto kind : request.getDatasetKinds()) {
    ThrowIfError(data.CheckName("dataset kind", View(kind)));
    if (kind.size() == 0) ThrowStatus(InvalidArgumentError("a dataset kind must not be empty"));
  }
  ThrowIfError(data.CheckWorkerAddress(address));
  const uint64_t incarnation = request.getWorkerIncarnation();

  const state::Worker* worker = state.FindWorkerByAddress(address);
  const bool replaced = worker != nullptr && incarnation != 0 && worker->incarnation != incarnation;
  bool registered = false;
  if (worker == nullptr || replaced) {
    // Built and sized first: a registration the journal cannot hold (tags)
    // is refused before the old registration is removed.
    const uint64_t worker_id = state.NextWorkerId();
    capnp::MallocMessageBuilder message;
    auto update = message.initRoot<journal::Update>();
    auto reg = update.initRegisterWorker();
    reg.setWorkerId(worker_id);
    reg.setAddress(address);
    reg.setTransferAddress(request.getTransferAddress());
    reg.setTags(request.getTags());
    reg.setIncarnation(incarnation);
    // Sorted and unique, as the state keeps them (the journal says so too).
    std::set<std::string> kinds;
    for (auto kind : request.getDatasetKinds()) kinds.emplace(View(kind));
    auto kind_list = reg.initDatasetKinds(static_cast<unsigned>(kinds.size()));
    unsigned k = 0;
    for (const std::string& kind : kinds) kind_list.set(k++, kind);
    ThrowIfError(data.durable().CheckFits(update.asReader()));
    if (replaced) {
      // Another process at this address: the old one is gone.
      ThrowIfError(data.workers().Remove(address, "a new worker process took its address"));
    }
    update.setTimeMicros(data.durable().NowMicros());
    ThrowIfError(data.durable().Submit(update.asReader()));
    worker = state.FindWorker(worker_id);
    registered = true;
  }
  const bool attached =
      data.workers().Heartbeat(*worker, connection_, request.hasControl(), request.getControl());
  if (registered || attached) {
    // Tasks for every unfinished job it lacks (pending for round robin).
    ValueOrThrow(data.CreateMissingTasks(address));
  }
  // Closures are pushed (runClosures): a worker that has handed us no
  // WorkerControl on this connection is given none, whatever slots it
  // announces, rather than have each push fail and burn an attempt.
  const uint32_t slots =
      data.workers().ControlOf(address) != nullptr ? request.getMaxClosures() : 0;
  data.closures().OnWorkerHeartbeat(*worker, slots, functions, registered || attached);

  // What to start and what to delete, with sorted vectors rather than sets:
  // a worker runs a handful of tasks and this runs on every heartbeat.
  std::vector<uint64_t> current;
  current.reserve(request.getCurrentTasks().size());
  for (uint64_t id : request.getCurrentTasks()) current.push_back(id);
  std::sort(current.begin(), current.end());
  current.erase(std::unique(current.begin(), current.end()), current.end());
  const auto assigned = state.TasksForWorker(address);
  std::vector<uint64_t> assigned_ids;
  assigned_ids.reserve(assigned.size());
  std::vector<const state::Task*> fresh;
  for (const state::Task* task : assigned) {
    assigned_ids.push_back(task->id);
    if (!std::binary_search(current.begin(), current.end(), task->id)) fresh.push_back(task);
  }
  std::sort(assigned_ids.begin(), assigned_ids.end());
  std::vector<uint64_t> to_delete;
  for (uint64_t id : current) {
    if (!std::binary_search(assigned_ids.begin(), assigned_ids.end(), id)) to_delete.push_back(id);
  }

  // Size the reply's message: without a hint Cap'n Proto zero-allocates an
  // 8 KiB first segment for every reply, most of a known heartbeat's cost.
  // A hint that falls short costs a second segment, so count every word: a
  // struct list has a tag word even when it is empty.
  uint64_t words = capnp::sizeInWords<rpc::Dispatcher::WorkerHeartbeatResults>() +
                   capnp::sizeInWords<rpc::WorkerHeartbeatResponse>() + 1 + to_delete.size();
  // At most kMaxHeartbeatReplyBytes of new tasks (at least one): a worker
  // joining thousands of jobs with long addresses gets the rest with its next
  // heartbeats (a task it does not list as current is new again), never a
  // reply past its message limit.
  size_t keep = 0;
  for (const state::Task* task : fresh) {
    const uint64_t task_words = capnp::sizeInWords<rpc::TaskInfo>() +
                                TextWords(task->worker_address) + TextWords(task->transfer_address);
    if (keep > 0 && (words + task_words) * 8 > kMaxHeartbeatReplyBytes) break;
    words += task_words;
    ++keep;
  }
  fresh.resize(keep);
  auto response = context.getResults(capnp::MessageSize{words, 0}).initResponse();
  response.setWorkerId(worker->id);
  response.setIncarnation(data.incarnation());
  response.setHeartbeatIntervalMillis(
      static_cast<uint32_t>(HeartbeatIntervalMs(data.options())));
  response.setMaxResultBytes(data.options().closures.max_result_bytes);
  auto new_tasks = response.initNewTasks(static_cast<unsigned>(fresh.size()));
  for (size_t i = 0; i < fresh.size(); ++i)
    FillTaskInfo(state, data.options(), *fresh[i], new_tasks[i]);
  auto deletes = response.initTasksToDelete(static_cast<unsigned>(to_delete.size()));
  for (size_t i = 0; i < to_delete.size(); ++i) deletes.set(i, to_delete[i]);
  return data.durable().Barrier();
}

kj::Promise<void> DispatcherService::workerUpdate(WorkerUpdateContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  auto params = context.getParams();
  // Validate every entry before changing anything.
  std::vector<uint64_t> to_finish;
  for (auto progress : params.getUpdates()) {
    const state::Task* task = ValueOrThrow(state.GetTask(progress.getTaskId()));
    // A repeated report changes nothing; a pending round-robin task has not
    // started for its consumers, so it cannot have finished for them.
    if (!progress.getCompleted() || task->finished || task->pending) continue;
    to_finish.push_back(task->id);
  }
  for (uint64_t task_id : to_finish) {
    if (state.FindTask(task_id)->finished) continue;  // listed twice
    ThrowIfError(data.Submit([task_id](journal::Update::Builder update) {
      update.initFinishTask().setTaskId(task_id);
    }));
  }
  context.getResults().setIncarnation(data.incarnation());
  return data.durable().Barrier();
}

}  // namespace dispatch::reactor
