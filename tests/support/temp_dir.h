// TempDir: a fresh directory under $TMPDIR (or /tmp), removed with
// everything in it when the test ends.
#pragma once

#include <string>

namespace dispatch::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace dispatch::testing
