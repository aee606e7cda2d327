#include "reactor/etcd/endpoints.h"

namespace dispatch::etcd {

Result<std::vector<std::string>> ParseEndpoints(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.rfind("http://", 0) != 0 || item.size() <= 7) {
      return InvalidArgumentError("--etcd entries must be http://HOST:PORT, got '" + item +
                                  "' in '" + list + "'");
    }
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace dispatch::etcd
