#include "clients/remote_value.h"

#include "clients/closure_book.h"

namespace dispatch::clients {

uint64_t RemoteValue::closure_id() const { return cell_ == nullptr ? 0 : book_->IdOf(*cell_); }

RemoteValueStatus RemoteValue::status() const {
  return cell_ == nullptr ? RemoteValueStatus::kCancelled : book_->StatusOf(*cell_);
}

Result<std::string> RemoteValue::Fetch() const {
  if (cell_ == nullptr) return FailedPreconditionError("an empty RemoteValue has no closure");
  return book_->Fetch(*cell_, std::nullopt);
}

Result<std::string> RemoteValue::FetchFor(std::chrono::milliseconds timeout) const {
  if (cell_ == nullptr) return FailedPreconditionError("an empty RemoteValue has no closure");
  return book_->Fetch(*cell_, timeout);
}

}  // namespace dispatch::clients
