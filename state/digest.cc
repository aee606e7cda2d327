// Digest: FNV-1a over every record field in canonical order (maps by id), with
// length prefixes for strings and lists and a tag per section, so that moving
// bytes between neighbouring fields changes the hash. Indexes are not hashed:
// they follow from the records (CheckIndexes verifies that separately).

#include <string>

#include "state/dispatcher_state.h"

namespace dispatch::state {

namespace {

class Hasher {
 public:
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Bool(bool v) { Byte(v ? 1 : 0); }
  void Str(const std::string& s) {
    U64(s.size());
    for (char c : s) Byte(static_cast<uint8_t>(c));
  }
  void Tag(char tag) { Byte(static_cast<uint8_t>(tag)); }

  // FNV-1a has weak high bits for short inputs; a final avalanche fixes that.
  uint64_t Finish() const {
    uint64_t h = h_;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
  }

 private:
  void Byte(uint8_t b) {
    h_ ^= b;
    h_ *= 0x100000001b3ULL;
  }
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

}  // namespace

uint64_t DispatcherState::Digest() const {
  Hasher h;
  h.Tag('N');
  for (uint64_t next :
       {next_dataset_id_, next_worker_id_, next_job_id_, next_task_id_, next_job_client_id_,
        next_closure_id_, next_queue_position_, num_applied_}) {
    h.U64(next);
  }
  h.I64(last_time_micros_);

  h.Tag('D');
  h.U64(datasets_.size());
  for (const auto& [id, d] : datasets_) {
    h.U64(id);
    h.U64(d.fingerprint);
    h.Str(d.metadata);
    h.Str(d.definition_key);
    h.Bool(d.element_spec.has_value());
    h.Str(d.element_spec.value_or(""));
    h.I64(d.registered_micros);
  }

  h.Tag('W');
  h.U64(workers_.size());
  for (const auto& [id, w] : workers_) {
    h.U64(id);
    h.Str(w.address);
    h.Str(w.transfer_address);
    h.U64(w.tags.size());
    for (const std::string& tag : w.tags) h.Str(tag);
    h.U64(w.incarnation);
    h.I64(w.registered_micros);
  }

  h.Tag('J');
  h.U64(jobs_.size());
  for (const auto& [id, j] : jobs_) {
    h.U64(id);
    h.U64(j.dataset_id);
    h.U64(static_cast<uint64_t>(j.processing_mode));
    h.Bool(j.named_key.has_value());
    if (j.named_key.has_value()) {
      h.Str(j.named_key->name);
      h.I64(j.named_key->index);
    }
    h.U64(j.num_consumers);
    h.U64(static_cast<uint64_t>(j.target_workers));
    h.Bool(j.requeue_unfinished_splits);
    h.U64(j.providers.size());
    for (const SplitProviderProgress& p : j.providers) {
      h.I64(p.repetition);
      h.U64(p.next_index);
      h.U64(p.requeued.size());
      for (uint64_t index : p.requeued) h.U64(index);
    }
    h.I64(j.num_clients);
    h.I64(j.last_client_released_micros);
    h.Bool(j.garbage_collected);
    h.Bool(j.finished);
    h.I64(j.created_micros);
    h.U64(j.pending_tasks.size());
    for (const PendingTask& p : j.pending_tasks) {
      h.U64(p.task_id);
      h.I64(p.target_round);
      h.I64(p.failures);
      h.U64(p.ready_clients.size());
      for (uint64_t client : p.ready_clients) h.U64(client);
    }
  }

  h.Tag('T');
  h.U64(tasks_.size());
  for (const auto& [id, t] : tasks_) {
    h.U64(id);
    h.U64(t.job_id);
    h.Str(t.worker_address);
    h.Str(t.transfer_address);
    h.I64(t.starting_round);
    h.Bool(t.pending);
    h.Bool(t.finished);
  }

  h.Tag('C');
  h.U64(job_clients_.size());
  for (const auto& [id, c] : job_clients_) {
    h.U64(id);
    h.U64(c.job_id);
    h.I64(c.acquired_micros);
  }

  h.Tag('S');
  h.U64(split_grants_.size());
  for (const auto& [r, g] : split_grants_) {
    h.U64(r.task_id);
    h.U64(r.provider_index);
    h.U64(g.sequence);
    h.I64(g.repetition);
    h.U64(g.split_indices.size());
    for (uint64_t index : g.split_indices) h.U64(index);
    h.Bool(g.end_of_splits);
    h.Bool(g.outstanding);
  }

  h.Tag('F');
  h.U64(closures_.size());
  for (const auto& [id, c] : closures_) {
    h.U64(id);
    h.U64(c.coordinator_id);
    h.U64(c.request_id);
    h.Str(c.function_name);
    h.Str(c.args);
    h.U64(static_cast<uint64_t>(c.state));
    h.U64(c.worker_id);
    h.U64(c.attempts);
    h.U64(c.queue_position);
    h.Str(c.result);
    h.Str(c.error);
    h.Bool(c.user_error);
    h.I64(c.scheduled_micros);
    h.I64(c.done_micros);
    h.U64(c.resources.size());
    for (uint64_t resource : c.resources) h.U64(resource);
    h.U64(c.transient_failures);
    h.Bool(c.result_stored);
    h.U64(c.result_size);
    h.U64(c.result_crc);
  }

  h.Tag('R');
  h.U64(next_resource_id_);
  h.U64(resources_.size());
  for (const auto& [id, r] : resources_) {
    h.U64(id);
    h.U64(r.coordinator_id);
    h.Str(r.function_name);
    h.Str(r.args);
    h.U64(r.request_id);
  }

  h.Tag('E');
  h.U64(coordinator_errors_.size());
  for (const auto& [id, e] : coordinator_errors_) {
    h.U64(id);
    h.U64(e.closure_id);
    h.Str(e.error);
  }
  return h.Finish();
}

}  // namespace dispatch::state
