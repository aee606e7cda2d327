#include "state/task_routing.h"

#include <set>

namespace dispatch::state {

std::string DatasetKindOfDefinition(std::string_view definition, size_t max_bytes) {
  auto is_blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  size_t begin = 0;
  while (begin < definition.size() && is_blank(definition[begin])) ++begin;
  size_t end = begin;
  while (end < definition.size() && !is_blank(definition[end]) && definition[end] != '\n') {
    const auto byte = static_cast<unsigned char>(definition[end]);
    if (byte < 0x20 || byte == 0x7f) return "";
    if (end - begin >= max_bytes) return "";
    ++end;
  }
  return std::string(definition.substr(begin, end - begin));
}

bool CanProduce(const Worker& worker, const Dataset& dataset) {
  return dataset.kind.empty() || worker.dataset_kinds.empty() ||
         worker.dataset_kinds.contains(dataset.kind);
}

namespace {

const Dataset* DatasetOfJob(const DispatcherState& state, uint64_t job_id) {
  const Job* job = state.FindJob(job_id);
  return job == nullptr ? nullptr : state.FindDataset(job->dataset_id);
}

}  // namespace

bool CanServeJob(const DispatcherState& state, uint64_t job_id, std::string_view address) {
  const Worker* worker = state.FindWorkerByAddress(address);
  const Dataset* dataset = DatasetOfJob(state, job_id);
  return worker != nullptr && dataset != nullptr && CanProduce(*worker, *dataset);
}

std::vector<std::string> WorkersNeedingTask(const DispatcherState& state, uint64_t job_id) {
  std::vector<std::string> out;
  const Job* job = state.FindJob(job_id);
  const Dataset* dataset = DatasetOfJob(state, job_id);
  if (job == nullptr || job->finished || dataset == nullptr) return out;
  for (const Worker* worker : state.ListWorkers()) {
    if (!CanProduce(*worker, *dataset)) continue;
    if (state.FindTaskForJobAndWorker(job_id, worker->address) != nullptr) continue;
    out.push_back(worker->address);
  }
  return out;
}

std::vector<std::string> WorkersForNewJob(const DispatcherState& state, const Dataset& dataset) {
  std::vector<std::string> out;
  for (const Worker* worker : state.ListWorkers()) {
    if (CanProduce(*worker, dataset)) out.push_back(worker->address);
  }
  return out;
}

std::vector<uint64_t> JobsNeedingTask(const DispatcherState& state, std::string_view address) {
  const Worker* worker = state.FindWorkerByAddress(address);
  if (worker == nullptr) return {};
  return JobsNeedingTask(state, *worker);
}

std::vector<uint64_t> JobsNeedingTask(const DispatcherState& state, const Worker& worker) {
  std::vector<uint64_t> out;
  for (const Job* job : state.ListUnfinishedJobs()) {
    const Dataset* dataset = state.FindDataset(job->dataset_id);
    if (dataset == nullptr || !CanProduce(worker, *dataset)) continue;
    if (state.FindTaskForJobAndWorker(job->id, worker.address) != nullptr) continue;
    out.push_back(job->id);
  }
  return out;
}

uint64_t JobsWithoutWorker(const DispatcherState& state) {
  // The kinds some worker produces; one worker announcing none serves all.
  std::set<std::string_view> served;
  bool serves_all = false;
  for (const Worker* worker : state.ListWorkers()) {
    if (worker->dataset_kinds.empty()) {
      serves_all = true;
      break;
    }
    served.insert(worker->dataset_kinds.begin(), worker->dataset_kinds.end());
  }
  const bool any_worker = !state.ListWorkers(1).empty();
  uint64_t count = 0;
  for (const Job* job : state.ListUnfinishedJobs()) {
    const Dataset* dataset = state.FindDataset(job->dataset_id);
    if (dataset == nullptr) continue;
    const bool producible =
        any_worker && (serves_all || dataset->kind.empty() || served.contains(dataset->kind));
    if (!producible) ++count;
  }
  return count;
}

}  // namespace dispatch::state
