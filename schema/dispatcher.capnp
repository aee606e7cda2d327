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
}
