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

  bool Push(ElementBatch&& batch) override {
    std::vector<ElementBatch> spent;
    bool full;
    {
      std::lock_guard<std::mutex> lock(reader_.mu_);
      spent = TakeSpent();
      const uint64_t n = batch.count;
      reader_.held_elements_ += n;
      reader_.held_bytes_ += batch.bytes;
      reader_.queued_elements_ += n;
      reader_.queued_bytes_ += batch.bytes;
      reader_.queue_.push_back(kj::mv(batch));
      reader_.cv_.notify_all();
      full = reader_.held_elements_ >= reader_.options_.max_buffered_elements ||
             reader_.held_bytes_ >= reader_.options_.max_buffered_bytes;
      if (full) reader_.room_wanted_ = true;
    }
    return !full;  // `spent` is destroyed here, on the loop thread, unlocked
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

  // Loop thread: frees the batches Next() has finished; room in the queue again?
  void OnWake() {
    std::vector<ElementBatch> spent;
    bool room;
    {
      std::lock_guard<std::mutex> lock(reader_.mu_);
      spent = TakeSpent();
      room = !reader_.room_wanted_;
    }
    spent.clear();
    if (!room) return;
    auto waiters = kj::mv(room_waiters_);
    for (auto& w : waiters) w->fulfill();
  }

  // REQUIRES: reader_.mu_ held. The spent batches, no longer counted as held.
  std::vector<ElementBatch> TakeSpent() {
    std::vector<ElementBatch> spent = kj::mv(reader_.spent_);
    reader_.spent_.clear();
    for (const ElementBatch& b : spent) {
      reader_.held_elements_ -= b.count;
      reader_.held_bytes_ -= b.bytes;
    }
    return spent;
  }

 private:
  DatasetReader& reader_;
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> room_waiters_;
};

// The reader thread's objects: the session and its run.
class DatasetReader::Loop final : public LoopThread::Body {
 public:
  Loop(uvkj::UvAsyncIo& io, DatasetReader& reader, Sink& sink)
      : io_(io), reader_(reader), session_(io.network(), io.timer(), reader.options_, sink) {
    run_ = session_.Run().eagerlyEvaluate(
        [&sink](kj::Exception&& e) { sink.Fail(StatusFromException(e)); });
  }

  // Stops reading and releases the job client; a dispatcher that does not
  // answer times the release out instead.
  kj::Promise<void> Release() {
    run_ = nullptr;
    reader_.DropBatches();  // replies die on this thread
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
  DatasetReader& reader_;
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
        auto loop = kj::heap<Loop>(io, *r, *r->sink_);
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
  if (reading_next_ == reading_.count) {
    // The batch is read: retire it, then wait for the next one.
    std::unique_lock<std::mutex> lock(mu_);
    if (RetireBatch()) {
      lock.unlock();
      loop_thread_.Post([this]() { sink_->OnWake(); });
      lock.lock();
    }
    bool ready = cv_.wait_for(lock, timeout, [this] {
      return !queue_.empty() || ended_ || !error_.ok() || close_requested_;
    });
    if (queue_.empty()) {
      if (!error_.ok()) return error_;
      if (ended_) return std::optional<bool>(false);
      if (close_requested_) return CancelledError("the reader is closed");
      (void)ready;
      return std::optional<bool>();
    }
    reading_ = kj::mv(queue_.front());
    queue_.pop_front();
    queued_elements_ -= reading_.count;
    queued_bytes_ -= reading_.bytes;
  }
  // The batch lives until the loop thread frees it, after RetireBatch():
  // copied without the lock.
  const size_t i = reading_next_++;
  if (reading_.owned.empty()) {
    const kj::ArrayPtr<const kj::byte> bytes = reading_.elements[i];
    element->data.assign(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  } else {
    // The caller's old buffer goes back in the batch: freed on the loop
    // thread, with the batch.
    element->data.swap(reading_.owned[i]);
  }
  element->task_id = reading_.task_id;
  element->round = reading_.round;
  const uint64_t size = element->data.size();
  reading_left_.store(reading_.count - reading_next_, std::memory_order_relaxed);
  returned_elements_.store(returned_elements_.load(std::memory_order_relaxed) + 1,
                           std::memory_order_relaxed);
  returned_bytes_.store(returned_bytes_.load(std::memory_order_relaxed) + size,
                        std::memory_order_relaxed);
  return std::optional<bool>(true);
}

bool DatasetReader::RetireBatch() {
  if (reading_.count > 0) spent_.push_back(kj::mv(reading_));
  reading_ = ElementBatch();
  reading_next_ = 0;
  // Wake the loop (which also frees the spent batches) once what is left
  // to read is half the limit, not at every batch.
  if (room_wanted_ && queued_elements_ <= options_.max_buffered_elements / 2 &&
      queued_bytes_ <= options_.max_buffered_bytes / 2) {
    room_wanted_ = false;
    return true;
  }
  return false;
}

void DatasetReader::DropBatches() {
  std::vector<ElementBatch> dropped;
  std::deque<ElementBatch> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = kj::mv(spent_);
    spent_.clear();
    queued = kj::mv(queue_);
    queue_.clear();
    dropped.push_back(kj::mv(reading_));
    reading_ = ElementBatch();
    reading_next_ = 0;
    reading_left_.store(0, std::memory_order_relaxed);
    held_elements_ = held_bytes_ = queued_elements_ = queued_bytes_ = 0;
  }
  // Destroyed here, on the loop thread, unlocked.
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
  s.elements = returned_elements_.load(std::memory_order_relaxed);
  s.bytes = returned_bytes_.load(std::memory_order_relaxed);
  s.buffered = queued_elements_ + reading_left_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace dispatch::clients
