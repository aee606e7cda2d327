// DispatcherService::backup: `dispatchctl backup`. The work is the durable
// state's (OnlineBackup); the handler only checks that the dispatcher
// serves, waits for the copy, and, like every reply, for the pass's commit.
#include "reactor/dispatcher_server.h"
#include "reactor/service_util.h"
#include "reactor/services.h"

namespace dispatch::reactor {

kj::Promise<void> DispatcherService::backup(BackupContext context) {
  (void)data();  // Unavailable while shutting down
  DurableState& durable = server_.durable();
  const uint64_t incarnation = server_.incarnation();
  const std::string target(View(context.getParams().getTargetDir()));
  return durable.Backup(target).then(
      [context, &durable, incarnation](Result<BackupOutcome> outcome) mutable -> kj::Promise<void> {
        ThrowIfError(outcome.status());
        auto results = context.getResults();
        results.setLastRecord(outcome->last_seq);
        results.setDatabaseBytes(outcome->database_bytes);
        results.setFilesLinked(static_cast<uint32_t>(outcome->files_linked));
        results.setFilesCopied(static_cast<uint32_t>(outcome->files_copied));
        results.setIncarnation(incarnation);
        return durable.pipeline().Barrier();
      });
}

}  // namespace dispatch::reactor
