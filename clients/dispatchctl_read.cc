#include "clients/dispatchctl_read.h"

#include <stdio.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>

#include "clients/dataset_definition.h"
#include "clients/dataset_reader.h"
#include "clients/large_buffers.h"
#include "clients/task_description.h"

namespace dispatch::clients {
namespace {

// "range count=10 splits=2" or "lines a.txt b.txt" from the words after `read`.
Result<DatasetSpec> SpecFromArgs(const std::vector<std::string>& args) {
  KindDefinition def;
  def.kind = args[1];
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string& word = args[i];
    size_t eq = word.find('=');
    if (def.kind != "lines" && eq != std::string::npos && eq > 0) {
      def.args[word.substr(0, eq)] = word.substr(eq + 1);
    } else if (def.kind == "lines") {
      def.files.push_back(word);
    } else {
      return InvalidArgumentError(def.kind + " dataset: argument '" + word + "' is not key=value");
    }
  }
  return BuiltinDatasetSpec(def);
}

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char out[32];
  snprintf(out, sizeof(out), "%.1f %s", bytes, units[u]);
  return out;
}

}  // namespace

void DeclareReadFlags(FlagParser& parser, ReadFlags& flags) {
  parser.AddString("mode", "MODE",
                   "read: processing mode (off, dynamic, file, data, file_or_data, hint)",
                   &flags.mode);
  parser.AddString("job-name", "NAME", "read: share the named job (empty: a job of its own)",
                   &flags.job_name);
  parser.AddUint("consumers", "read: round robin across this many consumers (0: none)",
                 &flags.consumers, 0, 1 << 16);
  parser.AddUint("consumer-index", "read: this consumer's index, with --consumers",
                 &flags.consumer_index, 0, 1 << 16);
  parser.AddBool("requeue", "read: DYNAMIC, hand a dead worker's unfinished splits out again",
                 &flags.requeue);
  parser.AddUint("limit", "read: stop after this many elements (0: read to the end)", &flags.limit);
  parser.AddBool("print", "read: print every element as a line", &flags.print);
  parser.AddBool("per-task", "read: print how many elements each task gave, at the end",
                 &flags.per_task);
  parser.AddUint("heartbeat-ms", "read: client heartbeat interval", &flags.heartbeat_ms, 1,
                 3600000);
}

std::string CheckReadArgs(const std::vector<std::string>& args, const ReadFlags& flags) {
  if (args.size() < 2)
    return "'read' needs a dataset: read KIND [ARGS...], e.g. read range count=100";
  if (!ParseProcessingMode(flags.mode).has_value()) {
    return "--mode must be off, dynamic, file, data, file_or_data or hint, got '" + flags.mode +
           "'";
  }
  if (flags.consumers > 0 && flags.consumer_index >= flags.consumers) {
    return "--consumer-index must be below --consumers";
  }
  Result<DatasetSpec> spec = SpecFromArgs(args);
  if (!spec.ok()) return spec.status().message();
  return "";
}

int RunRead(const std::string& dispatcher, const std::string& token,
            const std::vector<std::string>& args, const ReadFlags& flags,
            uint64_t open_timeout_ms) {
  KeepLargeAllocationsInHeap();
  ReaderOptions options;
  options.dispatcher_address = dispatcher;
  options.token = token;
  options.dataset = *SpecFromArgs(args);
  options.job.processing_mode = *ParseProcessingMode(flags.mode);
  options.job.job_name = flags.job_name;
  options.job.num_consumers = static_cast<uint32_t>(flags.consumers);
  options.job.requeue_unfinished_splits = flags.requeue;
  options.job.heartbeat_interval_ms = static_cast<uint32_t>(flags.heartbeat_ms);
  options.consumer_index = flags.consumers > 0 ? static_cast<int64_t>(flags.consumer_index) : -1;
  Result<std::unique_ptr<DatasetReader>> opened =
      DatasetReader::Open(options, std::chrono::milliseconds(open_timeout_ms));
  if (!opened.ok()) {
    fprintf(stderr, "dispatchctl: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  DatasetReader& reader = **opened;
  ReaderStats start = reader.stats();
  printf("reading job %llu as job client %llu\n", static_cast<unsigned long long>(start.job_id),
         static_cast<unsigned long long>(start.job_client_id));
  fflush(stdout);

  const bool tty = isatty(STDERR_FILENO) == 1;
  const auto began = std::chrono::steady_clock::now();
  auto last_bar = began;
  uint64_t elements = 0;
  uint64_t bytes = 0;
  Status failed;
  Element element;
  std::map<uint64_t, uint64_t> per_task;  // task id -> elements
  while (flags.limit == 0 || elements < flags.limit) {
    Result<bool> next = reader.Next(&element);
    if (!next.ok()) {
      failed = next.status();
      break;
    }
    if (!*next) break;
    ++elements;
    bytes += element.data.size();
    ++per_task[element.task_id];
    if (flags.print) printf("%s\n", element.data.c_str());
    const auto now = std::chrono::steady_clock::now();
    if (tty && now - last_bar > std::chrono::milliseconds(200)) {
      last_bar = now;
      const double s = std::chrono::duration<double>(now - began).count();
      fprintf(stderr, "\r[%-30.*s] %llu elements, %s, %.0f elements/s",
              static_cast<int>(elements / 1000 % 31),
              "==============================", static_cast<unsigned long long>(elements),
              HumanBytes(static_cast<double>(bytes)).c_str(), s > 0 ? elements / s : 0.0);
      fflush(stderr);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (tty) fprintf(stderr, "\n");
  reader.Close();
  printf("read %llu elements, %llu bytes in %.3f s: %.0f elements/s, %.2f MB/s\n",
         static_cast<unsigned long long>(elements), static_cast<unsigned long long>(bytes), seconds,
         seconds > 0 ? elements / seconds : 0.0, seconds > 0 ? bytes / seconds / 1e6 : 0.0);
  if (flags.per_task) {
    for (const auto& [task, n] : per_task) {
      printf("task %llu gave %llu elements\n", static_cast<unsigned long long>(task),
             static_cast<unsigned long long>(n));
    }
  }
  if (!failed.ok()) {
    fprintf(stderr, "dispatchctl: reading failed: %s\n", failed.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace dispatch::clients
