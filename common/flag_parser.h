// A small command-line parser shared by every binary (dispatcher,
// dispatch-worker, dispatchctl, dispatch-bench). Flags are declared once with
// their help text and a setter that validates the value, so `--help` always
// documents every flag and a bad value always gets a message naming it.
// Accepts "--name=value" and "--name value"; boolean flags take no value.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace dispatch {

class FlagParser {
 public:
  explicit FlagParser(std::string program, std::string summary)
      : program_(std::move(program)), summary_(std::move(summary)) {}

  void AddString(std::string name, std::string value_name, std::string help, std::string* target);
  void AddUint(std::string name, std::string help, uint64_t* target, uint64_t min = 0,
               uint64_t max = UINT64_MAX);
  void AddBool(std::string name, std::string help, bool* target);
  // A flag whose value is checked by `set` (which names the problem).
  void AddCustom(std::string name, std::string value_name, std::string help, std::string current,
                 std::function<Status(const std::string&)> set);

  // Parses argv[1..]. Non-flag arguments are appended to `positional` when
  // given, an error otherwise. Sets *help_requested on --help / -h.
  Status Parse(int argc, char** argv, bool* help_requested,
               std::vector<std::string>* positional = nullptr);

  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // empty for booleans
    std::string help;
    std::string default_text;
    std::function<Status(const std::string&)> set;
  };
  const Flag* Find(const std::string& name) const;

  std::string program_;
  std::string summary_;
  std::vector<Flag> flags_;
};

// Runs `parser` over argv the way every binary here does: --help prints usage
// to stdout and exits 0; a bad flag prints the error and usage hint to stderr
// and exits 2. Returns only when parsing succeeded.
void ParseFlagsOrExit(FlagParser& parser, int argc, char** argv,
                      std::vector<std::string>* positional = nullptr);

}  // namespace dispatch
