// `dispatchctl backup --to DIR`: asks the dispatcher to copy its work dir
// into DIR while it serves (Dispatcher.backup) and waits for the copy to be
// complete and synced. DIR is made absolute against this command's current
// directory: the dispatcher writes it, so it must be a path on the
// dispatcher's machine. Prints what the copy holds, or with --json the
// reply in capnp's JSON encoding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/flag_parser.h"

namespace dispatch::clients {

struct BackupFlags {
  std::string to;
};

void DeclareBackupFlags(FlagParser& parser, BackupFlags& flags);
// The usage error of `backup` (empty when fine).
std::string CheckBackupArgs(const std::vector<std::string>& args, const BackupFlags& flags);
// Runs `backup`; returns the exit code (0 done, 1 refused or failed, the
// dispatcher's message on stderr).
int RunBackup(const std::string& dispatcher, const std::string& token, const BackupFlags& flags,
              bool json, uint64_t timeout_ms);

}  // namespace dispatch::clients
