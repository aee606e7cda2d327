// What the HA benches (`closures-ha`, `dataservice-ha`) share: the same
// measurement against a single-node dispatcher and then against HA
// dispatchers on fresh etcd groups of each size (real members on free
// loopback ports), and the etcd journal transaction latency the leader
// measured in that run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tests/support/dispatcher_process.h"

namespace dispatch::bench {

struct TxnQuantiles {
  double p50_us = -1;  // -1: single node (no etcd journal)
  double p99_us = -1;
  uint64_t transactions = 0;
  uint64_t bytes = 0;  // dispatch_etcd_journal_bytes_total
};

// The p50/p99 of the leader's dispatch_etcd_journal_transaction_seconds
// (read from its /metrics; interpolated inside the histogram's buckets).
TxnQuantiles ReadTxnQuantiles(const std::string& http_url);

// A dispatcher (HA mode on `etcd` when it is not empty) that answers
// /readyz with 200; throws naming `name` when it never does.
std::unique_ptr<testing::DispatcherProcess> StartReadyDispatcher(const std::string& name,
                                                                 const std::string& etcd);

// Calls measure("single node", "") and then, for each size in `members`
// ("1,3"), measure("etcd, N members", ENDPOINTS) on a fresh etcd group.
void ForEachSetup(const std::string& members,
                  const std::function<void(const std::string& name, const std::string& etcd)>& measure);

}  // namespace dispatch::bench
