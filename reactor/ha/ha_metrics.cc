#include "reactor/ha/ha_metrics.h"

namespace dispatch::ha {

using reactor::ReplicatorStats;

void AddHaMetrics(reactor::MetricFamilies& f, const HaStatus& ha,
                  const reactor::JournalReplicator* replicator) {
  if (replicator != nullptr) {
    const ReplicatorStats& rs = replicator->stats();
    f.Counter("dispatch_etcd_journal_transactions_total",
              "HA mode: etcd journal transactions acknowledged (one per group of commits).",
              static_cast<double>(rs.transactions));
    f.Counter("dispatch_etcd_journal_retries_total",
              "HA mode: etcd journal transactions sent again after no answer.",
              static_cast<double>(rs.transaction_retries));
    f.Counter("dispatch_etcd_journal_bytes_total", "HA mode: journal bytes etcd acknowledged.",
              static_cast<double>(rs.bytes));
    f.Counter("dispatch_etcd_journal_groups_split_total",
              "HA mode: groups closed early by kMaxEtcdBatchBytes.",
              static_cast<double>(rs.groups_split));
    f.Counter("dispatch_etcd_journal_backlog_refusals_total",
              "HA mode: updates refused because too much waited for etcd.",
              static_cast<double>(rs.refused_backlog));
    f.Histo("dispatch_etcd_journal_transaction_seconds",
            "HA mode: one etcd journal transaction, sent to acknowledged.", rs.transaction_seconds);
    f.Histo("dispatch_etcd_journal_transaction_bytes",
            "HA mode: bytes of one etcd journal transaction.", rs.bytes_per_transaction);
    f.Histo("dispatch_etcd_journal_records_per_transaction",
            "HA mode: journal records in one etcd transaction.", rs.records_per_transaction);
    f.Counter("dispatch_etcd_snapshots_total", "HA mode: snapshots made current in etcd.",
              static_cast<double>(rs.snapshots_written));
    f.Counter("dispatch_etcd_snapshot_bytes_total",
              "HA mode: snapshot chunk bytes etcd acknowledged.",
              static_cast<double>(rs.snapshot_bytes));
    f.Counter("dispatch_etcd_snapshot_chunks_total", "HA mode: snapshot chunks etcd acknowledged.",
              static_cast<double>(rs.snapshot_chunks));
    f.Counter("dispatch_etcd_snapshot_failures_total",
              "HA mode: snapshots given up before their switch (the journal keeps every record).",
              static_cast<double>(rs.snapshot_failures));
    f.Counter("dispatch_etcd_snapshots_skipped_total",
              "HA mode: local snapshots not sent because a newer one replaced them while another "
              "was sent.",
              static_cast<double>(rs.snapshots_skipped));
    f.Counter("dispatch_etcd_snapshot_retries_total",
              "HA mode: snapshot transactions sent again after no answer.",
              static_cast<double>(rs.snapshot_retries));
    f.Counter("dispatch_etcd_keys_deleted_total",
              "HA mode: journal keys and old snapshot chunks deleted by snapshot switches.",
              static_cast<double>(rs.snapshot_keys_deleted));
    f.Counter("dispatch_etcd_compactions_total",
              "HA mode: etcd compactions (physical) at a snapshot switch.",
              static_cast<double>(rs.compactions));
    f.Counter("dispatch_etcd_compaction_failures_total", "HA mode: etcd compactions that failed.",
              static_cast<double>(rs.compaction_failures));
    f.Gauge("dispatch_etcd_snapshot_seq",
            "HA mode: the record the current snapshot in etcd covers (0: none).",
            static_cast<double>(rs.last_snapshot_seq));
    f.Histo("dispatch_etcd_snapshot_seconds",
            "HA mode: one etcd snapshot, local snapshot recorded to current in etcd.",
            rs.snapshot_seconds);
  }
  {
    f.Gauge("dispatch_ha_leading", "HA mode: 1 while this member leads, 0 while it is a standby.",
            ha.leading ? 1 : 0);
    f.Gauge("dispatch_ha_lease_ttl_seconds",
            "HA mode: the TTL etcd granted this member's lease (0: none yet).",
            static_cast<double>(ha.lease_ttl_seconds));
    f.Counter("dispatch_ha_campaigns_total", "HA mode: campaigns for the leader key.",
              static_cast<double>(ha.campaigns));
    f.Counter("dispatch_ha_keepalives_total", "HA mode: lease keepalives etcd answered.",
              static_cast<double>(ha.keepalives_ok));
    f.Counter("dispatch_ha_keepalive_failures_total",
              "HA mode: lease keepalives without an answer or refused.",
              static_cast<double>(ha.keepalives_failed));
    f.Counter("dispatch_ha_lease_grant_failures_total", "HA mode: lease grants tried again.",
              static_cast<double>(ha.lease_grants_failed));
    f.Gauge("dispatch_ha_standby_following",
            "HA mode: 1 while this standby has loaded etcd's state and applies the journal as it "
            "comes.",
            ha.following ? 1 : 0);
    f.Gauge("dispatch_ha_standby_seq", "HA mode: the last journal record this standby holds.",
            static_cast<double>(ha.standby_seq));
    f.Gauge("dispatch_ha_standby_live_state",
            "HA mode: 1 while this standby keeps a live state (a takeover then replays nothing).",
            ha.live_state ? 1 : 0);
    f.Counter("dispatch_ha_standby_reloads_total",
              "HA mode: times this standby started loading from etcd again.",
              static_cast<double>(ha.standby_reloads));
  }
}

}  // namespace dispatch::ha
