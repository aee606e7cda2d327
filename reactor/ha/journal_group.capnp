# One value under P/journal/SEQ in etcd (docs/high_availability.md §2, §4):
# the group commits (passes) one etcd transaction carried, in order. A pass
# is exactly what one local Store::Commit wrote: its journal records (each an
# encoded journal.Update, numbered from firstSeq on, across passes), the
# dataset definitions and closure results stored with them, and the result
# rows it deleted. The value in etcd is 4 bytes of CRC32C (little endian) of
# the message that follows, then the message (Cap'n Proto, flat, unpacked).
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
