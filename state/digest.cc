// Digest: FNV-1a over every record field in canonical order (maps by id), with
// length prefixes for strings and lists and a tag per section, so that moving
// bytes between neighbouring fields changes the hash. Indexes are not hashed:
// they follow from the records (CheckIndexes verifies that separately).
//
// Each record is taken apart with a structured binding that names every
// member, so a member added to a record in records.h does not compile until it
// is named here, and hashed (a record's own id is its map key, hashed as
// `id`). The snapshot tests then fail until WriteSnapshot and FromSnapshot
// carry it: a restored state would hash differently.

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
    const auto& [d_id, fingerprint, metadata, definition_key, element_spec, registered_micros,
                 kind] = d;
    h.U64(id);
    h.U64(fingerprint);
    h.Str(metadata);
    h.Str(definition_key);
    h.Bool(element_spec.has_value());
    h.Str(element_spec.value_or(""));
    h.I64(registered_micros);
    h.Str(kind);
  }

  h.Tag('W');
  h.U64(workers_.size());
  for (const auto& [id, w] : workers_) {
    const auto& [w_id, address, transfer_address, tags, incarnation, registered_micros,
                 dataset_kinds] = w;
    h.U64(id);
    h.Str(address);
    h.Str(transfer_address);
    h.U64(tags.size());
    for (const std::string& tag : tags) h.Str(tag);
    h.U64(incarnation);
    h.I64(registered_micros);
    h.U64(dataset_kinds.size());
    for (const std::string& kind : dataset_kinds) h.Str(kind);
  }

  h.Tag('J');
  h.U64(jobs_.size());
  for (const auto& [id, j] : jobs_) {
    const auto& [j_id, dataset_id, processing_mode, named_key, num_consumers, target_workers,
                 requeue_unfinished_splits, providers, num_clients, last_client_released_micros,
                 garbage_collected, finished, created_micros, pending_tasks] = j;
    h.U64(id);
    h.U64(dataset_id);
    h.U64(static_cast<uint64_t>(processing_mode));
    h.Bool(named_key.has_value());
    if (named_key.has_value()) {
      const auto& [name, index] = *named_key;
      h.Str(name);
      h.I64(index);
    }
    h.U64(num_consumers);
    h.U64(static_cast<uint64_t>(target_workers));
    h.Bool(requeue_unfinished_splits);
    h.U64(providers.size());
    for (const auto& [repetition, next_index, requeued] : providers) {
      h.I64(repetition);
      h.U64(next_index);
      h.U64(requeued.size());
      for (uint64_t index : requeued) h.U64(index);
    }
    h.I64(num_clients);
    h.I64(last_client_released_micros);
    h.Bool(garbage_collected);
    h.Bool(finished);
    h.I64(created_micros);
    h.U64(pending_tasks.size());
    for (const auto& [task_id, target_round, failures, ready_clients] : pending_tasks) {
      h.U64(task_id);
      h.I64(target_round);
      h.I64(failures);
      h.U64(ready_clients.size());
      for (uint64_t client : ready_clients) h.U64(client);
    }
  }

  h.Tag('T');
  h.U64(tasks_.size());
  for (const auto& [id, t] : tasks_) {
    const auto& [t_id, job_id, worker_address, transfer_address, starting_round, pending,
                 finished] = t;
    h.U64(id);
    h.U64(job_id);
    h.Str(worker_address);
    h.Str(transfer_address);
    h.I64(starting_round);
    h.Bool(pending);
    h.Bool(finished);
  }

  h.Tag('C');
  h.U64(job_clients_.size());
  for (const auto& [id, c] : job_clients_) {
    const auto& [c_id, job_id, acquired_micros] = c;
    h.U64(id);
    h.U64(job_id);
    h.I64(acquired_micros);
  }

  h.Tag('S');
  h.U64(split_grants_.size());
  for (const auto& [r, g] : split_grants_) {
    const auto& [task_id, provider_index] = r;
    const auto& [sequence, repetition, split_indices, end_of_splits, outstanding] = g;
    h.U64(task_id);
    h.U64(provider_index);
    h.U64(sequence);
    h.I64(repetition);
    h.U64(split_indices.size());
    for (uint64_t index : split_indices) h.U64(index);
    h.Bool(end_of_splits);
    h.Bool(outstanding);
  }

  h.Tag('F');
  h.U64(closures_.size());
  for (const Closure* closure : ClosuresInIdOrder()) {
    const uint64_t id = closure->id;
    const Closure& c = *closure;
    const auto& [c_id, coordinator_id, request_id, function_name, args, state, worker_id, attempts,
                 queue_position, result, result_stored, result_size, result_crc, error, user_error,
                 scheduled_micros, done_micros, resources, transient_failures, priority,
                 deadline_micros, inputs] = c;
    h.U64(id);
    h.U64(coordinator_id);
    h.U64(request_id);
    h.Str(function_name);
    h.Str(args);
    h.U64(static_cast<uint64_t>(state));
    h.U64(worker_id);
    h.U64(attempts);
    h.U64(queue_position);
    h.Str(result);
    h.Str(error);
    h.Bool(user_error);
    h.I64(scheduled_micros);
    h.I64(done_micros);
    h.U64(resources.size());
    for (uint64_t resource : resources) h.U64(resource);
    h.U64(transient_failures);
    h.Bool(result_stored);
    h.U64(result_size);
    h.U64(result_crc);
    h.I64(priority);
    h.I64(deadline_micros);
    h.U64(inputs.size());
    for (uint64_t input : inputs) h.U64(input);
  }

  h.Tag('R');
  h.U64(next_resource_id_);
  h.U64(resources_.size());
  for (const auto& [id, r] : resources_) {
    const auto& [r_id, coordinator_id, function_name, args, request_id] = r;
    h.U64(id);
    h.U64(coordinator_id);
    h.Str(function_name);
    h.Str(args);
    h.U64(request_id);
  }

  h.Tag('E');
  h.U64(coordinator_errors_.size());
  for (const auto& [id, e] : coordinator_errors_) {
    const auto& [closure_id, error] = e;
    h.U64(id);
    h.U64(closure_id);
    h.Str(error);
  }
  return h.Finish();
}

}  // namespace dispatch::state
