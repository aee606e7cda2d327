#include "clients/builtin_functions.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

namespace dispatch::clients {

const char kBuiltinFunctionsHelp[] =
    "Closure functions (run when --max-closures > 0):\n"
    "  noop           returns an empty result\n"
    "  echo           returns its args\n"
    "  sleep          args = milliseconds (decimal); sleeps that long on an executor thread\n"
    "                 and returns this worker's --address\n"
    "  fail           fails with a user error whose message is its args\n"
    "  append         args = PATH:TEXT; appends the line TEXT to PATH and returns TEXT (the\n"
    "                 order closures ran in, for tests)\n"
    "  crash          kills this worker process at once (SIGKILL), as a worker dying\n"
    "                 mid-closure would\n"
    "  transient      fails with a transient error (args: the message)\n"
    "  flaky          args = N:PATH; appends a line to PATH and fails transiently while PATH\n"
    "                 has at most N lines, then returns \"ok after N\"\n"
    "  unavailable    reports this worker unavailable (args: the message)\n"
    "  make_resource  a per-worker resource builder: returns \"ARGS@ADDRESS#PID\"\n"
    "  log_resource   a per-worker resource builder: appends \"ADDRESS#PID\" to the file\n"
    "                 ARGS (a line per build) and returns it\n"
    "  use_resource   returns the per-worker components it received, joined by ';'\n"
    "  bytes          args = N or N:SEED; returns N bytes (at most 1 GiB) of a pattern\n"
    "                 fixed by SEED (for tests of large results)\n"
    "  sum            args and each input result are signed decimals (empty: 0); returns\n"
    "                 their sum in decimal (for dependency chains: --after)\n"
    "  concat         returns its inputs' results, then its args, concatenated\n";

namespace {

Result<uint64_t> ParseDecimal(std::string_view text, const char* what) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || s[0] == '-') {
    return InvalidArgumentError(std::string(what) + " must be a decimal number, got '" + s + "'");
  }
  return static_cast<uint64_t>(v);
}

ClosureOutput Sleep(const ClosureCall& call) {
  Result<uint64_t> ms = ParseDecimal(call.args(), "sleep's args (milliseconds)");
  if (!ms.ok()) return ClosureOutput::UserError(ms.status().message());
  if (*ms > 24ull * 3600 * 1000) {
    return ClosureOutput::UserError("sleep's args must be at most a day of milliseconds");
  }
  if (!call.SleepFor(std::chrono::milliseconds(*ms))) {
    // Cancelled: the dispatcher ignores whatever comes back.
    if (call.cancelled()) return ClosureOutput::UserError("sleep was cancelled");
    return ClosureOutput::Unavailable("the worker is stopping");
  }
  return ClosureOutput::Result(call.worker_address());
}

ClosureOutput Append(const ClosureCall& call) {
  std::string args(call.args());
  const size_t colon = args.find(':');
  if (colon == std::string::npos) return ClosureOutput::UserError("append's args must be PATH:TEXT");
  std::string text = args.substr(colon + 1);
  std::ofstream out(args.substr(0, colon), std::ios::app);
  out << text << "\n";
  out.flush();
  if (!out) return ClosureOutput::UserError("append cannot append to " + args.substr(0, colon));
  return ClosureOutput::Result(std::move(text));
}

ClosureOutput Flaky(const ClosureCall& call) {
  std::string args(call.args());
  size_t colon = args.find(':');
  if (colon == std::string::npos) return ClosureOutput::UserError("flaky's args must be N:PATH");
  Result<uint64_t> n = ParseDecimal(std::string_view(args).substr(0, colon), "flaky's N");
  if (!n.ok()) return ClosureOutput::UserError(n.status().message());
  std::string path = args.substr(colon + 1);
  {
    std::ofstream out(path, std::ios::app);
    out << call.worker_address() << "\n";
    if (!out) return ClosureOutput::UserError("flaky cannot append to " + path);
  }
  std::ifstream in(path);
  uint64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  if (lines <= *n) {
    return ClosureOutput::TransientError("flaky: call " + std::to_string(lines) + " of " +
                                         std::to_string(*n) + " fails");
  }
  return ClosureOutput::Result("ok after " + std::to_string(*n));
}

