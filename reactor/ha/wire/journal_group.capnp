# One value under P/journal/SEQ in etcd (docs/high_availability.md §2, §4):
# the group commits (passes) one etcd transaction carried, in order. A pass
# is exactly what one local Store::Commit wrote: its journal records (each an
# encoded journal.Update, numbered from firstSeq on, across passes), the
# dataset definitions and closure results stored with them, and the result
# rows it deleted. The value in etcd is 4 bytes of CRC32C (little endian) of
# the message that follows, then the message (Cap'n Proto's packed encoding).
@0xb6af1c90f0c4e6b4;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dispatch::ha::wire");

struct JournalGroup {
  firstSeq @0 :UInt64;   # the sequence number of the first record; the key's SEQ
  passes @1 :List(Pass);
}

struct Pass {
  records @0 :List(Data);          # encoded journal.Update, in order
  datasetKeys @1 :List(Text);      # parallel to datasetDefinitions
  datasetDefinitions @2 :List(Data);
  resultIds @3 :List(UInt64);      # parallel to resultBytes
  resultBytes @4 :List(Data);
  resultDeletes @5 :List(UInt64);  # applied after the puts, as Store::Commit does
}

# The snapshot in etcd (docs/high_availability.md §5). SnapshotImage is the
# whole snapshot: the local store's snapshot body (state::EncodeSnapshot, the
# same image the store keeps in its snapshot file) and, as one Pass without
# records, every dataset definition and closure result stored at `seq` (the
# journal keys that carried them are deleted once the snapshot is current).
# Its flat encoding is cut into chunks, each value under P/snapshot/S/CHUNK
# being 4 bytes of CRC32C (little endian) of the chunk's payload, then the
# payload. P/snapshot/current holds a SnapshotDescriptor, framed as a journal
# group is (CRC32C in front).
struct SnapshotImage {
  seq @0 :UInt64;    # the state after record seq
  state @1 :Data;    # the store's snapshot body
  tables @2 :Pass;   # datasetKeys/Definitions and resultIds/Bytes only
}

struct SnapshotDescriptor {
  seq @0 :UInt64;        # the snapshot's S: chunks are under P/snapshot/S/
  chunks @1 :UInt64;     # chunk keys 0 .. chunks-1
  bytes @2 :UInt64;      # the image's bytes, all chunks' payloads together
  crc32c @3 :UInt32;     # of those bytes
  chunkBytes @4 :UInt64; # payload bytes of every chunk but the last
}
