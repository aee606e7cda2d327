#include "state/effects.h"

namespace dispatch::state {

void Effects::Clear() {
  time_micros = 0;
  scheduled.clear();
  queued.clear();
  put_back.clear();
  runs_started.clear();
  runs_ended.clear();
  ended.clear();
  released.clear();
  first_errors.clear();
  errors_cleared.clear();
  queue_shrank = false;
  tasks_created.clear();
  tasks_activated.clear();
  tasks_finished.clear();
  tasks_removed.clear();
}

bool Effects::empty() const {
  return scheduled.empty() && queued.empty() && put_back.empty() && runs_started.empty() &&
         runs_ended.empty() && ended.empty() && released.empty() && first_errors.empty() &&
         errors_cleared.empty() && !queue_shrank && tasks_created.empty() &&
         tasks_activated.empty() && tasks_finished.empty() && tasks_removed.empty();
}

}  // namespace dispatch::state
