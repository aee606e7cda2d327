// ClosureRunner: the worker side of closure coordination, on the agent
// thread. WorkerControl.runClosures hands it assignments; each runs once per
// (closure, attempt) on an executor thread (or inline, for functions
// registered so), after this process built the per-worker resources it
// lists. Outcomes come back to the loop and go to the dispatcher in batches:
// everything that completed before the loop got to them travels in one
// reportClosures call, one call in flight at a time, split so that no call
// carries more result bytes than the dispatcher accepts; a result over its
// limit is reported as the error naming the limit instead. An outcome of a closure
// received on an earlier connection is dropped, not reported: the dispatcher
// put that closure back in its queue when the connection ended.
#pragma once

#include <kj/async.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "clients/agent_link.h"
#include "clients/agent_status.h"
#include "clients/closure_executor.h"
#include "clients/closure_function.h"
#include "clients/resource_cache.h"
#include "clients/worker_agent_options.h"
#include "clients/loop_thread.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

class ClosureRunner final : public kj::TaskSet::ErrorHandler {
 public:
  // Outcomes come back to the agent thread through `loop_thread`'s Post().
  ClosureRunner(LoopThread& loop_thread, const WorkerAgentOptions& options,
                const FunctionRegistry& functions, StatusBoard& board);
  // Stops the executor (waking sleeping functions) and drops what is unreported.
  ~ClosureRunner() noexcept(false);
  ClosureRunner(const ClosureRunner&) = delete;
  ClosureRunner& operator=(const ClosureRunner&) = delete;

  // REQUIRES: called once, before any closure arrives.
  void set_link(AgentLink* link) { link_ = link; }

  // Starts the assigned closures (a (closure, attempt) already held is left
  // alone) after recording the resource specs. REQUIRES: agent thread.
  void OnRunClosures(capnp::List<rpc::ClosureAssignment>::Reader closures,
                     capnp::List<rpc::ResourceSpec>::Reader resources);
  // The dispatcher cancelled these closures (or they timed out): one not
  // started yet is dropped, unreported; a running one's ClosureCall says
  // cancelled() and its SleepFor() returns early. Its outcome, if it makes
  // one, is reported as usual (the dispatcher ignores it). Ids not held here
  // are ignored. REQUIRES: agent thread.
  void OnCancelClosures(capnp::List<uint64_t>::Reader closure_ids);

 private:
  struct Job {
    uint64_t closure_id = 0;
    uint32_t attempt = 0;
    uint64_t session = 0;  // the link session it arrived on
    std::string function;
    std::string args;
    std::vector<uint64_t> resources;
    // Set by OnCancelClosures; read by the executor thread running it.
    std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
    std::vector<std::string> inputs;  // the input closures' results
    // ClosureAssignment.trace: when the push arrived (0: not traced).
    uint64_t trace_received_ns = 0;
  };
  struct Outcome {
    uint64_t closure_id;
    uint32_t attempt;
    uint64_t session;
    ClosureOutput output;
    bool dropped = false;  // cancelled before it started: nothing to report
    // A traced run's stamps (received, started, ended); all 0 when untraced.
    std::array<uint64_t, 3> trace{};
  };
  class Call;

  // Any thread: runs the function and returns what it produced.
  ClosureOutput Execute(const Job& job);
  // Execute() as an outcome, with the run's stamps when the job is traced.
  Outcome Run(const Job& job);
  // This process's component of a resource, built now if it has none.
  Result<std::string> Component(uint64_t resource_id);
  Result<std::string> BuildResource(uint64_t resource_id, const ResourceCache::Spec& spec);
  // Executor threads: hands an outcome to the loop.
  void Complete(Outcome outcome);
  // Agent thread.
  void TakeCompleted();
  void Finish(Outcome outcome);
  void ScheduleFlush();
  void Flush();
  // Turns a result over `max_result_bytes` (0: no limit known) into the user
  // error the dispatcher would make of it, and cuts long error texts.
  void LimitOutcome(Outcome& outcome, uint64_t max_result_bytes);

  // One reportClosures call carries at most this many reports, and result
  // and error bytes up to the dispatcher's max result bytes (when it said
  // one) and kMaxReportBatchBytes, counting each report as this much more;
  // the first report always goes, whatever its size.
  static constexpr size_t kMaxReportsPerCall = 8192;
  static constexpr uint64_t kReportOverheadBytes = 64;
  // Reports of several results are batched up to 15 MiB, not up to the
  // result limit (32 MiB): the dispatcher reads each message into one array
  // of its size, and past 16 MiB (its M_MMAP_THRESHOLD) that array is mapped,
  // zeroed by the kernel and unmapped for every message, on its loop thread.
  // With 4 MiB results batched seven to a call that zeroing was about 30% of
  // the loop's time; batched three to a call it left the profile
  // (`dispatch-bench results --bytes=4194304`, perf on the loop thread).
  static constexpr uint64_t kMaxReportBatchBytes = 15ull << 20;
  void taskFailed(kj::Exception&& exception) override;

  LoopThread& loop_thread_;
  const WorkerAgentOptions& options_;
  const FunctionRegistry& functions_;
  StatusBoard& board_;
  AgentLink* link_ = nullptr;
  ResourceCache resources_;
  ClosureExecutor executor_;

  // Agent thread only.
  // (closure, attempt, session) -> its cancel flag.
  std::map<std::tuple<uint64_t, uint32_t, uint64_t>, std::shared_ptr<std::atomic<bool>>> running_;
  std::vector<Outcome> unreported_;
  bool reporting_ = false;  // a reportClosures call is in flight
  bool flush_scheduled_ = false;
  bool awaiting_registration_ = false;
  uint64_t unpublished_runs_ = 0;
  kj::TaskSet tasks_;

  std::mutex mu_;  // guards completed_ (executor threads meet the loop here)
  std::vector<Outcome> completed_;
};

}  // namespace dispatch::clients
