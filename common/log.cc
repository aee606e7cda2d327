#include "common/log.h"

#include <stdio.h>
#include <sys/time.h>
#include <time.h>

#include <kj/debug.h>

#include "common/status.h"

namespace dispatch {
namespace {

LogLevel g_level = LogLevel::kInfo;

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info ";
    case LogLevel::kWarning: return "warn ";
    case LogLevel::kError: return "error";
  }
  return "?";
}

}  // namespace

void SetLogLevel(LogLevel level) {
  g_level = level;
  switch (level) {
    case LogLevel::kDebug:
    case LogLevel::kInfo:
      kj::_::Debug::setLogLevel(kj::LogSeverity::INFO);
      break;
    case LogLevel::kWarning:
      kj::_::Debug::setLogLevel(kj::LogSeverity::WARNING);
      break;
    case LogLevel::kError:
      kj::_::Debug::setLogLevel(kj::LogSeverity::ERROR);
      break;
  }
}

LogLevel GetLogLevel() { return g_level; }

std::optional<LogLevel> ParseLogLevel(const std::string& name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return std::nullopt;
}

LogLevel LevelOfReturnedRpcError(const std::string& text) {
  // The exception's description is "...: failed: NotFound: job 17 ..." (our
  // Status, see rpc_status.cc); look for a code name between two ": ".
  const std::string first_line = text.substr(0, text.find('\n'));
  for (size_t at = first_line.find(": "); at != std::string::npos; at = first_line.find(": ", at + 2)) {
    const size_t end = first_line.find(": ", at + 2);
    if (end == std::string::npos) break;
    auto code = StatusCodeFromName(first_line.substr(at + 2, end - at - 2));
    if (code.has_value()) {
      return *code == StatusCode::kInternal || *code == StatusCode::kDataLoss ? LogLevel::kWarning
                                                                                 : LogLevel::kDebug;
    }
  }
  return LogLevel::kWarning;
}

void KjLogRouter::logMessage(kj::LogSeverity severity, const char* file, int line, int context_depth,
                             kj::String&& text) {
  static constexpr kj::StringPtr kReturned = "returning failure over rpc"_kj;
  if (severity == kj::LogSeverity::INFO && text.startsWith(kReturned)) {
    const std::string message(text.cStr());
    const LogLevel level = LevelOfReturnedRpcError(message);
    if (level < GetLogLevel()) return;
    // One line: the stack that follows is Cap'n Proto's, not the peer's.
    WriteLogLine(level, kj::str("rpc error returned: ", message.substr(0, message.find('\n')).c_str()));
    return;
  }
  next.logMessage(severity, file, line, context_depth, kj::mv(text));
}

void WriteLogLine(LogLevel level, kj::StringPtr message) {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char stamp[32];
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  // One fprintf per line: lines from concurrent processes stay whole.
  fprintf(stderr, "%s.%03ldZ %s %s\n", stamp, static_cast<long>(tv.tv_usec / 1000), LevelName(level),
          message.cStr());
}

}  // namespace dispatch
