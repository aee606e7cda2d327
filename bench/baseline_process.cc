#include "bench/baseline_process.h"

#include <chrono>
#include <stdexcept>
#include <vector>

namespace dispatch::bench {

std::unique_ptr<testing::Subprocess> StartBaseline(std::string* address) {
  auto process =
      std::make_unique<testing::Subprocess>(std::vector<std::string>{DISPATCH_BASELINE_BINARY});
  auto line = process->ReadLine(std::chrono::seconds(30));
  static const std::string kPrefix = "baseline listening on ";
  if (!line || line->rfind(kPrefix, 0) != 0) throw std::runtime_error("baseline server did not start");
  *address = line->substr(kPrefix.size());
  return process;
}

}  // namespace dispatch::bench