ClosureOutput LogResource(const ClosureCall& call) {
  std::string path(call.args());
  std::string line = call.worker_address() + "#" + std::to_string(getpid());
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
  if (!out) return ClosureOutput::UserError("log_resource cannot append to " + path);
  return ClosureOutput::Result(line);
}

ClosureOutput UseResource(const ClosureCall& call) {
  std::string joined;
  for (size_t i = 0; i < call.resources().size(); ++i) {
    if (i > 0) joined += ";";
    joined += call.resources()[i];
  }
  return ClosureOutput::Result(joined);
}

ClosureOutput Bytes(const ClosureCall& call) {
  std::string_view args = call.args();
  const size_t colon = args.find(':');
  Result<uint64_t> n = ParseDecimal(args.substr(0, colon), "bytes's N");
  if (!n.ok()) return ClosureOutput::UserError(n.status().message());
  uint64_t seed = 0;
  if (colon != std::string_view::npos) {
    Result<uint64_t> parsed = ParseDecimal(args.substr(colon + 1), "bytes's SEED");
    if (!parsed.ok()) return ClosureOutput::UserError(parsed.status().message());
    seed = *parsed;
  }
  if (*n > (1ull << 30)) return ClosureOutput::UserError("bytes's N must be at most 1 GiB");
  return ClosureOutput::Result(PatternBytes(*n, seed));
}

// The sum of args and the inputs, each a signed decimal (empty counts as 0).
ClosureOutput Sum(const ClosureCall& call) {
  int64_t total = 0;
  auto add = [&total](std::string_view text, const char* what) -> bool {
    if (text.empty()) return true;
    const bool negative = text.front() == '-';
    Result<uint64_t> n = ParseDecimal(negative ? text.substr(1) : text, what);
    if (!n.ok() || *n > static_cast<uint64_t>(INT64_MAX)) return false;
    const int64_t term = negative ? -static_cast<int64_t>(*n) : static_cast<int64_t>(*n);
    return !__builtin_add_overflow(total, term, &total);
  };
  if (!add(call.args(), "sum's args"))
    return ClosureOutput::UserError("sum's args must be a signed decimal number (in range)");
  for (size_t i = 0; i < call.inputs().size(); ++i) {
    if (!add(call.inputs()[i], "sum's input")) {
      return ClosureOutput::UserError("sum's input " + std::to_string(i) +
                                      " is not a signed decimal number (or the sum overflows)");
    }
  }
  return ClosureOutput::Result(std::to_string(total));
}

ClosureOutput Concat(const ClosureCall& call) {
  std::string out;
  for (const std::string& input : call.inputs()) out += input;
  out += call.args();
  return ClosureOutput::Result(std::move(out));
}

}  // namespace

Status RegisterBuiltinFunctions(WorkerAgent& agent) {
  ClosureFunctionOptions inline_options;
  inline_options.run_inline = true;
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction(
      "noop", [](const ClosureCall&) { return ClosureOutput::Result(""); }, inline_options));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction(
      "echo",
      [](const ClosureCall& call) { return ClosureOutput::Result(std::string(call.args())); },
      inline_options));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("sleep", Sleep));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction(
      "fail",
      [](const ClosureCall& call) { return ClosureOutput::UserError(std::string(call.args())); },
      inline_options));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("crash", [](const ClosureCall&) {
    kill(getpid(), SIGKILL);
    _exit(137);  // not reached
    return ClosureOutput::Result("");
  }));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction(
      "transient",
      [](const ClosureCall& call) {
        return ClosureOutput::TransientError(std::string(call.args()));
      },
      inline_options));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("flaky", Flaky));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("append", Append));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction(
      "unavailable",
      [](const ClosureCall& call) { return ClosureOutput::Unavailable(std::string(call.args())); },
      inline_options));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("make_resource", [](const ClosureCall& call) {
    return ClosureOutput::Result(std::string(call.args()) + "@" + call.worker_address() + "#" +
                                 std::to_string(getpid()));
  }));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("log_resource", LogResource));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("use_resource", UseResource, inline_options));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("bytes", Bytes));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("sum", Sum, inline_options));
  DISPATCH_RETURN_IF_ERROR(agent.RegisterFunction("concat", Concat, inline_options));
  return Status::Ok();
}

}  // namespace dispatch::clients
