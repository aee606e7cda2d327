// HttpGet: one HTTP/1.1 GET over a RawSocket ("Connection: close"), for tests
// of the dispatcher's HTTP endpoints. Waits with a deadline, never a sleep.
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace dispatch::testing {

struct HttpResponse {
  int status = 0;  // 0: no response (connection failed or closed early)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// `base` is "http://HOST:PORT/" as the dispatcher prints it; `path` starts
// with '/'. An empty `bearer` sends no Authorization header.
HttpResponse HttpGet(const std::string& base, const std::string& path, const std::string& bearer = "",
                     std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The value of an unlabelled sample `name` in a /metrics page (Prometheus
// text); -1 when absent.
double MetricSample(const std::string& page, const std::string& name);

// "http://127.0.0.1:8050/" -> "tcp:127.0.0.1:8050" (for RawSocket).
std::string HttpTcpAddress(const std::string& base);

}  // namespace dispatch::testing
