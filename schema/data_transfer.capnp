@0x818f101bfa539894;
# The data-transfer protocol: consumers read a task's elements from the worker
# that runs it, at the worker's transfer address. The bootstrap capability of a
# connection to that address is a WorkerData. Replies are acknowledged by the
# consumer's next request for the same task (its `sequence`), so a worker
# knows which elements have arrived before it reports their splits finished.
# There is no gateway and no token on a transfer address in this version.
# PROTOCOL.md (the consumer life cycle) says how a consumer reads a job.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dispatch::rpc");

interface WorkerData @0x931de3e1a25dd75d {
  getElement @0 (request :ElementRequest) -> (result :ElementResult);
  # One element: `request.maxElements` is treated as 1.

  getElements @1 (request :ElementRequest) -> (result :ElementResult);
  # Up to `maxElements` elements and about `maxBytes` bytes in one reply (at
  # least one element when any is ready, whatever its size), so a consumer is
  # not bound by one round trip per element.
}

struct ElementRequest @0xc314d17756efbaf1 {
  taskId @0 :UInt64;
  consumerId @1 :UInt64;        # nonzero, random per consumer session, and kept across
                                # reconnects: the worker holds a consumer's last reply for a
                                # while after its connections closed (PROTOCOL.md)
  sequence @2 :UInt64;          # per (task, consumer), whatever the connection: 1, 2, ...
                                # Asking for n acknowledges the reply to n - 1; asking for n
                                # again repeats its reply.
  consumerIndex @3 :Int64;      # round robin: this consumer's index; -1 otherwise
  round @4 :Int64;              # round robin: the round asked for; -1 otherwise
  maxElements @5 :UInt32;       # 0: 1
  maxBytes @6 :UInt64;          # 0: the worker's own limit
  waitMillis @7 :UInt32;        # how long the worker may hold the call for an element
}

enum ElementStatus @0xcd912d37abbcaf0e {
  ready @0;          # `elements` holds at least one element
  notReady @1;       # nothing yet (buffer empty, task unknown here so far): ask again
  endOfSequence @2;  # the task has no more elements for this consumer
}

struct ElementResult @0x98360845435e852b {
  status @0 :ElementStatus;
  elements @1 :List(Data);      # in order
  round @2 :Int64;              # round robin: the round the element belongs to; -1 otherwise
}
