// The `dispatcher` binary's flags: their declarations (the --help text) and
// the checks that refuse a bad combination before anything starts (exit 2,
// with a message naming the flag). HA mode's limits are applied here too,
// through ApplyHaLimits, so the options a server or an HA member gets are
// final.
#pragma once

#include <cstdint>
#include <string>

#include "common/flag_parser.h"
#include "reactor/dispatcher_server.h"
#include "reactor/ha/member.h"

namespace dispatch::reactor {

struct MainFlags {
  DispatcherOptions options;
  std::string log_level = "info";
  std::string log_format = "text";
  bool allow_remote_without_token = false;
  bool verify = false;
  // HA mode (docs/high_availability.md): empty --etcd is single node.
  std::string etcd;
  std::string ha_prefix = "/dispatch/default";
  uint64_t lease_ttl_ms = 2000;
  std::string advertise;
  bool rejoin = true;
  // Filled by CheckFlags from the HA flags above.
  ha::HaOptions ha;
};

void DeclareFlags(FlagParser& parser, MainFlags& flags);
// After parsing: checks the combination, resolves what depends on other
// flags (--max-result-bytes 0, HA mode's limits and options) and prints
// what is wrong on stderr. False: exit 2.
bool CheckFlags(MainFlags& flags);

}  // namespace dispatch::reactor
