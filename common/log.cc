#include "common/log.h"

#include <stdio.h>
#include <sys/time.h>
#include <time.h>

#include <string>

#include <kj/debug.h>

#include "common/status.h"

namespace dispatch {
namespace {

LogLevel g_level = LogLevel::kInfo;
LogFormat g_format = LogFormat::kText;

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info ";
    case LogLevel::kWarning: return "warn ";
    case LogLevel::kError: return "error";
  }
  return "?";
}

// The level's name in the JSON format: the words --log-level takes.
const char* JsonLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

// Length of the valid UTF-8 sequence at `p` (1 to 4), 0 when it is not one
// (overlong forms and surrogates included).
size_t Utf8Length(const unsigned char* p) {
  auto cont = [](unsigned char c) { return (c & 0xC0) == 0x80; };
  if (p[0] < 0x80) return 1;
  if (p[0] >= 0xC2 && p[0] <= 0xDF) return cont(p[1]) ? 2 : 0;
  if (p[0] >= 0xE0 && p[0] <= 0xEF) {
    if (!cont(p[1]) || !cont(p[2])) return 0;
    if (p[0] == 0xE0 && p[1] < 0xA0) return 0;  // overlong
    if (p[0] == 0xED && p[1] >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (p[0] >= 0xF0 && p[0] <= 0xF4) {
    if (!cont(p[1]) || !cont(p[2]) || !cont(p[3])) return 0;
    if (p[0] == 0xF0 && p[1] < 0x90) return 0;  // overlong
    if (p[0] == 0xF4 && p[1] >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

// A JSON string: quotes, backslashes and control characters escaped, and a
// byte that is not valid UTF-8 (a peer's name may hold anything) replaced by
// U+FFFD, so that every line parses whatever the message holds.
void AppendJsonString(std::string& out, const char* text) {
  out += '"';
  const unsigned char* p = reinterpret_cast<const unsigned char*>(text);
  while (*p != 0) {
    const unsigned char c = *p;
    if (c >= 0x80) {
      // The checks stop at the terminating NUL: it is not a continuation byte.
      const size_t n = Utf8Length(p);
      if (n == 0) {
        out += "\\ufffd";
        ++p;
      } else {
        out.append(reinterpret_cast<const char*>(p), n);
        p += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++p;
  }
  out += '"';
}

LogLevel LevelOfKjSeverity(kj::LogSeverity severity) {
  switch (severity) {
    case kj::LogSeverity::DBG: return LogLevel::kDebug;
    case kj::LogSeverity::INFO: return LogLevel::kInfo;
    case kj::LogSeverity::WARNING: return LogLevel::kWarning;
    case kj::LogSeverity::ERROR:
    case kj::LogSeverity::FATAL: return LogLevel::kError;
  }
  return LogLevel::kError;
}

}  // namespace

std::optional<LogFormat> ParseLogFormat(const std::string& name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return std::nullopt;
}

void SetLogFormat(LogFormat format) { g_format = format; }
LogFormat GetLogFormat() { return g_format; }

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
  if (g_format == LogFormat::kJson) {
    const LogLevel level = LevelOfKjSeverity(severity);
    if (level < GetLogLevel()) return;
    std::string message(text.cStr());
    while (!message.empty() && message.back() == '\n') message.pop_back();
    const std::string source = std::string(file) + ":" + std::to_string(line);
    WriteLogLine(level, message.c_str(), source.c_str());
    return;
  }
  next.logMessage(severity, file, line, context_depth, kj::mv(text));
}

std::string FormatLogLine(LogFormat format, const std::string& stamp, LogLevel level,
                          kj::StringPtr message, const char* source) {
  std::string line;
  if (format == LogFormat::kJson) {
    line = "{\"time\":";
    AppendJsonString(line, stamp.c_str());
    line += ",\"level\":";
    AppendJsonString(line, JsonLevelName(level));
    if (source != nullptr) {
      line += ",\"source\":";
      AppendJsonString(line, source);
    }
    line += ",\"message\":";
    AppendJsonString(line, message.cStr());
    line += "}";
    return line;
  }
  line = stamp + " " + LevelName(level) + " ";
  if (source != nullptr) line += std::string(source) + ": ";
  line += message.cStr();
  return line;
}

std::string LogTimestamp() {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char stamp[40];
  const size_t n = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(stamp + n, sizeof(stamp) - n, ".%03ldZ", static_cast<long>(tv.tv_usec / 1000));
  return stamp;
}

void WriteLogLine(LogLevel level, kj::StringPtr message, const char* source) {
  const std::string line = FormatLogLine(g_format, LogTimestamp(), level, message, source) + "\n";
  // One write per line: lines from concurrent processes stay whole.
  fputs(line.c_str(), stderr);
}

}  // namespace dispatch
