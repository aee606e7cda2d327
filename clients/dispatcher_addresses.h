// Dispatcher address lists: "tcp:H1:P1,tcp:H2:P2,unix:PATH", the form every
// client takes wherever it takes one dispatcher address, so it can follow the
// leader of an HA group (docs/high_availability.md §8). One address is a list
// of one. DispatcherAddresses also remembers the address that last accepted
// a connection (possibly one a standby named, outside the list), so the next
// round of attempts starts there. A handle: copies share that memory; used on
// one loop thread only.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace dispatch::clients {

// More than this many entries in one list is refused (a list is typed by a
// person or a script, and every round may try each entry).
inline constexpr size_t kMaxDispatcherAddresses = 64;

// Splits `list` on commas, trims spaces around each entry and checks each as
// ToKjAddress does. InvalidArgument naming the list and the entry for an
// empty list, an empty entry ("a,,b", a trailing comma), a malformed entry
// or more than kMaxDispatcherAddresses entries. (A Unix socket path with a
// comma cannot be written in a list.)
Result<std::vector<std::string>> ParseDispatcherAddressList(const std::string& list);

// The leader a standby named in its refusal: "not the leader; the leader is
// ADDRESS" (PROTOCOL.md, Errors: ADDRESS runs from the first "the leader is "
// to the end of the message). nullopt for any other status, for "no leader is
// known yet", and for a named address that is not a valid address.
std::optional<std::string> LeaderNamedIn(const Status& status);

class DispatcherAddresses {
 public:
  static Result<DispatcherAddresses> Parse(const std::string& list);

  const std::vector<std::string>& list() const { return state_->list; }
  // The addresses in the order the next round tries them: the one that last
  // accepted first (put in front when it is not in the list), then the list
  // from there on, wrapping around.
  std::vector<std::string> RoundOrder() const;
  // `address` accepted a connection: the next round starts there.
  void Worked(const std::string& address) const { state_->last_worked = address; }
  const std::string& last_worked() const { return state_->last_worked; }

 private:
  struct State {
    std::vector<std::string> list;
    std::string last_worked;
  };
  explicit DispatcherAddresses(std::vector<std::string> list);

  std::shared_ptr<State> state_;
};

}  // namespace dispatch::clients
