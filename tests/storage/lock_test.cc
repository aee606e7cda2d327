// The work-dir lock: a second dispatcher on the same work dir, in this process
// or another, is refused with a message naming the dir and the holder; the
// lock is free again once the holder closes its Store or is killed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "storage/store.h"
#include "storage/work_dir_lock.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using std::chrono::milliseconds;
using testing::ChildProcess;
using testing::HelperPath;
using testing::OptionsFor;
using testing::TempDir;

constexpr milliseconds kChildTimeout{30000};

TEST(WorkDirLock, SecondOpenInTheSameProcessIsRefusedNamingTheDir) {
  TempDir tmp;
  auto first = Store::Open(OptionsFor(tmp.path()));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = Store::Open(OptionsFor(tmp.path()));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  const std::string& message = second.status().message();
  EXPECT_NE(message.find("work dir " + tmp.path() + " is in use"), std::string::npos) << message;
  EXPECT_NE(message.find("pid " + std::to_string(getpid())), std::string::npos) << message;
}

TEST(WorkDirLock, ClosingTheStoreReleasesTheLock) {
  TempDir tmp;
  {
    auto first = Store::Open(OptionsFor(tmp.path()));
    ASSERT_TRUE(first.ok());
  }
  auto again = Store::Open(OptionsFor(tmp.path()));
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST(WorkDirLock, AnotherProcessIsRefusedWhileWeHoldTheDir) {
  TempDir tmp;
  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ChildProcess child(HelperPath(), {"open", tmp.path()});
  auto line = child.ReadLine(kChildTimeout);
  ASSERT_TRUE(line.has_value()) << "the helper reported nothing";
  EXPECT_EQ(line->rfind("ERR FailedPrecondition work dir " + tmp.path() + " is in use", 0), 0u)
      << *line;
  EXPECT_NE(line->find("pid " + std::to_string(getpid())), std::string::npos) << *line;
  const int status = child.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
}

TEST(WorkDirLock, AKilledHolderLeavesNoStaleLock) {
  TempDir tmp;
  ChildProcess holder(HelperPath(), {"hold", tmp.path()});
  auto ready = holder.ReadLine(kChildTimeout);
  ASSERT_TRUE(ready.has_value());
  ASSERT_EQ(*ready, "READY " + std::to_string(holder.pid()));

  auto refused = Store::Open(OptionsFor(tmp.path()));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("pid " + std::to_string(holder.pid())),
            std::string::npos)
      << refused.status().message();

  holder.Kill(SIGKILL);
  holder.Wait();
  auto store = Store::Open(OptionsFor(tmp.path()));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
}

TEST(WorkDirLock, LockIsRefusedDirectlyToo) {
  TempDir tmp;
  auto first = WorkDirLock::Acquire(tmp.path());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = WorkDirLock::Acquire(tmp.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*first)->path(), tmp.path() + "/LOCK");
}

}  // namespace
}  // namespace dispatch::storage
