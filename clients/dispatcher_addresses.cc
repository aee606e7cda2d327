#include "clients/dispatcher_addresses.h"

#include <algorithm>

#include "common/address.h"

namespace dispatch::clients {
namespace {

constexpr char kLeaderIs[] = "not the leader; the leader is ";

std::string Trimmed(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

}  // namespace

Result<std::vector<std::string>> ParseDispatcherAddressList(const std::string& list) {
  std::vector<std::string> addresses;
  size_t start = 0;
  while (true) {
    size_t comma = list.find(',', start);
    std::string entry =
        Trimmed(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    const size_t index = addresses.size() + 1;
    if (entry.empty()) {
      if (index == 1 && comma == std::string::npos) {
        return InvalidArgumentError("no dispatcher address given");
      }
      return InvalidArgumentError("dispatcher address list '" + list + "': entry " +
                                  std::to_string(index) + " is empty");
    }
    if (index > kMaxDispatcherAddresses) {
      return InvalidArgumentError("dispatcher address list '" + list + "' has more than " +
                                  std::to_string(kMaxDispatcherAddresses) + " entries");
    }
    Result<std::string> checked = ToKjAddress(entry);
    if (!checked.ok()) {
      if (comma == std::string::npos && index == 1) return checked.status();  // as for one address
      return InvalidArgumentError("dispatcher address list '" + list + "': entry " +
                                  std::to_string(index) + ": " + checked.status().message());
    }
    addresses.push_back(std::move(entry));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return addresses;
}

std::optional<std::string> LeaderNamedIn(const Status& status) {
  if (status.code() != StatusCode::kUnavailable) return std::nullopt;
  const std::string& message = status.message();
  size_t at = message.find(kLeaderIs);
  if (at == std::string::npos) return std::nullopt;
  std::string leader = message.substr(at + sizeof(kLeaderIs) - 1);
  if (!ToKjAddress(leader).ok()) return std::nullopt;
  return leader;
}

Result<DispatcherAddresses> DispatcherAddresses::Parse(const std::string& list) {
  Result<std::vector<std::string>> parsed = ParseDispatcherAddressList(list);
  if (!parsed.ok()) return parsed.status();
  return DispatcherAddresses(std::move(parsed).value());
}

DispatcherAddresses::DispatcherAddresses(std::vector<std::string> list)
    : state_(std::make_shared<State>()) {
  state_->list = std::move(list);
}

std::vector<std::string> DispatcherAddresses::RoundOrder() const {
  const std::vector<std::string>& list = state_->list;
  auto at = std::find(list.begin(), list.end(), state_->last_worked);
  std::vector<std::string> order;
  order.reserve(list.size() + 1);
  if (at == list.end()) {
    if (!state_->last_worked.empty()) order.push_back(state_->last_worked);
    at = list.begin();
  }
  order.insert(order.end(), at, list.end());
  order.insert(order.end(), list.begin(), at);
  return order;
}

}  // namespace dispatch::clients
