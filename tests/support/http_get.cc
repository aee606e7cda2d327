#include "tests/support/http_get.h"

#include <poll.h>
#include <sys/socket.h>

#include <cctype>
#include <stdexcept>

#include <optional>
#include <sstream>

#include "tests/support/raw_socket.h"

namespace dispatch::testing {

double MetricSample(const std::string& page, const std::string& name) {
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

std::string HttpTcpAddress(const std::string& base) {
  static const std::string kScheme = "http://";
  if (base.rfind(kScheme, 0) != 0) throw std::runtime_error("not an http:// URL: " + base);
  std::string host_port = base.substr(kScheme.size());
  if (size_t slash = host_port.find('/'); slash != std::string::npos) host_port.resize(slash);
  return "tcp:" + host_port;
}

HttpResponse HttpGet(const std::string& base, const std::string& path, const std::string& bearer,
                     std::chrono::milliseconds timeout) {
  HttpResponse response;
  RawSocket socket(HttpTcpAddress(base));
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n";
  if (!bearer.empty()) request += "Authorization: Bearer " + bearer + "\r\n";
  request += "\r\n";
  if (!socket.WriteAll(request.data(), request.size())) return response;
  // Until the head and Content-Length bytes of body arrived, or the peer
  // closed (KJ keeps a connection open for a next request).
  auto all = std::make_optional<std::string>();
  const auto until = std::chrono::steady_clock::now() + timeout;
  size_t head_end = std::string::npos;
  while (true) {
    head_end = all->find("\r\n\r\n");
    if (head_end != std::string::npos) {
      std::string head = all->substr(0, head_end);
      for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t at = head.find("\r\ncontent-length:");
      if (at != std::string::npos &&
          all->size() >= head_end + 4 + std::stoull(head.substr(at + 17))) {
        break;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return response;
    struct pollfd p = {socket.fd(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buffer[65536];
    ssize_t n = recv(socket.fd(), buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    all->append(buffer, static_cast<size_t>(n));
  }
  if (head_end == std::string::npos || all->rfind("HTTP/1.1 ", 0) != 0) return response;
  response.status = std::stoi(all->substr(9, 3));
  size_t line = all->find("\r\n") + 2;
  while (line < head_end) {
    size_t next = all->find("\r\n", line);
    std::string header = all->substr(line, next - line);
    size_t colon = header.find(':');
    if (colon != std::string::npos) {
      std::string name = header.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t value = header.find_first_not_of(' ', colon + 1);
      response.headers[name] = value == std::string::npos ? "" : header.substr(value);
    }
    line = next + 2;
  }
  response.body = all->substr(head_end + 4);
  return response;
}

}  // namespace dispatch::testing
