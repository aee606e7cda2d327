// ClosureTraces: the dispatcher's bounded store of closure trace stamps.
#include "reactor/closure_traces.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <vector>

namespace dispatch::reactor {
namespace {

// A List(UInt64) reader over `values`, kept alive by `message`.
capnp::List<uint64_t>::Reader ListOf(capnp::MallocMessageBuilder& message,
                                     const std::vector<uint64_t>& values) {
  auto list = message.initRoot<capnp::AnyPointer>().initAs<capnp::List<uint64_t>>(
      static_cast<unsigned>(values.size()));
  for (unsigned i = 0; i < values.size(); ++i) list.set(i, values[i]);
  return list.asReader();
}

TEST(ClosureTraces, PastTheLimitATraceIsDroppedAndCounted) {
  ClosureTraces traces(/*max=*/2);
  capnp::MallocMessageBuilder message;
  auto client = ListOf(message, {10, 11});
  traces.Start(1, client, 12);
  traces.Start(2, client, 12);
  traces.Start(3, client, 12);  // over the limit
  EXPECT_EQ(traces.size(), 2u);
  EXPECT_EQ(traces.dropped(), 1u);
  EXPECT_TRUE(traces.Traced(1));
  EXPECT_FALSE(traces.Traced(3));
  EXPECT_FALSE(traces.Take(3).has_value());
  // Ending one makes room again.
  ASSERT_TRUE(traces.Take(1).has_value());
  traces.Start(3, client, 12);
  EXPECT_TRUE(traces.Traced(3));
  EXPECT_EQ(traces.dropped(), 1u);
}

TEST(ClosureTraces, StampsLandAtTheirStages) {
  ClosureTraces traces;
  capnp::MallocMessageBuilder client_message;
  capnp::MallocMessageBuilder worker_message;
  // Entries past the layout's are ignored, not copied over other stages.
  traces.Start(7, ListOf(client_message, {1, 2, 99}), 3);
  traces.Stamp(7, kTracePushed, 4);
  traces.OnReport(7, ListOf(worker_message, {5, 6, 7, 8, 99}), 9);
  traces.Stamp(8, kTracePushed, 4);  // not traced: nothing
  auto stamps = traces.Take(7);
  ASSERT_TRUE(stamps.has_value());
  const std::vector<uint64_t> want = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0};
  EXPECT_EQ(std::vector<uint64_t>(stamps->begin(), stamps->end()), want);
  EXPECT_TRUE(traces.empty());
  traces.Start(9, ListOf(client_message, {1, 2}), 3);
  traces.Forget(9);  // released without its outcome handed out
  EXPECT_TRUE(traces.empty());
}

}  // namespace
}  // namespace dispatch::reactor
