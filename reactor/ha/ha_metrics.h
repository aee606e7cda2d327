// The HA families of /metrics: the etcd journal's and snapshots' figures
// (dispatch_etcd_*, while leading) and the member's candidacy and standby
// (dispatch_ha_*). The member adds them to the families of whatever serves
// behind its Frontend (docs/operators/metrics.md lists them).
// REQUIRES: loop thread.
#pragma once

#include "reactor/ha/ha_status.h"
#include "reactor/journal_replicator.h"
#include "reactor/metrics_exposition.h"

namespace dispatch::ha {

// `replicator`: null while not leading.
void AddHaMetrics(reactor::MetricFamilies& f, const HaStatus& ha,
                  const reactor::JournalReplicator* replicator);

}  // namespace dispatch::ha
