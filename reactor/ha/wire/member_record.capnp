# The value of PREFIX/members/LEASE in etcd (docs/high_availability.md §2):
# one dispatcher of an HA group, written as JSON (Cap'n Proto's JSON codec)
# when its lease is granted and attached to that lease, so it vanishes when
# the member stops (lease revoked) or dies (lease expired). LEASE is the
# lease id in 16 hexadecimal digits. `dispatchctl group` lists these.
@0xd41c6f2f8e3b9a57;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dispatch::ha::wire");

struct MemberRecord {
  rpc @0 :Text;             # the address clients are sent to (--advertise)
  http @1 :Text;            # the status page's URL; empty with --http=off
  pid @2 :UInt32;
  startedUnixMs @3 :UInt64; # when the process started (wall clock)
}
