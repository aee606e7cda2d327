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

}  // namespace dispatch
