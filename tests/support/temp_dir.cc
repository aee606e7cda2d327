#include "tests/support/temp_dir.h"

#include <stdio.h>
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>

namespace dispatch::testing {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/dispatch-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  // DISPATCH_KEEP_TEST_DIRS=1 keeps every test's files (logs, journals) for
  // a post-mortem; the path is printed.
  const char* keep = getenv("DISPATCH_KEEP_TEST_DIRS");
  if (keep != nullptr && *keep != '\0' && *keep != '0') {
    fprintf(stderr, "kept %s\n", path_.c_str());
    return;
  }
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace dispatch::testing
