// The on-disk format of dispatch.db: the schema, the markers that say a file
// is ours (application_id, user_version), and how each stored blob is
// checksummed. A checksum covers a kind tag and the row's identity as well as
// its bytes, so a blob copied to another row or table fails verification.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dispatch::storage {

// PRAGMA application_id: "DSPJ".
inline constexpr int32_t kApplicationId = 0x4453504A;
// PRAGMA user_version: bump when the schema or a checksum rule changes.
// Version 2 keeps snapshots in files named by the snapshot_file table;
// Store::Open migrates a version 1 database (snapshot blob in a table).
// Version 3 may keep large closure results in files under results/
// (result_file.h) instead of rows: the schema is that of version 2, so
// Store::Open upgrades a version 2 database by setting the number, and a
// build that reads only version 2 refuses a work dir whose results it would
// not find.
inline constexpr int32_t kFormatVersion = 3;

// Created in one transaction together with the two pragmas above.
//  journal:  one row per record; seq is the rowid, so replay is a rowid scan.
//  snapshot_file: the snapshot file (see snapshot_file.h) holding the state
//            after record seq, its body size and checksum; at most one row
//            after each RecordSnapshot (older ones are deleted).
//  dataset:  definitions by key, written in the same transaction as the records.
//  result:   closure results by closure id, written in the same transaction as
//            the record that finishes the closure and deleted in the one that
//            releases it (the journal keeps only their size and checksum);
//            results of result_file_bytes or more live in files instead.
inline constexpr const char* kCreateSnapshotFileTableSql =
    "CREATE TABLE snapshot_file (seq INTEGER PRIMARY KEY, name TEXT NOT NULL, "
    "size INTEGER NOT NULL, crc INTEGER NOT NULL);";
inline constexpr const char* kCreateSchemaSql =
    "CREATE TABLE journal (seq INTEGER PRIMARY KEY, crc INTEGER NOT NULL, body BLOB NOT NULL);"
    "CREATE TABLE snapshot_file (seq INTEGER PRIMARY KEY, name TEXT NOT NULL, "
    "size INTEGER NOT NULL, crc INTEGER NOT NULL);"
    "CREATE TABLE dataset (key BLOB PRIMARY KEY, crc INTEGER NOT NULL, body BLOB NOT NULL);"
    "CREATE TABLE result (closure INTEGER PRIMARY KEY, crc INTEGER NOT NULL, body BLOB NOT NULL);";

inline constexpr int kSchemaTableCount = 4;

// A database migrated from version 1 (which had no result table) gets it at
// Open.
inline constexpr const char* kCreateResultTableSql =
    "CREATE TABLE IF NOT EXISTS result (closure INTEGER PRIMARY KEY, crc INTEGER NOT NULL, "
    "body BLOB NOT NULL);";

// CRC32C over ('J', seq as 8 little-endian bytes, body).
uint32_t RecordChecksum(uint64_t seq, std::string_view body);
// CRC32C over ('S', seq as 8 little-endian bytes, body): a snapshot's body.
uint32_t SnapshotChecksum(uint64_t seq, std::string_view body);
// CRC32C over ('D', key length as 8 little-endian bytes, key, definition).
uint32_t DatasetChecksum(std::string_view key, std::string_view definition);
// CRC32C over ('R', closure id as 8 little-endian bytes, result).
uint32_t ResultChecksum(uint64_t closure_id, std::string_view result);

// For error messages: a dataset key in quotes, non-printable bytes as \xNN,
// cut after 64 bytes.
std::string QuoteKey(std::string_view key);

}  // namespace dispatch::storage
