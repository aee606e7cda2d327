// Result files (storage/result_file.h): a large closure result in a file of
// its own. Written bytes come back as written; a file that is missing,
// short, long, renamed or flipped is NotFound or DataLoss naming it, never
// wrong bytes; names parse back to their ids and nothing else parses; and
// `dispatcher --verify`'s check (VerifyWorkDir) counts clean files and names
// a damaged one.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "clients/pattern_bytes.h"
#include "common/checksum.h"
#include "storage/result_file.h"
#include "storage/store.h"
#include "storage/verify.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using clients::PatternBytes;
using testing::OptionsFor;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

TEST(ResultFile, WrittenBytesReadBackWithTheirChecksum) {
  TempDir dir;
  const std::string body = PatternBytes((3u << 20) + 5, 'a');
  auto crc = WriteResultFile(dir.path(), 42, 3, body);
  ASSERT_TRUE(crc.ok()) << crc.status().ToString();
  EXPECT_EQ(*crc, Crc32c(body));
  std::string back(body.size(), '\0');
  Status read = ReadResultFile(dir.path(), 42, 3, back.data(), back.size());
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_TRUE(back == body);
  EXPECT_EQ(std::filesystem::file_size(dir.Sub(ResultFileName(42, 3))),
            body.size() + kResultFileHeaderBytes);
  auto checked = CheckResultFile(dir.path(), {42, 3});
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(*checked, body.size());
}

TEST(ResultFile, AnotherAttemptOrSizeOrAMissingFileIsNeverServed) {
  TempDir dir;
  const std::string body = PatternBytes(1 << 20, 'b');
  ASSERT_TRUE(WriteResultFile(dir.path(), 7, 2, body).ok());
  std::string back(body.size(), '\0');
  EXPECT_EQ(ReadResultFile(dir.path(), 7, 1, back.data(), back.size()).code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadResultFile(dir.path(), 8, 2, back.data(), back.size()).code(), StatusCode::kNotFound);
  std::string shorter(body.size() - 1, '\0');
  Status wrong_size = ReadResultFile(dir.path(), 7, 2, shorter.data(), shorter.size());
  EXPECT_EQ(wrong_size.code(), StatusCode::kDataLoss) << wrong_size.ToString();
  // A file renamed to another closure's name holds the wrong closure.
  std::filesystem::copy_file(dir.Sub(ResultFileName(7, 2)), dir.Sub(ResultFileName(9, 2)));
  Status renamed = ReadResultFile(dir.path(), 9, 2, back.data(), back.size());
  EXPECT_EQ(renamed.code(), StatusCode::kDataLoss) << renamed.ToString();
  EXPECT_NE(renamed.message().find(ResultFileName(9, 2)), std::string::npos) << renamed.ToString();
  EXPECT_EQ(CheckResultFile(dir.path(), {9, 2}).status().code(), StatusCode::kDataLoss);
}

TEST(ResultFile, DamageIsNamedNeverServed) {
  TempDir dir;
  const std::string body = PatternBytes(2 << 20, 'c');
  ASSERT_TRUE(WriteResultFile(dir.path(), 11, 1, body).ok());
  const std::string path = dir.Sub(ResultFileName(11, 1));
  const std::string whole = ReadFile(path);
  std::string back(body.size(), '\0');

  // A flipped header byte: the header's own checksum fails.
  std::string header_flip = whole;
  header_flip[9] ^= 0x10;
  WriteFile(path, header_flip);
  Status status = ReadResultFile(dir.path(), 11, 1, back.data(), back.size());
  EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
  EXPECT_NE(status.message().find(path), std::string::npos) << status.ToString();

  // Cut short, or grown: the length disagrees with the header.
  WriteFile(path, whole.substr(0, whole.size() - 100));
  EXPECT_EQ(ReadResultFile(dir.path(), 11, 1, back.data(), back.size()).code(), StatusCode::kDataLoss);
  WriteFile(path, whole + "x");
  EXPECT_EQ(ReadResultFile(dir.path(), 11, 1, back.data(), back.size()).code(), StatusCode::kDataLoss);
  WriteFile(path, whole.substr(0, 10));
  EXPECT_EQ(ReadResultFile(dir.path(), 11, 1, back.data(), back.size()).code(), StatusCode::kDataLoss);

  // A flipped body byte reads back (the caller checks it against the
  // journal's CRC32C) and fails the whole-file check.
  std::string body_flip = whole;
  body_flip[kResultFileHeaderBytes + 12345] ^= 0x01;
  WriteFile(path, body_flip);
  ASSERT_TRUE(ReadResultFile(dir.path(), 11, 1, back.data(), back.size()).ok());
  EXPECT_NE(Crc32c(back), Crc32c(body));
  auto checked = CheckResultFile(dir.path(), {11, 1});
  EXPECT_EQ(checked.status().code(), StatusCode::kDataLoss) << checked.status().ToString();
}

