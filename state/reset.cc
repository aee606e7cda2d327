// The reset of a restart without fault-tolerant mode (see
// DispatcherState::EmptyKeepingCounters). Kept apart from the transitions: it
// is not an Update, it replaces the state wholesale at start-up.

#include "state/dispatcher_state.h"

namespace dispatch::state {

DispatcherState DispatcherState::EmptyKeepingCounters() const {
  DispatcherState empty;
  empty.next_dataset_id_ = next_dataset_id_;
  empty.next_worker_id_ = next_worker_id_;
  empty.next_job_id_ = next_job_id_;
  empty.next_task_id_ = next_task_id_;
  empty.next_job_client_id_ = next_job_client_id_;
  empty.next_closure_id_ = next_closure_id_;
  empty.next_resource_id_ = next_resource_id_;
  empty.next_queue_position_ = next_queue_position_;
  empty.last_time_micros_ = last_time_micros_;
  empty.num_applied_ = num_applied_;
  return empty;
}

}  // namespace dispatch::state
