#include "clients/dispatchctl_group.h"

#include <stdio.h>

#include "clients/dispatchctl_connect.h"
#include "common/rpc_status.h"
#include "reactor/etcd/endpoints.h"
#include "reactor/etcd/etcd_client.h"
#include "reactor/ha/wire/group_status.h"

namespace dispatch::clients {

void DeclareGroupFlags(FlagParser& parser, GroupFlags& flags) {
  parser.AddString("etcd", "ENDPOINTS",
                   "group: the HA group's etcd client URLs, as the dispatchers' --etcd "
                   "(http://HOST:PORT,...)",
                   &flags.etcd);
  parser.AddString("ha-prefix", "PREFIX", "group: the dispatchers' --ha-prefix", &flags.ha_prefix);
}

std::string CheckGroupArgs(const std::vector<std::string>& args, const GroupFlags& flags) {
  if (args.size() != 1) return "'group' takes no argument";
  if (flags.etcd.empty()) return "'group' needs --etcd";
  Result<std::vector<std::string>> endpoints = etcd::ParseEndpoints(flags.etcd);
  if (!endpoints.ok()) return endpoints.status().message();
  return "";
}

int RunGroup(const GroupFlags& flags, uint64_t timeout_ms) {
  std::string output;
  const int rc = RunCommandOnLoop([&](uvkj::UvAsyncIo& io) {
    etcd::EtcdClientOptions options;
    options.endpoints = etcd::ParseEndpoints(flags.etcd).value();
    etcd::EtcdClient client(io, options);
    Result<ha::GroupStatus> group = io.timer()
                                        .timeoutAfter(timeout_ms * kj::MILLISECONDS,
                                                      ha::ReadGroupStatus(client, flags.ha_prefix))
                                        .wait(io.wait_scope());
    if (!group.ok()) kj::throwFatalException(ExceptionFromStatus(group.status()));
    output = ha::FormatGroupStatus(*group, flags.ha_prefix);
  });
  if (rc == 0) fputs(output.c_str(), stdout);
  return rc;
}

}  // namespace dispatch::clients