TEST(ResultFile, NamesParseBackAndNothingElseParses) {
  for (auto [closure, attempt] : {std::pair<uint64_t, uint32_t>{1, 1}, {UINT64_MAX, UINT32_MAX}, {0, 0}}) {
    ResultFileId id;
    ASSERT_TRUE(ParseResultFileName(ResultFileName(closure, attempt), &id)) << closure;
    EXPECT_EQ(id.closure_id, closure);
    EXPECT_EQ(id.attempt, attempt);
  }
  ResultFileId id;
  const std::string good = ResultFileName(5, 6);
  for (const std::string& bad :
       {std::string("x") + good.substr(1), good + ".tmp", good.substr(1), std::string("notes.txt"),
        std::string("00000000000000000005-9999999999.result"),  // attempt past 32 bits
        std::string("99999999999999999999-0000000001.result"),  // closure past 64 bits
        std::string("00000000000000000005+0000000006.result")}) {
    EXPECT_FALSE(ParseResultFileName(bad, &id)) << bad;
  }
}

TEST(ResultFile, RemoveAndListKeepStrangersApart) {
  TempDir dir;
  ASSERT_TRUE(WriteResultFile(dir.path(), 1, 1, "one").ok());
  ASSERT_TRUE(WriteResultFile(dir.path(), 2, 4, "two").ok());
  WriteFile(dir.Sub("README"), "not ours");
  auto listing = ListResultFiles(dir.path());
  ASSERT_TRUE(listing.ok());
  std::vector<ResultFileId> files = listing->files;
  std::sort(files.begin(), files.end(),
            [](const ResultFileId& a, const ResultFileId& b) { return a.closure_id < b.closure_id; });
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], (ResultFileId{1, 1}));
  EXPECT_EQ(files[1], (ResultFileId{2, 4}));
  EXPECT_EQ(listing->others, std::vector<std::string>{"README"});
  ASSERT_TRUE(RemoveResultFile(dir.path(), {1, 1}).ok());
  ASSERT_TRUE(RemoveResultFile(dir.path(), {1, 1}).ok()) << "a missing file is fine";
  EXPECT_FALSE(std::filesystem::exists(dir.Sub(ResultFileName(1, 1))));
  EXPECT_TRUE(std::filesystem::exists(dir.Sub("README")));
  auto missing_dir = ListResultFiles(dir.Sub("nowhere"));
  ASSERT_TRUE(missing_dir.ok());
  EXPECT_TRUE(missing_dir->files.empty());
}

TEST(ResultFile, TheStoreMakesTheDirectoryAndVerifyChecksEveryFile) {
  TempDir dir;
  {
    auto store = Store::Open(OptionsFor(dir.path()));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->result_dir(), dir.Sub(kResultDirName));
    EXPECT_TRUE(std::filesystem::is_directory((*store)->result_dir()));
  }
  const std::string results = dir.Sub(kResultDirName);
  ASSERT_TRUE(WriteResultFile(results, 3, 1, PatternBytes(1 << 20, 'd')).ok());
  ASSERT_TRUE(WriteResultFile(results, 4, 2, PatternBytes(5000, 'e')).ok());
  auto clean = VerifyWorkDir(dir.path());
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(clean->clean()) << clean->Summary(dir.path());
  EXPECT_EQ(clean->result_files, 2u);
  EXPECT_EQ(clean->result_file_bytes, (1u << 20) + 5000);

  const std::string path = results + "/" + ResultFileName(4, 2);
  std::string bytes = ReadFile(path);
  bytes[kResultFileHeaderBytes + 10] ^= 0x40;
  WriteFile(path, bytes);
  auto damaged = VerifyWorkDir(dir.path());
  ASSERT_TRUE(damaged.ok());
  ASSERT_EQ(damaged->damage.size(), 1u) << damaged->Summary(dir.path());
  EXPECT_NE(damaged->damage[0].find(path), std::string::npos) << damaged->damage[0];
  EXPECT_EQ(damaged->result_files, 1u);
}

}  // namespace
}  // namespace dispatch::storage
