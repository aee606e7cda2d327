#include "common/flag_parser.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace dispatch {

void FlagParser::AddString(std::string name, std::string value_name, std::string help,
                           std::string* target) {
  flags_.push_back({std::move(name), std::move(value_name), std::move(help), *target,
                    [target](const std::string& v) {
                      *target = v;
                      return Status::Ok();
                    }});
}

void FlagParser::AddUint(std::string name, std::string help, uint64_t* target, uint64_t min,
                         uint64_t max) {
  std::string flag_name = name;
  flags_.push_back({std::move(name), "N", std::move(help), std::to_string(*target),
                    [target, min, max, flag_name](const std::string& v) {
                      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) {
                        return InvalidArgumentError("--" + flag_name + " wants a non-negative integer, got '" + v + "'");
                      }
                      errno = 0;
                      unsigned long long parsed = std::strtoull(v.c_str(), nullptr, 10);
                      if (errno == ERANGE || parsed < min || parsed > max) {
                        return InvalidArgumentError("--" + flag_name + " must be between " + std::to_string(min) +
                                                    " and " + std::to_string(max) + ", got " + v);
                      }
                      *target = parsed;
                      return Status::Ok();
                    }});
}

void FlagParser::AddBool(std::string name, std::string help, bool* target) {
  flags_.push_back({std::move(name), "", std::move(help), *target ? "true" : "false",
                    [target](const std::string& v) {
                      if (v.empty() || v == "true" || v == "1") {
                        *target = true;
                      } else if (v == "false" || v == "0") {
                        *target = false;
                      } else {
                        return InvalidArgumentError("a boolean flag takes true or false, got '" + v + "'");
                      }
                      return Status::Ok();
                    }});
}

void FlagParser::AddCustom(std::string name, std::string value_name, std::string help,
                           std::string current, std::function<Status(const std::string&)> set) {
  flags_.push_back({std::move(name), std::move(value_name), std::move(help), std::move(current),
                    std::move(set)});
}

const FlagParser::Flag* FlagParser::Find(const std::string& name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

Status FlagParser::Parse(int argc, char** argv, bool* help_requested,
                         std::vector<std::string>* positional) {
  *help_requested = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      *help_requested = true;
      return Status::Ok();
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      if (positional == nullptr) return InvalidArgumentError("unexpected argument '" + arg + "'");
      positional->push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) return InvalidArgumentError("unknown flag '--" + name + "'");
    if (!has_value && !flag->value_name.empty()) {
      if (i + 1 >= argc) return InvalidArgumentError("flag '--" + name + "' needs a value");
      value = argv[++i];
    }
    Status status = flag->set(value);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

std::string FlagParser::Usage() const {
  std::string out = "usage: " + program_ + " [flags]\n\n" + summary_ + "\n\nflags:\n";
  for (const Flag& flag : flags_) {
    std::string head = "  --" + flag.name + (flag.value_name.empty() ? "" : "=" + flag.value_name);
    out += head + "\n      " + flag.help;
    if (!flag.default_text.empty()) out += " (default: " + flag.default_text + ")";
    out += "\n";
  }
  out += "  --help\n      print this help and exit\n";
  return out;
}

void ParseFlagsOrExit(FlagParser& parser, int argc, char** argv,
                      std::vector<std::string>* positional) {
  bool help = false;
  Status status = parser.Parse(argc, argv, &help, positional);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\nrun with --help to list the flags\n", argv[0],
                 status.message().c_str());
    std::exit(2);
  }
  if (help) {
    std::fputs(parser.Usage().c_str(), stdout);
    std::exit(0);
  }
}

}  // namespace dispatch
