#include "common/address.h"

#include <sys/un.h>

namespace dispatch {

Result<std::string> ToKjAddress(const std::string& address) {
  if (address.rfind("tcp:", 0) == 0) {
    std::string rest = address.substr(4);
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size() ||
        rest.find_first_not_of("0123456789", colon + 1) != std::string::npos ||
        rest.size() - colon - 1 > 5 || std::stoul(rest.substr(colon + 1)) > 65535) {
      return InvalidArgumentError("address '" + address + "' is not tcp:HOST:PORT");
    }
    return rest;
  }
  if (address.rfind("unix:", 0) == 0) {
    std::string path = address.substr(5);
    if (path.empty()) return InvalidArgumentError("address '" + address + "' has no path");
    if (path.size() >= sizeof(sockaddr_un::sun_path)) {
      return InvalidArgumentError("unix socket path is longer than " +
                                  std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                                  " bytes: " + path);
    }
    return address;
  }
  return InvalidArgumentError("address '" + address + "' must start with tcp: or unix:");
}

bool IsLocalOnlyAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  if (address.rfind("tcp:", 0) != 0) return false;
  std::string host = address.substr(4, address.rfind(':') - 4);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8 written as a dotted quad: digits and dots only.
  return host.rfind("127.", 0) == 0 && host.find_first_not_of("0123456789.") == std::string::npos;
}

bool IsTcpPortZero(const std::string& address) {
  Result<std::string> kj_address = ToKjAddress(address);
  if (!kj_address.ok() || address.rfind("tcp:", 0) != 0) return false;
  return std::stoul(kj_address->substr(kj_address->rfind(':') + 1)) == 0;
}

}  // namespace dispatch
