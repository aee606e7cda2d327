// A libFuzzer-compatible driver for builds without libFuzzer (g++): replays
// every file named on the command line, and every file under each directory
// named (recursively, in name order), through LLVMFuzzerTestOneInput once.
// "--optional=PATH" names a path that may be missing (a target's regression
// inputs before its first crash).
// ctest runs it over a target's seed corpus and its regression inputs, so
// the inputs that once crashed stay fixed in the default build. Exits 1 when
// an argument is missing or nothing was replayed (a test that runs no input
// must not pass); a failing input aborts inside the target, naming itself.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

std::vector<std::filesystem::path> InputsUnder(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> out;
  if (std::filesystem::is_directory(root)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      if (entry.is_regular_file()) out.push_back(entry.path());
    }
    std::sort(out.begin(), out.end());
  } else if (std::filesystem::is_regular_file(root)) {
    out.push_back(root);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    const std::string optional_flag = "--optional=";
    const bool optional = arg.rfind(optional_flag, 0) == 0;
    if (optional) arg = arg.substr(optional_flag.size());
    if (!std::filesystem::exists(arg)) {
      if (optional) continue;
      std::fprintf(stderr, "replay: %s does not exist\n", arg.c_str());
      return 1;
    }
    for (const auto& path : InputsUnder(arg)) {
      std::ifstream in(path, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) {
        std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
        return 1;
      }
      std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "replay: no input replayed\n");
    return 1;
  }
  std::fprintf(stderr, "replay: %zu inputs, all passed\n", replayed);
  return 0;
}
