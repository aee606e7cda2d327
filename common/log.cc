#include "common/log.h"

#include <stdio.h>
#include <sys/time.h>
#include <time.h>

#include <kj/debug.h>

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
