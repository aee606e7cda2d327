// Process logging to stderr with a level threshold. Lines look like
// "2026-11-30T14:08:33.123Z info  listening on tcp:127.0.0.1:5050".
// KJ's own KJ_LOG output follows the same threshold (SetLogLevel sets both).
#pragma once

#include <optional>
#include <string>

#include <kj/string.h>

namespace dispatch {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// "debug", "info", "warning", "error"; nullopt otherwise.
std::optional<LogLevel> ParseLogLevel(const std::string& name);
void WriteLogLine(LogLevel level, kj::StringPtr message);

template <typename... Args>
void Log(LogLevel level, Args&&... args) {
  if (level < GetLogLevel()) return;
  WriteLogLine(level, kj::str(kj::fwd<Args>(args)...));
}

}  // namespace dispatch
