#include "clients/dispatchctl_backup.h"

#include <capnp/compat/json.h>
#include <stdio.h>

#include <filesystem>

#include "clients/dispatchctl_connect.h"

namespace dispatch::clients {

void DeclareBackupFlags(FlagParser& parser, BackupFlags& flags) {
  parser.AddString("to", "DIR",
                   "backup: the directory to write the copy into (new or empty; on the "
                   "dispatcher's machine, relative to this command's current directory)",
                   &flags.to);
}

std::string CheckBackupArgs(const std::vector<std::string>& args, const BackupFlags& flags) {
  if (args.size() != 1) return "'backup' takes no argument; name the directory with --to=DIR";
  if (flags.to.empty()) return "'backup' needs --to=DIR";
  return "";
}

int RunBackup(const std::string& dispatcher, const std::string& token, const BackupFlags& flags,
              bool json, uint64_t timeout_ms) {
  std::error_code ec;
  const std::string target = std::filesystem::absolute(flags.to, ec).lexically_normal().string();
  if (ec) {
    fprintf(stderr, "dispatchctl: cannot make %s an absolute path: %s\n", flags.to.c_str(),
            ec.message().c_str());
    return 1;
  }
  std::string output;
  const int rc = RunCommandOnLoop([&](uvkj::UvAsyncIo& io) {
    auto work =
        ConnectForCommand(io.network(), dispatcher, token)
            .then([&](kj::Own<DispatcherConnection> connection) {
              auto request = connection->dispatcher().backupRequest();
              request.setTargetDir(target);
              return request.send()
                  .then([&](capnp::Response<rpc::Dispatcher::BackupResults> r) {
                    if (json) {
                      capnp::JsonCodec codec;
                      codec.setPrettyPrint(true);
                      return std::string(
                                 codec.encode(rpc::Dispatcher::BackupResults::Reader(r)).cStr()) +
                             "\n";
                    }
                    return "backup written to " + target + ": journal up to record " +
                           std::to_string(r.getLastRecord()) + ", " +
                           std::to_string(r.getDatabaseBytes()) + " bytes of database, " +
                           std::to_string(r.getFilesLinked()) + " files linked, " +
                           std::to_string(r.getFilesCopied()) + " copied\n";
                  })
                  .attach(kj::mv(connection));
            });
    output = io.timer().timeoutAfter(timeout_ms * kj::MILLISECONDS, kj::mv(work)).wait(io.wait_scope());
  });
  if (rc == 0) fputs(output.c_str(), stdout);
  return rc;
}

}  // namespace dispatch::clients
