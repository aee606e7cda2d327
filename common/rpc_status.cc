#include "common/rpc_status.h"

#include <string>

namespace dispatch {
namespace {

// Cap'n Proto's C++ runtime puts this before the reason of an exception that
// crossed the wire.
constexpr char kRemote[] = "remote exception: ";

// The code named by `text`'s "<CodeName>: " prefix, and where the message
// starts; nullopt without one. "OK" is no error code.
std::optional<std::pair<StatusCode, size_t>> CodePrefix(const std::string& text) {
  size_t colon = text.find(": ");
  if (colon == std::string::npos) return std::nullopt;
  std::optional<StatusCode> code = StatusCodeFromName(text.substr(0, colon));
  if (!code || *code == StatusCode::kOk) return std::nullopt;
  return std::make_pair(*code, colon + 2);
}

// Whether `file` (where an exception was thrown) is Cap'n Proto's code that
// reads a message: its failures (an out-of-bounds pointer, text without its
// NUL, the traversal or nesting limit) are the sender's, not ours.
bool ReadingAMessage(const char* file) {
  const std::string path(file == nullptr ? "" : file);
  for (const char* reader : {"capnp/layout.c++", "capnp/arena.c++", "capnp/message.c++",
                             "capnp/serialize.c++", "capnp/any.c++"}) {
    if (path.find(reader) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

kj::Exception ExceptionFromStatus(const Status& status) {
  kj::Exception::Type type = kj::Exception::Type::FAILED;
  if (status.code() == StatusCode::kUnavailable) type = kj::Exception::Type::DISCONNECTED;
  if (status.code() == StatusCode::kResourceExhausted) type = kj::Exception::Type::OVERLOADED;
  return kj::Exception(type, __FILE__, __LINE__, kj::str(status.ToString().c_str()));
}

void ThrowStatus(const Status& status) { kj::throwFatalException(ExceptionFromStatus(status)); }

Status StatusFromException(const kj::Exception& exception) {
  std::string text(exception.getDescription().cStr());
  if (text.rfind(kRemote, 0) == 0) text = text.substr(sizeof(kRemote) - 1);
  if (auto prefix = CodePrefix(text)) return Status(prefix->first, text.substr(prefix->second));
  switch (exception.getType()) {
    case kj::Exception::Type::DISCONNECTED:
      return UnavailableError(text);
    case kj::Exception::Type::OVERLOADED:
      return ResourceExhaustedError(text);
    case kj::Exception::Type::UNIMPLEMENTED:
      return InvalidArgumentError(text);
    default:
      return InternalError(text);
  }
}

kj::Exception ExceptionForPeer(kj::Exception exception) {
  if (exception.getType() == kj::Exception::Type::UNIMPLEMENTED) return exception;
  const std::string text(exception.getDescription().cStr());
  if (CodePrefix(text)) return exception;
  if (exception.getType() == kj::Exception::Type::FAILED && ReadingAMessage(exception.getFile())) {
    return ExceptionFromStatus(InvalidArgumentError("the message is malformed: " + text));
  }
  return ExceptionFromStatus(StatusFromException(exception));
}

}  // namespace dispatch
