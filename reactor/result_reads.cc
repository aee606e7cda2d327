#include "reactor/result_reads.h"

#include "common/rpc_status.h"

namespace dispatch::reactor {

// Runs on a pool thread: everything it touches is its own.
struct ResultReads::Job final : public uvkj::PoolJob {
  void Run() override {
    if (reader == nullptr) {
      auto opened = storage::ResultReader::Open(db_path, result_dir);
      if (!opened.ok()) {
        done->statuses.assign(items.size(), opened.status());
        return;
      }
      reader = std::move(opened).value();
    }
    size_t total = 0;
    for (const storage::ResultLocation& item : items) {
      done->offsets.push_back(total);
      total += item.size;
    }
    // Zero-filled here, so its pages are faulted in on this thread too.
    done->bytes.assign(total, '\0');
    for (size_t i = 0; i < items.size(); ++i) {
      done->statuses.push_back(
          cancelled() ? UnavailableError("the read was given up")
                      : reader->Read(items[i], done->bytes.data() + done->offsets[i]));
    }
  }

  std::string db_path;
  std::string result_dir;
  std::unique_ptr<storage::ResultReader> reader;
  std::vector<storage::ResultLocation> items;
  std::unique_ptr<Done> done = std::make_unique<Done>();
};

ResultReads::ResultReads(uv_loop_t* loop, std::string db_path, std::string result_dir,
                         std::function<void()> on_idle)
    : loop_(loop),
      db_path_(std::move(db_path)),
      result_dir_(std::move(result_dir)),
      on_idle_(std::move(on_idle)) {}

ResultReads::~ResultReads() { Stop(); }

void ResultReads::Stop() {
  stopped_ = true;
  for (Waiting& waiting : waiting_) {
    waiting.fulfiller->reject(ExceptionFromStatus(UnavailableError("the dispatcher is shutting down")));
  }
  waiting_.clear();
}

kj::Promise<std::unique_ptr<ResultReads::Done>> ResultReads::Read(
    std::vector<storage::ResultLocation> items) {
  if (stopped_) return ExceptionFromStatus(UnavailableError("the dispatcher is shutting down"));
  auto paf = kj::newPromiseAndFulfiller<std::unique_ptr<Done>>();
  waiting_.push_back(Waiting{std::move(items), kj::mv(paf.fulfiller)});
  StartNext();
  return kj::mv(paf.promise);
}

void ResultReads::StartNext() {
  if (work_.in_flight() || waiting_.empty() || stopped_) return;
  auto job = std::make_unique<Job>();
  job->db_path = db_path_;
  job->result_dir = result_dir_;
  job->reader = std::move(reader_);
  job->items = std::move(waiting_.front().items);
  kj::Own<kj::PromiseFulfiller<std::unique_ptr<Done>>> fulfiller = kj::mv(waiting_.front().fulfiller);
  waiting_.pop_front();
  const int rc = work_.Start(job, [this](std::unique_ptr<Job> done) { OnDone(std::move(done)); });
  if (rc < 0) {
    reader_ = std::move(job->reader);
    fulfiller->reject(ExceptionFromStatus(
        UnavailableError(std::string("cannot queue a result read on the thread pool: ") +
                         uv_strerror(rc))));
    StartNext();
    return;
  }
  running_ = kj::mv(fulfiller);
}

void ResultReads::OnDone(std::unique_ptr<Job> job) {
  ++reads_run_;
  reader_ = std::move(job->reader);
  kj::Own<kj::PromiseFulfiller<std::unique_ptr<Done>>> fulfiller = kj::mv(running_);
  // A caller that went away dropped its promise: fulfilling it is a no-op.
  fulfiller->fulfill(std::move(job->done));
  StartNext();
  if (!work_.in_flight() && on_idle_) on_idle_();
}

}  // namespace dispatch::reactor
