#include "tests/datapath/datapath_support.h"

#include <algorithm>
#include <stdexcept>

#include "clients/dataset_definition.h"

namespace dispatch::testing {

DataCluster::DataCluster(std::vector<std::string> dispatcher_flags) {
  DispatcherProcess::Options options;
  options.extra_flags = {"--log-level=warning", "--synchronous=normal"};
  for (auto& flag : dispatcher_flags) options.extra_flags.push_back(flag);
  dispatcher_ = std::make_unique<DispatcherProcess>(options);
}

std::string DataCluster::StartWorker(size_t i, std::vector<std::string> extra_flags,
                                     std::string address) {
  if (!addresses_.contains(i)) {
    addresses_[i] = std::move(address);
    flags_[i] = std::move(extra_flags);
  }
  workers_[i] = std::make_unique<WorkerProcess>(dispatcher(), flags_[i], addresses_[i]);
  addresses_[i] = workers_[i]->address();
  if (workers_[i]->WaitRegistered() == 0) {
    throw std::runtime_error("worker " + addresses_[i] + " did not register");
  }
  return addresses_[i];
}

void DataCluster::Kill9Worker(size_t i) { workers_.at(i)->Kill9(); }

std::string DataCluster::SocketAddress(size_t i) const {
  return "unix:" + dir_.File("worker-" + std::to_string(i) + ".sock");
}

clients::ReaderOptions DataCluster::ReaderOf(const std::string& definition,
                                             rpc::ProcessingMode mode) const {
  clients::ReaderOptions options;
  options.dispatcher_address = dispatcher();
  Result<clients::KindDefinition> parsed = clients::ParseKindDefinition(definition);
  if (!parsed.ok()) throw std::runtime_error(parsed.status().ToString());
  Result<clients::DatasetSpec> spec = clients::BuiltinDatasetSpec(*parsed);
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());
  options.dataset = *spec;
  options.job.processing_mode = mode;
  options.job.heartbeat_interval_ms = 100;
  options.seed = TestSeed();
  return options;
}

BackgroundRead::BackgroundRead(clients::ReaderOptions options) {
  thread_ = std::thread([this, options = std::move(options)]() {
    Result<std::unique_ptr<clients::DatasetReader>> reader = clients::DatasetReader::Open(options);
    if (!reader.ok()) {
      status_ = reader.status();
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
      return;
    }
    clients::Element element;
    while (true) {
      Result<bool> next = (*reader)->Next(&element, kTestDeadline);
      if (!next.ok()) {
        status_ = next.status();
        break;
      }
      if (!*next) break;
      elements_.push_back(std::move(element));
      std::lock_guard<std::mutex> lock(mu_);
      ++count_;
      cv_.notify_all();
    }
    (*reader)->Close();
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  });
}

uint64_t BackgroundRead::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

bool BackgroundRead::WaitForCount(uint64_t n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return count_ >= n || done_; }) && count_ >= n;
}

BackgroundRead::~BackgroundRead() {
  if (thread_.joinable()) thread_.join();
}

Status BackgroundRead::Join() {
  if (thread_.joinable()) thread_.join();
  return status_;
}

std::vector<uint64_t> Values(const std::vector<clients::Element>& elements) {
  std::vector<uint64_t> out;
  out.reserve(elements.size());
  for (const auto& e : elements) out.push_back(std::stoull(e.data));
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t SplitOf(uint64_t value, uint64_t count, uint64_t splits) {
  // Split i holds [i*count/splits, (i+1)*count/splits).
  uint64_t i = value * splits / count;
  while (i + 1 < splits && (i + 1) * count / splits <= value) ++i;
  while (i > 0 && i * count / splits > value) --i;
  return i;
}

}  // namespace dispatch::testing
