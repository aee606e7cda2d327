// `dispatchctl read`: reads a dataset of a built-in kind through the service
// (DatasetReader) and prints what it read: element count, bytes and
// throughput, with a progress bar only when stderr is a terminal. Its first
// stdout line names the job and job client ("reading job J as job client C").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/flag_parser.h"

namespace dispatch::clients {

struct ReadFlags {
  std::string mode = "dynamic";
  std::string job_name;
  uint64_t consumers = 0;
  uint64_t consumer_index = 0;
  bool requeue = false;
  uint64_t limit = 0;     // 0: to the end of the sequence
  bool print = false;     // print each element as a line of text
  bool per_task = false;  // print how many elements each task (worker) gave
  uint64_t heartbeat_ms = 1000;
};

// Declares the read flags on dispatchctl's parser.
void DeclareReadFlags(FlagParser& parser, ReadFlags& flags);
// The usage error of `read KIND ARGS...` (empty when fine).
std::string CheckReadArgs(const std::vector<std::string>& args, const ReadFlags& flags);
// Runs the read (opening the job within `open_timeout_ms`); returns the exit
// code (0 ok, 1 the service failed).
int RunRead(const std::string& dispatcher, const std::string& token,
            const std::vector<std::string>& args, const ReadFlags& flags, uint64_t open_timeout_ms);

}  // namespace dispatch::clients
