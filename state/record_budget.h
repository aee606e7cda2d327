// RecordBudget: what an Update costs in the journal, and how a list that a
// handler would put into one Update is cut into several Updates that each fit
// one journal record (StoreOptions.max_record_bytes). DurableState::Submit
// checks the exact encoded size of every Update anyway; this is how builders
// of list-shaped Updates (closure batches, split grants) stay under it.
// Sizes are Cap'n Proto words of a flat one-segment message, the journal's
// encoding (state::EncodeMessage), so they are exact, not estimates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "schema/journal.capnp.h"

namespace dispatch::state {

// Words of a Text / Data field's content (Text with its NUL), padded.
inline uint64_t TextWords(size_t bytes) { return (bytes + 1 + 7) / 8; }
inline uint64_t DataWords(size_t bytes) { return (bytes + 7) / 8; }

// Words every record of a ClosureBatch holds besides its list items: the
// segment table, the root pointer, the Update and ClosureBatch structs and
// the list's tag word.
uint64_t ClosureBatchOverheadWords();

// Words one ClosureScheduled takes as an item of ClosureBatch.scheduled.
uint64_t ScheduledItemWords(std::string_view function, size_t args_bytes, size_t resources);

// Items of a ClosureBatch of fixed-size elements (UInt64 ids, or
// ClosureAssigned) that fit one record of `max_record_bytes`.
size_t IdsPerRecord(size_t max_record_bytes);
size_t AssignmentsPerRecord(size_t max_record_bytes);
// Split indices one ProduceSplit record holds (a grant is one record: it is
// not cut, the request is answered with fewer splits).
size_t SplitIndicesPerRecord(size_t max_record_bytes);

// Cuts items 0..n-1 into runs [begin, end) whose words (per `item_words`)
// plus `overhead_words` fit `max_record_bytes`, in order; every run holds at
// least one item (an item that alone does not fit gets a run of its own, for
// the caller to refuse or for Submit to refuse).
std::vector<std::pair<size_t, size_t>> SplitIntoRecords(
    size_t n, uint64_t overhead_words, size_t max_record_bytes,
    const std::function<uint64_t(size_t)>& item_words);

// Runs [begin, end) of at most `per_run` items (per_run >= 1).
std::vector<std::pair<size_t, size_t>> SplitByCount(size_t n, size_t per_run);

}  // namespace dispatch::state
