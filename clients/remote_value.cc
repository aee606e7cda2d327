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

Status RemoteValue::Cancel() const {
  if (cell_ == nullptr) return FailedPreconditionError("an empty RemoteValue has no closure");
  if (book_->StatusOf(*cell_) == RemoteValueStatus::kCancelled) return Status::Ok();
  Result<uint64_t> id = book_->WaitForId(*cell_);
  if (!id.ok()) {
    // Never scheduled: refused, or cancelled by a first error before it was.
    if (book_->StatusOf(*cell_) == RemoteValueStatus::kCancelled) return Status::Ok();
    return id.status();
  }
  std::shared_ptr<ClosureCanceller> canceller = book_->canceller();
  if (canceller == nullptr) return UnavailableError("the coordinator is closed");
  Result<RemoteValueStatus> after = canceller->CancelOne(*id);
  if (!after.ok()) return after.status();
  if (*after == RemoteValueStatus::kCancelled) return Status::Ok();
  return FailedPreconditionError("closure " + std::to_string(*id) + " had already " +
                                 (*after == RemoteValueStatus::kReady ? "finished" : "failed") +
                                 ": left as it is, not cancelled");
}

std::vector<uint64_t> RemoteValue::Trace() const {
  return cell_ == nullptr ? std::vector<uint64_t>() : book_->TraceOf(*cell_);
}

Result<std::string> RemoteValue::FetchFor(std::chrono::milliseconds timeout) const {
  if (cell_ == nullptr) return FailedPreconditionError("an empty RemoteValue has no closure");
  return book_->Fetch(*cell_, timeout);
}

bool RemoteValue::coordinator_closed() const { return book_ != nullptr && book_->closed(); }

}  // namespace dispatch::clients
