// Process logging to stderr with a level threshold. Lines look like
// "2026-11-30T14:08:33.123Z info  listening on tcp:127.0.0.1:5050", or, in
// the JSON format (for log shippers), one object per line:
// {"time":"2026-11-30T14:08:33.123Z","level":"info","message":"listening on ..."}.
// KJ's own KJ_LOG output follows the same threshold (SetLogLevel sets both)
// and, through KjLogRouter, the same format.
#pragma once

#include <optional>
#include <string>

#include <kj/exception.h>
#include <kj/string.h>

namespace dispatch {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// "debug", "info", "warning", "error"; nullopt otherwise.
std::optional<LogLevel> ParseLogLevel(const std::string& name);
// "text", "json"; nullopt otherwise.
std::optional<LogFormat> ParseLogFormat(const std::string& name);
void SetLogFormat(LogFormat format);
LogFormat GetLogFormat();
// One line on stderr in the current format. `source` ("file.c++:123", for
// KJ's lines) is a field of the JSON format and a prefix of the message in
// the text one; null: none.
void WriteLogLine(LogLevel level, kj::StringPtr message, const char* source = nullptr);
// Now, as every log line is stamped: UTC with milliseconds,
// "2026-12-02T11:12:12.635Z".
std::string LogTimestamp();
// The line WriteLogLine writes, without its newline, for `stamp` (ISO 8601,
// UTC, milliseconds). For tests.
std::string FormatLogLine(LogFormat format, const std::string& stamp, LogLevel level,
                          kj::StringPtr message, const char* source = nullptr);
// Routes the log lines of KJ and Cap'n Proto (KJ_LOG) on the thread that
// constructs it through this log. Cap'n Proto logs every error a server
// returns over RPC at INFO, with a stack trace; an error that carries one of
// our Status codes (NotFound, ...) is the peer's business, so it goes to
// debug as one line without the stack. An error without a code (a bug of
// ours, an Internal or DataLoss) stays visible at warning. Everything else
// KJ logs goes on to the previous callback unchanged in the text format, and
// becomes one of our lines (its file and line as `source`) in the JSON one.
// REQUIRES: constructed and destroyed on one thread (KJ callbacks nest).
class KjLogRouter : public kj::ExceptionCallback {
 public:
  void logMessage(kj::LogSeverity severity, const char* file, int line, int context_depth,
                  kj::String&& text) override;
};

// For KjLogRouter and its test: the level at which an error returned over RPC
// (the text of Cap'n Proto's "returning failure over rpc" line) is logged, and
// that text cut to its first line.
LogLevel LevelOfReturnedRpcError(const std::string& text);

template <typename... Args>
void Log(LogLevel level, Args&&... args) {
  if (level < GetLogLevel()) return;
  WriteLogLine(level, kj::str(kj::fwd<Args>(args)...));
}

}  // namespace dispatch
