// `dispatchctl group --etcd=ENDPOINTS [--ha-prefix=PREFIX]`: an HA group as
// etcd holds it (reactor/ha/wire/group_status.h): the leader, its lease and the
// TTL left, every member, the journal's position. Reads etcd only, so it
// answers whichever dispatchers are up; needs no --dispatcher.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/flag_parser.h"

namespace dispatch::clients {

struct GroupFlags {
  std::string etcd;
  std::string ha_prefix = "/dispatch/default";
};

void DeclareGroupFlags(FlagParser& parser, GroupFlags& flags);
// A usage error, or empty.
std::string CheckGroupArgs(const std::vector<std::string>& args, const GroupFlags& flags);
// Prints the group; 0, or 1 when etcd could not be read (the reason on stderr).
int RunGroup(const GroupFlags& flags, uint64_t timeout_ms);

}  // namespace dispatch::clients
