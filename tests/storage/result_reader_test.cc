// ResultReader (storage/result_reader.h): the reads a pool thread does for a
// reply. It sees every row committed before each read (it holds no read
// transaction between reads), reads rows and files into the caller's buffer
// and checks them against the CRC32C the journal recorded: a row or file
// that is not there is NotFound (the caller tells a release from a loss), a
// mismatch is DataLoss naming where, and the buffer holds zeros then.
#include <gtest/gtest.h>

#include <string>

#include "clients/pattern_bytes.h"
#include "common/checksum.h"
#include "storage/result_file.h"
#include "storage/result_reader.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using clients::PatternBytes;
using testing::OptionsFor;
using testing::RecordPayload;
using testing::TempDir;

ResultLocation RowAt(uint64_t closure_id, const std::string& body) {
  ResultLocation location;
  location.closure_id = closure_id;
  location.size = body.size();
  location.crc = Crc32c(body);
  return location;
}

class ResultReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(OptionsFor(tmp_.path()));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    auto reader = ResultReader::Open(store_->db_path(), store_->result_dir());
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    reader_ = std::move(reader).value();
  }
  void Commit(uint64_t seq, uint64_t closure_id, const std::string& body) {
    JournalBatch batch;
    batch.AddRecord(RecordPayload(seq));
    batch.PutResult(closure_id, body);
    ASSERT_TRUE(store_->Commit(batch).ok());
  }

  TempDir tmp_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ResultReader> reader_;
};

TEST_F(ResultReaderTest, ReadsRowsCommittedAfterItOpenedAndFiles) {
  const std::string row = PatternBytes(300000, 'r');
  Commit(1, 7, row);
  std::string back(row.size(), '\0');
  Status read = reader_->Read(RowAt(7, row), back.data());
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_TRUE(back == row);
  // A later commit is seen by the next read.
  const std::string later = PatternBytes(1000, 'l');
  Commit(2, 8, later);
  std::string back_later(later.size(), '\0');
  read = reader_->Read(RowAt(8, later), back_later.data());
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_TRUE(back_later == later);

  const std::string file = PatternBytes(2 << 20, 'f');
  auto crc = WriteResultFile(store_->result_dir(), 9, 2, file);
  ASSERT_TRUE(crc.ok()) << crc.status().ToString();
  ResultLocation in_file = RowAt(9, file);
  in_file.in_file = true;
  in_file.file_attempt = 2;
  std::string back_file(file.size(), '\0');
  read = reader_->Read(in_file, back_file.data());
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_TRUE(back_file == file);
}

TEST_F(ResultReaderTest, WhatIsNotThereIsNotFoundAndAMismatchIsDataLossWithZeros) {
  const std::string row = PatternBytes(5000, 'x');
  std::string back(row.size(), 'q');
  Status read = reader_->Read(RowAt(11, row), back.data());
  EXPECT_EQ(read.code(), StatusCode::kNotFound) << read.ToString();
  ResultLocation in_file = RowAt(11, row);
  in_file.in_file = true;
  in_file.file_attempt = 1;
  read = reader_->Read(in_file, back.data());
  EXPECT_EQ(read.code(), StatusCode::kNotFound) << read.ToString();

  Commit(1, 11, row);
  ResultLocation wrong = RowAt(11, row);
  wrong.crc ^= 1;  // the journal says otherwise
  read = reader_->Read(wrong, back.data());
  EXPECT_EQ(read.code(), StatusCode::kDataLoss) << read.ToString();
  EXPECT_NE(read.message().find("closure 11"), std::string::npos) << read.ToString();
  EXPECT_NE(read.message().find(store_->db_path()), std::string::npos) << read.ToString();
  EXPECT_EQ(back, std::string(row.size(), '\0'));
}

}  // namespace
}  // namespace dispatch::storage
