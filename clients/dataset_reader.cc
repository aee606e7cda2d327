#include "clients/dataset_reader.h"

#include <kj/debug.h>

#include "common/log.h"
#include "common/rpc_status.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::clients {

// The loop thread's view of the reader's queue.
class DatasetReader::Sink final : public ElementSink {
 public:
  explicit Sink(DatasetReader& reader) : reader_(reader) {}

  void Opened(uint64_t job_id, uint64_t job_client_id) override {
    std::lock_guard<std::mutex> lock(reader_.mu_);
    reader_.opened_ = true;
    reader_.stats_.job_id = job_id;
    reader_.stats_.job_client_id = job_client_id;
    reader_.cv_.notify_all();
  }

  bool Push(std::vector<Element>&& elements) override {
    std::lock_guard<std::mutex> lock(reader_.mu_);
    for (Element& e : elements) {
      reader_.queued_bytes_ += e.data.size();
      reader_.queue_.push_back(kj::mv(e));
    }
    reader_.cv_.notify_all();
    const bool full = reader_.queue_.size() >= reader_.options_.max_buffered_elements ||
                      reader_.queued_bytes_ >= reader_.options_.max_buffered_bytes;
    if (full) reader_.room_wanted_ = true;
    return !full;
  }

  kj::Promise<void> WhenRoom() override {
    auto paf = kj::newPromiseAndFulfiller<void>();
    room_waiters_.add(kj::mv(paf.fulfiller));
    // Next() may have drained the queue before the waiter existed.
    OnWake();
    return kj::mv(paf.promise);
  }

  void End() override {
    std::lock_guard<std::mutex> lock(reader_.mu_);
    reader_.ended_ = true;
    reader_.cv_.notify_all();
  }

  void Fail(const Status& status) override {
    std::lock_guard<std::mutex> lock(reader_.mu_);
    if (reader_.error_.ok()) reader_.error_ = status;
    reader_.cv_.notify_all();
  }

  // Loop thread: room in the queue again?
  void OnWake() {
    bool room;
    {
      std::lock_guard<std::mutex> lock(reader_.mu_);
      room = !reader_.room_wanted_;
    }
    if (!room) return;
    auto waiters = kj::mv(room_waiters_);
    for (auto& w : waiters) w->fulfill();
  }

 private:
  DatasetReader& reader_;
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> room_waiters_;
};

// The reader thread's objects: the session and its run.
class DatasetReader::Loop final : public LoopThread::Body {
 public:
  Loop(uvkj::UvAsyncIo& io, const ReaderOptions& options, Sink& sink)
      : io_(io), session_(io.network(), io.timer(), options, sink) {
    run_ = session_.Run().eagerlyEvaluate(
        [&sink](kj::Exception&& e) { sink.Fail(StatusFromException(e)); });
  }

  // Stops reading and releases the job client; a dispatcher that does not
  // answer times the release out instead.
  kj::Promise<void> Release() {
    run_ = nullptr;
    return session_.Close()
        .exclusiveJoin(io_.timer().afterDelay(5 * kj::SECONDS))
        .then([]() {},
              [](kj::Exception&& e) {
                Log(LogLevel::kDebug,
                    "reader: releasing the job client failed: ", e.getDescription());
              });
  }

 private:
  uvkj::UvAsyncIo& io_;
  ReadSession session_;
  kj::Promise<void> run_ = nullptr;  // declared last: cancelled first
};

DatasetReader::DatasetReader(ReaderOptions options)
    : options_(std::move(options)), sink_(std::make_unique<Sink>(*this)) {}

Result<std::unique_ptr<DatasetReader>> DatasetReader::Open(ReaderOptions options,
                                                           std::chrono::milliseconds timeout) {
  DISPATCH_RETURN_IF_ERROR(ValidateReaderOptions(options));
  std::unique_ptr<DatasetReader> reader(new DatasetReader(std::move(options)));
  DatasetReader* r = reader.get();
  DISPATCH_RETURN_IF_ERROR(
      r->loop_thread_.Start([r](uvkj::UvAsyncIo& io) -> kj::Own<LoopThread::Body> {
        auto loop = kj::heap<Loop>(io, r->options_, *r->sink_);
        r->loop_ = loop.get();
        return loop;
      }));
  Status failed;
  {
    std::unique_lock<std::mutex> lock(reader->mu_);
    bool done = reader->cv_.wait_for(lock, timeout,
                                     [&] { return reader->opened_ || !reader->error_.ok(); });
    if (!reader->error_.ok()) {
      failed = reader->error_;
    } else if (!done) {
      failed = UnavailableError("the job was not open within " + std::to_string(timeout.count()) +
                                " ms (is the dispatcher at " + reader->options_.dispatcher_address +
                                "?)");
    }
  }
  if (!failed.ok()) {
    reader->Close();
    return failed;
  }
  return reader;
}

DatasetReader::~DatasetReader() { Close(); }

Result<bool> DatasetReader::Next(Element* element, std::chrono::milliseconds timeout) {
  Result<std::optional<bool>> next = NextWithin(element, timeout);
  if (!next.ok()) return next.status();
  if (!next->has_value()) {
    return UnavailableError("no element within " + std::to_string(timeout.count()) + " ms");
  }
  return **next;
}

Result<std::optional<bool>> DatasetReader::NextWithin(Element* element,
                                                      std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  bool ready = cv_.wait_for(lock, timeout, [this] {
    return !queue_.empty() || ended_ || !error_.ok() || close_requested_;
  });
  if (!queue_.empty()) {
    *element = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= element->data.size();
    ++stats_.elements;
    stats_.bytes += element->data.size();
    // Wake the loop once the queue is half empty, not at every element.
    if (room_wanted_ && queue_.size() <= options_.max_buffered_elements / 2 &&
        queued_bytes_ <= options_.max_buffered_bytes / 2) {
      room_wanted_ = false;
      lock.unlock();
      loop_thread_.Post([this]() { sink_->OnWake(); });
    }
    return std::optional<bool>(true);
  }
  if (!error_.ok()) return error_;
  if (ended_) return std::optional<bool>(false);
  if (close_requested_) return CancelledError("the reader is closed");
  (void)ready;
  return std::optional<bool>();
}

void DatasetReader::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    close_requested_ = true;
    cv_.notify_all();
  }
  // Unavailable at once when the thread is gone already (a second Close()).
  (void)loop_thread_.RunAndWait([this]() { return loop_->Release(); });
  loop_thread_.Stop();
}

ReaderStats DatasetReader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ReaderStats s = stats_;
  s.buffered = queue_.size();
  return s;
}

}  // namespace dispatch::clients
