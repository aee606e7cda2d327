// Text rendering of the dispatcher's listings for dispatchctl: one aligned
// table per listing, a header line then one row per item, and a key/value
// block for one job. JSON output does not go through here: dispatchctl
// encodes the reply structs with capnp's JsonCodec.
#pragma once

#include <string>

#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

std::string FormatWorkers(capnp::List<rpc::WorkerInfo>::Reader workers);
std::string FormatDatasets(capnp::List<rpc::DatasetInfo>::Reader datasets);
std::string FormatJobs(capnp::List<rpc::JobInfo>::Reader jobs);
std::string FormatTasks(capnp::List<rpc::TaskInfo>::Reader tasks);
std::string FormatClients(capnp::List<rpc::JobClientInfo>::Reader clients);
std::string FormatJob(rpc::JobInfo::Reader job, capnp::List<rpc::TaskInfo>::Reader tasks,
                      capnp::List<rpc::JobClientInfo>::Reader clients);

}  // namespace dispatch::clients
