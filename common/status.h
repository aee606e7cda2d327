// Status and Result<T>: how errors cross module boundaries (state, storage,
// reactor, clients). A Status is either ok or a code plus a message that names
// the thing involved ("job 17 has no split provider 2"). reactor/rpc_status.h
// is the one place that maps a Status to a kj::Exception at the RPC edge.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace dispatch {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kResourceExhausted,
  kUnavailable,
  kDataLoss,
  kInternal,
  kUnauthenticated,
  kCancelled,
  kDeadlineExceeded,
};

// "InvalidArgument", "NotFound", ... ; stable, used on the wire and in logs.
const char* StatusCodeName(StatusCode code);
// The inverse of StatusCodeName; nullopt for an unknown name.
std::optional<StatusCode> StatusCodeFromName(const std::string& name);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NotFound: job 17 is unknown"; "OK" when ok.
  std::string ToString() const;

  bool operator==(const Status& other) const = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status FailedPreconditionError(std::string message);
Status ResourceExhaustedError(std::string message);
Status UnavailableError(std::string message);
Status DataLossError(std::string message);
Status InternalError(std::string message);
Status UnauthenticatedError(std::string message);
Status CancelledError(std::string message);
Status DeadlineExceededError(std::string message);

// A value or the Status that explains why there is none. Never holds an ok
// Status without a value.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : data_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(data_).ok()) {
      data_ = Status(StatusCode::kInternal, "Result built from an ok Status without a value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(data_);
  }
  // REQUIRES: ok()
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace dispatch

// Returns early from a function returning Status or Result<T> when `expr`
// (a Status) is not ok.
#define DISPATCH_RETURN_IF_ERROR(expr)            \
  do {                                            \
    ::dispatch::Status dispatch_status_ = (expr); \
    if (!dispatch_status_.ok()) return dispatch_status_; \
  } while (0)
