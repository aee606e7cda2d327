// `dispatch-bench python`: runs bench/python_closures.py (Python closures and
// reads beside Dask and the C++ reader) with Debian's python3, passing the
// flags on. The script can run on its own too.
#include <unistd.h>

#include <string>
#include <vector>

#include "bench/registry.h"

namespace dispatch::bench {
namespace {

int RunPythonBench(int argc, char** argv) {
  std::vector<std::string> args = {"/usr/bin/python3", DISPATCH_PYTHON_BENCH_SCRIPT,
                                   "--build-dir", DISPATCH_BUILD_DIR};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> exec_args;
  for (std::string& a : args) exec_args.push_back(a.data());
  exec_args.push_back(nullptr);
  execv(exec_args[0], exec_args.data());
  perror("dispatch-bench python: cannot run /usr/bin/python3");
  return 1;
}

}  // namespace

DISPATCH_BENCH("python",
               "Python closures through 2 Python workers and 1 MiB reads through the Python "
               "iterator, beside Dask and the C++ reader (bench/python_closures.py)",
               RunPythonBench);

}  // namespace dispatch::bench
