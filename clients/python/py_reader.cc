// Reading a dataset from Python: the C++ DatasetReader, whose elements reach
// Python as bytes (one copy) or as Buffer objects (none), in batches so that
// the GIL is released and taken once per batch rather than per element.
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "clients/blocking_dataset_client.h"
#include "clients/dataset_reader.h"
#include "clients/large_buffers.h"
#include "clients/python/bindings.h"
#include "clients/task_description.h"

namespace dispatch::python {
namespace {

using clients::DatasetReader;
using clients::Element;

constexpr std::chrono::milliseconds kWaitSlice{100};
// A batch ends past this many bytes: the buffers it holds are freed only as
// Python moves past them, and memory the reader refills at once is still in
// cache (batches of up to 64 MiB of 1 MiB elements read at 55% of the C++
// reader's rate here).
constexpr uint64_t kMaxBatchBytes = 1 << 20;

class PyReader {
 public:
  PyReader(std::string address, std::string token, uint64_t dataset_id,
           const std::string& processing_mode, std::string job_name, uint32_t num_consumers,
           int64_t consumer_index, double open_timeout) {
    // As dispatchctl does: glibc would map and unmap every element of 128 KiB
    // or more afresh, a page fault per 4 KiB (a third of the throughput for
    // 1 MiB elements here). This sets the policy for the whole process, once.
    static const bool kept_in_heap = [] {
      clients::KeepLargeAllocationsInHeap();
      return true;
    }();
    (void)kept_in_heap;
    clients::ReaderOptions options;
    options.dispatcher_address = std::move(address);
    options.token = std::move(token);
    options.dataset_id = dataset_id;
    std::optional<rpc::ProcessingMode> mode = clients::ParseProcessingMode(processing_mode);
    if (!mode) {
      throw StatusError{InvalidArgumentError(
          "processing_mode must be off, dynamic, file, data, file_or_data or hint, got '" +
          processing_mode + "'")};
    }
    options.job.dataset_id = dataset_id;
    options.job.processing_mode = *mode;
    options.job.job_name = std::move(job_name);
    options.job.num_consumers = num_consumers;
    options.consumer_index = consumer_index;
    Result<std::unique_ptr<DatasetReader>> opened = UnavailableError("not opened");
    {
      py::gil_scoped_release released;
      opened = DatasetReader::Open(
          std::move(options), std::chrono::milliseconds(static_cast<int64_t>(open_timeout * 1000)));
    }
    reader_ = ValueOrRaise(std::move(opened));
  }

  ~PyReader() { Close(); }

  // Up to `max` elements and about kMaxBatchBytes: waits for the first
  // (Ctrl-C interrupts the wait), then takes what is already read ahead.
  // None at the end of the dataset.
  py::object NextBatch(size_t max, bool as_buffers) {
    if (reader_ == nullptr) throw StatusError{FailedPreconditionError("the reader is closed")};
    std::vector<std::string> batch;
    bool ended = false;
    while (batch.empty() && !ended) {
      Status failed;
      {
        py::gil_scoped_release released;
        Element element;
        std::chrono::milliseconds wait = kWaitSlice;
        uint64_t bytes = 0;
        while (batch.size() < max && bytes < kMaxBatchBytes) {
          // Within a slice for the first element, then only what is read ahead.
          Result<std::optional<bool>> next = reader_->NextWithin(&element, wait);
          if (!next.ok()) {
            failed = next.status();
            break;
          }
          if (!next->has_value()) break;
          if (!**next) {
            ended = true;
            break;
          }
          bytes += element.data.size();
          batch.push_back(std::move(element.data));
          wait = std::chrono::milliseconds(0);
        }
      }
      RaiseIfError(failed);
      if (batch.empty() && !ended) {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      }
    }
    if (batch.empty()) return py::none();
    py::list out(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      out[i] = as_buffers ? MakeBuffer(std::move(batch[i])) : py::object(Bytes(batch[i]));
    }
    return out;
  }

  py::dict Stats() const {
    py::dict out;
    if (reader_ == nullptr) return out;
    clients::ReaderStats s = reader_->stats();
    out["job_id"] = s.job_id;
    out["job_client_id"] = s.job_client_id;
    out["elements"] = s.elements;
    out["bytes"] = s.bytes;
    out["buffered"] = s.buffered;
    return out;
  }

  void Close() {
    if (reader_ == nullptr) return;
    py::gil_scoped_release released;
    reader_->Close();
  }

 private:
  std::unique_ptr<DatasetReader> reader_;
};

clients::DispatcherEndpoint Endpoint(std::string address, std::string token, double timeout) {
  return clients::DispatcherEndpoint{
      std::move(address), std::move(token),
      std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000))};
}

}  // namespace

void BindReader(py::module_& m) {
  py::class_<PyReader>(m, "Reader")
      .def(py::init<std::string, std::string, uint64_t, const std::string&, std::string, uint32_t,
                    int64_t, double>(),
           py::arg("address"), py::arg("token"), py::arg("dataset_id"),
           py::arg("processing_mode"), py::arg("job_name"), py::arg("num_consumers"),
           py::arg("consumer_index"), py::arg("open_timeout"))
      .def("next_batch", &PyReader::NextBatch, py::arg("max"), py::arg("as_buffers"))
      .def("stats", &PyReader::Stats)
      .def("close", &PyReader::Close);
  m.def(
      "register_dataset",
      [](std::string address, std::string token, std::string definition, uint64_t num_splits,
         std::vector<std::string> explicit_splits, std::string element_spec, double timeout) {
        clients::DatasetSpec spec;
        spec.definition = std::move(definition);
        spec.num_splits = num_splits;
        spec.explicit_splits = std::move(explicit_splits);
        spec.element_spec = std::move(element_spec);
        Result<clients::RegisteredDataset> registered = UnavailableError("not registered");
        {
          py::gil_scoped_release released;
          registered = clients::RegisterDatasetAndWait(
              Endpoint(std::move(address), std::move(token), timeout), spec);
        }
        return ValueOrRaise(std::move(registered)).dataset_id;
      },
      py::arg("address"), py::arg("token"), py::arg("definition"), py::arg("num_splits"),
      py::arg("explicit_splits"), py::arg("element_spec"), py::arg("timeout"));
  m.def(
      "get_element_spec",
      [](std::string address, std::string token, uint64_t dataset_id, double timeout) {
        Result<std::string> spec = UnavailableError("not asked");
        {
          py::gil_scoped_release released;
          spec = clients::GetElementSpecAndWait(
              Endpoint(std::move(address), std::move(token), timeout), dataset_id);
        }
        return Bytes(ValueOrRaise(std::move(spec)));
      },
      py::arg("address"), py::arg("token"), py::arg("dataset_id"), py::arg("timeout"));
}

}  // namespace dispatch::python
