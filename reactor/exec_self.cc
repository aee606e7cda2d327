#include "reactor/exec_self.h"

#include <errno.h>
#include <unistd.h>

namespace dispatch::reactor {

void ExecSelf(char* const* argv) {
  char path[4096];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return;
  path[length] = '\0';
  execv(path, argv);
}

}  // namespace dispatch::reactor
