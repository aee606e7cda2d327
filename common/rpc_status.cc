#include "common/rpc_status.h"

#include <string>

namespace dispatch {

kj::Exception ExceptionFromStatus(const Status& status) {
  kj::Exception::Type type = kj::Exception::Type::FAILED;
  if (status.code() == StatusCode::kUnavailable) type = kj::Exception::Type::DISCONNECTED;
  if (status.code() == StatusCode::kResourceExhausted) type = kj::Exception::Type::OVERLOADED;
  return kj::Exception(type, __FILE__, __LINE__, kj::str(status.ToString().c_str()));
}

void ThrowStatus(const Status& status) { kj::throwFatalException(ExceptionFromStatus(status)); }

Status StatusFromException(const kj::Exception& exception) {
  std::string text(exception.getDescription().cStr());
  // Cap'n Proto prefixes exceptions that crossed the wire with "remote exception: ".
  static const std::string kRemote = "remote exception: ";
  if (text.rfind(kRemote, 0) == 0) text = text.substr(kRemote.size());
  size_t colon = text.find(": ");
  if (colon != std::string::npos) {
    if (auto code = StatusCodeFromName(text.substr(0, colon))) {
      return Status(*code, text.substr(colon + 2));
    }
  }
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

}  // namespace dispatch
