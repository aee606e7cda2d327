#include "state/record_budget.h"

#include <capnp/message.h>

#include <algorithm>

namespace dispatch::state {

uint64_t ClosureBatchOverheadWords() {
  // Segment table (one segment: 8 bytes), root pointer, the two structs, and
  // the tag word of a struct list (an id list has none: one spare word).
  return 1 + 1 + capnp::sizeInWords<journal::Update>() +
         capnp::sizeInWords<journal::ClosureBatch>() + 1;
}

uint64_t ScheduledItemWords(std::string_view function, size_t args_bytes, size_t resources) {
  return capnp::sizeInWords<journal::ClosureScheduled>() + TextWords(function.size()) +
         DataWords(args_bytes) + resources;
}

size_t IdsPerRecord(size_t max_record_bytes) {
  const uint64_t words = max_record_bytes / 8;
  const uint64_t overhead = ClosureBatchOverheadWords();
  return words > overhead ? static_cast<size_t>(words - overhead) : 1;
}

size_t AssignmentsPerRecord(size_t max_record_bytes) {
  return std::max<size_t>(
      1, IdsPerRecord(max_record_bytes) / capnp::sizeInWords<journal::ClosureAssigned>());
}

size_t SplitIndicesPerRecord(size_t max_record_bytes) {
  const uint64_t words = max_record_bytes / 8;
  const uint64_t overhead =
      1 + 1 + capnp::sizeInWords<journal::Update>() + capnp::sizeInWords<journal::ProduceSplit>();
  return words > overhead ? static_cast<size_t>(words - overhead) : 1;
}

std::vector<std::pair<size_t, size_t>> SplitIntoRecords(
    size_t n, uint64_t overhead_words, size_t max_record_bytes,
    const std::function<uint64_t(size_t)>& item_words) {
  std::vector<std::pair<size_t, size_t>> runs;
  const uint64_t limit = max_record_bytes / 8;
  size_t begin = 0;
  uint64_t words = overhead_words;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t item = item_words(i);
    if (i > begin && words + item > limit) {
      runs.emplace_back(begin, i);
      begin = i;
      words = overhead_words;
    }
    words += item;
  }
  if (begin < n) runs.emplace_back(begin, n);
  return runs;
}

std::vector<std::pair<size_t, size_t>> SplitByCount(size_t n, size_t per_run) {
  std::vector<std::pair<size_t, size_t>> runs;
  per_run = std::max<size_t>(per_run, 1);
  for (size_t begin = 0; begin < n; begin += per_run)
    runs.emplace_back(begin, std::min(n, begin + per_run));
  return runs;
}

}  // namespace dispatch::state
