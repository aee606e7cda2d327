@0xf082c3b2198b49aa;
# The dispatcher's wire protocol. The bootstrap capability of every connection
# is a Gateway; nothing else is reachable before it accepts the caller's token.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dispatch::rpc");

interface Gateway @0xd63b3058ab2548ee {
  authenticate @0 (token :Data) -> (dispatcher :Dispatcher);
  # Hands out the dispatcher when `token` matches the one the dispatcher was
  # started with (any token, when it was started without one). A wrong token
  # fails with an Unauthenticated error and the connection stays at the gate.
}

struct Version @0xe589421a1e9f449e {
  protocol @0 :UInt32;    # bumped on every incompatible wire change
  build @1 :Text;         # the dispatcher's release, e.g. "0.1.0"
  incarnation @2 :UInt64; # random at each start: a change means the dispatcher restarted
}

interface Dispatcher @0x8f74785fcea7bbcc {
  getVersion @0 () -> (version :Version);

  ping @1 (payload :Data) -> (payload :Data);
  # Echoes `payload`; a liveness and round-trip probe that touches no state.

  getServerStats @2 () -> (stats :ServerStats);
  # Counters of the process itself: connections, calls, limits crossed, and
  # the housekeeping timer (which proves the loop is never starved).
}

struct ServerStats @0xc83666b68b88b628 {
  uptimeMicros @0 :UInt64;
  connectionsOpen @1 :UInt32;
  connectionsAccepted @2 :UInt64;
  callsTotal @3 :UInt64;
  callsInFlight @4 :UInt32;
  # Connections closed because they crossed a limit, by limit.
  refusedOverConnectionLimit @5 :UInt64;
  closedHandshakeTimeout @6 :UInt64;
  closedOutboundBytes @7 :UInt64;
  closedCallsInFlight @8 :UInt64;
  authenticationFailures @9 :UInt64;
  # The housekeeping timer: how often it fired and its worst lateness.
  ticks @10 :UInt64;
  tickIntervalMicros @11 :UInt64;
  maxTickLatenessMicros @12 :UInt64;
  # The thread that runs uv_run, and how many handler/timer callbacks ran on
  # another thread (always 0: one thread owns the state).
  loopThreadId @13 :UInt64;
  callbacksOffLoopThread @14 :UInt64;
}
