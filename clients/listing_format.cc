#include "clients/listing_format.h"

#include <algorithm>
#include <vector>

#include "clients/task_description.h"

namespace dispatch::clients {
namespace {

// Columns padded to their widest cell, two spaces apart.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const {
    std::vector<size_t> widths(rows_[0].size(), 0);
    for (const auto& row : rows_) {
      for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
        widths[i] = std::max(widths[i], row[i].size());
      }
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
      }
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Str(kj::StringPtr s) { return s.size() == 0 ? "-" : std::string(s.cStr()); }
std::string Num(uint64_t v) { return std::to_string(v); }
std::string Int(int64_t v) { return std::to_string(v); }
std::string YesNo(bool b) { return b ? "yes" : "no"; }

std::string Tags(capnp::List<capnp::Text>::Reader tags) {
  std::string out;
  for (auto tag : tags) out += (out.empty() ? "" : ",") + std::string(tag.cStr());
  return out.empty() ? "-" : out;
}

Table TaskTableOf(capnp::List<rpc::TaskInfo>::Reader tasks) {
  Table table({"TASK", "JOB", "DATASET", "WORKER", "TRANSFER", "MODE", "ROUND", "SHARD", "FINISHED",
               "PENDING"});
  for (auto t : tasks) {
    std::string shard =
        t.getNumWorkers() == 0 ? "-" : Int(t.getWorkerIndex()) + "/" + Num(t.getNumWorkers());
    table.Add({Num(t.getTaskId()), Num(t.getJobId()), Num(t.getDatasetId()),
               Str(t.getWorkerAddress()), Str(t.getTransferAddress()),
               ProcessingModeName(t.getProcessingMode()), Int(t.getStartingRound()), shard,
               YesNo(t.getFinished()), YesNo(t.getPending())});
  }
  return table;
}

Table ClientTableOf(capnp::List<rpc::JobClientInfo>::Reader clients) {
  Table table({"CLIENT", "JOB", "LAST_HEARTBEAT_US"});
  for (auto c : clients) {
    table.Add({Num(c.getJobClientId()), Num(c.getJobId()), Int(c.getLastHeartbeatMicros())});
  }
  return table;
}

}  // namespace

std::string FormatWorkers(capnp::List<rpc::WorkerInfo>::Reader workers) {
  Table table({"WORKER", "ADDRESS", "TRANSFER", "TAGS", "CONNECTED", "TASKS", "LAST_HEARTBEAT_US",
               "DATASET_KINDS"});
  for (auto w : workers) {
    // "-": announced no kinds, so it serves every job.
    table.Add({Num(w.getWorkerId()), Str(w.getAddress()), Str(w.getTransferAddress()),
               Tags(w.getTags()), YesNo(w.getConnected()), Num(w.getNumTasks()),
               Int(w.getLastHeartbeatMicros()), Tags(w.getDatasetKinds())});
  }
  return table.Render();
}

std::string FormatDatasets(capnp::List<rpc::DatasetInfo>::Reader datasets) {
  Table table({"DATASET", "FINGERPRINT", "ELEMENT_SPEC", "SPLITS", "KIND"});
  for (auto d : datasets) {
    table.Add({Num(d.getDatasetId()), Num(d.getFingerprint()), YesNo(d.getHasElementSpec()),
               Num(d.getNumSplits()), d.getKind().size() > 0 ? Str(d.getKind()) : "-"});
  }
  return table.Render();
}

std::string FormatJobs(capnp::List<rpc::JobInfo>::Reader jobs) {
  Table table({"JOB", "DATASET", "NAME", "INDEX", "MODE", "CONSUMERS", "TARGET", "CLIENTS", "TASKS",
               "FINISHED", "GC"});
  for (auto j : jobs) {
    table.Add({Num(j.getJobId()), Num(j.getDatasetId()), Str(j.getJobName()),
               Int(j.getJobNameIndex()), ProcessingModeName(j.getProcessingMode()),
               Num(j.getNumConsumers()), TargetWorkersName(j.getTargetWorkers()),
               Num(j.getNumClients()), Num(j.getNumTasks()), YesNo(j.getFinished()),
               YesNo(j.getGarbageCollected())});
  }
  return table.Render();
}

std::string FormatTasks(capnp::List<rpc::TaskInfo>::Reader tasks) {
  return TaskTableOf(tasks).Render();
}

std::string FormatClients(capnp::List<rpc::JobClientInfo>::Reader clients) {
  return ClientTableOf(clients).Render();
}

std::string FormatJob(rpc::JobInfo::Reader job, capnp::List<rpc::TaskInfo>::Reader tasks,
                      capnp::List<rpc::JobClientInfo>::Reader clients) {
  Table head({"job", Num(job.getJobId())});
  head.Add({"dataset", Num(job.getDatasetId())});
  head.Add({"name", Str(job.getJobName())});
  head.Add({"name index", Int(job.getJobNameIndex())});
  head.Add({"processing mode", ProcessingModeName(job.getProcessingMode())});
  head.Add({"consumers", Num(job.getNumConsumers())});
  head.Add({"target workers", TargetWorkersName(job.getTargetWorkers())});
  head.Add({"clients", Num(job.getNumClients())});
  head.Add({"finished", YesNo(job.getFinished())});
  head.Add({"garbage collected", YesNo(job.getGarbageCollected())});
  return head.Render() + "\ntasks (" + Num(tasks.size()) + ")\n" + TaskTableOf(tasks).Render() +
         "\nclients (" + Num(clients.size()) + ")\n" + ClientTableOf(clients).Render();
}

}  // namespace dispatch::clients
