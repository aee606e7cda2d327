// Fuzz target: the command-line parser every binary uses (common/flag_parser)
// over an argv cut from the input at NUL bytes, with one flag of every kind
// (string, bounded integer, boolean, custom), then the checks the dispatcher
// runs on flag values (log level, listen address). Properties: no crash; a
// refused argv gets InvalidArgument with a message; an integer flag that
// parsed lies within its bounds; Usage() always renders.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/address.h"
#include "common/flag_parser.h"
#include "common/log.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dispatch;
  constexpr size_t kMaxArgs = 64;
  std::vector<std::string> args = {"fuzz"};
  std::string current;
  for (size_t i = 0; i < size && args.size() < kMaxArgs; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (args.size() < kMaxArgs) args.push_back(current);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  std::string listen = "tcp:127.0.0.1:5050";
  std::string log_level = "info";
  uint64_t tick_ms = 100;
  uint64_t budget = 1ull << 28;
  bool flag = false;
  std::vector<std::string> list;
  FlagParser parser("fuzz", "the fuzz target's flags");
  parser.AddString("listen", "ADDRESS", "where to listen", &listen);
  parser.AddString("log-level", "LEVEL", "debug, info, warning or error", &log_level);
  parser.AddUint("tick-ms", "a bounded integer", &tick_ms, 1, 60000);
  parser.AddUint("budget", "a wide integer", &budget, 1ull << 20, 1ull << 44);
  parser.AddBool("flag", "a boolean", &flag);
  parser.AddCustom("list", "A,B", "a comma-separated list", "", [&list](const std::string& v) {
    list.clear();
    size_t start = 0;
    while (true) {
      size_t comma = v.find(',', start);
      std::string item = v.substr(start, comma == std::string::npos ? std::string::npos
                                                                    : comma - start);
      if (item.empty()) return InvalidArgumentError("--list has an empty entry");
      list.push_back(item);
      if (comma == std::string::npos) return Status::Ok();
      start = comma + 1;
    }
  });

  bool help = false;
  std::vector<std::string> positional;
  const bool with_positional = size > 0 && (data[0] & 1) != 0;
  const Status status = parser.Parse(static_cast<int>(args.size()), argv.data(), &help,
                                     with_positional ? &positional : nullptr);
  FUZZ_CHECK(!parser.Usage().empty(), "empty usage");
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == StatusCode::kInvalidArgument && !status.message().empty(), "%s",
               status.ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(tick_ms >= 1 && tick_ms <= 60000, "--tick-ms out of bounds: %llu",
             static_cast<unsigned long long>(tick_ms));
  FUZZ_CHECK(budget >= (1ull << 20) && budget <= (1ull << 44), "--budget out of bounds");
  (void)ParseLogLevel(log_level);
  Result<std::string> address = ToKjAddress(listen);
  if (address.ok()) {
    (void)IsLocalOnlyAddress(listen);
    (void)IsTcpPortZero(listen);
  }
  return 0;
}
