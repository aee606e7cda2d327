#include "common/status.h"

#include <array>

namespace dispatch {
namespace {

struct CodeName {
  StatusCode code;
  const char* name;
};

constexpr std::array<CodeName, 12> kNames = {{
    {StatusCode::kOk, "OK"},
    {StatusCode::kInvalidArgument, "InvalidArgument"},
    {StatusCode::kNotFound, "NotFound"},
    {StatusCode::kAlreadyExists, "AlreadyExists"},
    {StatusCode::kFailedPrecondition, "FailedPrecondition"},
    {StatusCode::kResourceExhausted, "ResourceExhausted"},
    {StatusCode::kUnavailable, "Unavailable"},
    {StatusCode::kDataLoss, "DataLoss"},
    {StatusCode::kInternal, "Internal"},
    {StatusCode::kUnauthenticated, "Unauthenticated"},
    {StatusCode::kCancelled, "Cancelled"},
    {StatusCode::kDeadlineExceeded, "DeadlineExceeded"},
}};

}  // namespace

const char* StatusCodeName(StatusCode code) {
  for (const CodeName& entry : kNames) {
    if (entry.code == code) return entry.name;
  }
  return "Unknown";
}

std::optional<StatusCode> StatusCodeFromName(const std::string& name) {
  for (const CodeName& entry : kNames) {
    if (name == entry.name) return entry.code;
  }
  return std::nullopt;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status InvalidArgumentError(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status AlreadyExistsError(std::string m) { return Status(StatusCode::kAlreadyExists, std::move(m)); }
Status FailedPreconditionError(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
Status ResourceExhaustedError(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }
Status UnavailableError(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status UnauthenticatedError(std::string m) { return Status(StatusCode::kUnauthenticated, std::move(m)); }
Status CancelledError(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }
Status DeadlineExceededError(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}

}  // namespace dispatch
