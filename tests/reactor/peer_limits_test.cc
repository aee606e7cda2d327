// PeerMemoryBudget (reserve, wait, release, headroom) and MessageGuardStream
// (framing followed as bytes pass, oversize refusal, waiting for the budget),
// in-process over KJ's in-memory pipes on the product's loop.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <capnp/serialize-async.h>
#include <kj/async-io.h>

#include "common/address.h"
#include "reactor/message_guard_stream.h"
#include "reactor/peer_memory_budget.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"

namespace dispatch::reactor {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(PeerMemoryBudget, LargeReservationsLeaveHeadroomForSmallOnes) {
  PeerMemoryBudget budget(8 * kMiB);
  EXPECT_TRUE(budget.TryReserve(7 * kMiB));
  EXPECT_EQ(budget.available(), 0u);
  EXPECT_FALSE(budget.TryReserve(PeerMemoryBudget::kSmallBytes + 1));
  EXPECT_TRUE(budget.TryReserve(PeerMemoryBudget::kSmallBytes));
  EXPECT_EQ(budget.counters().refusals, 1u);
  EXPECT_EQ(budget.used(), 7 * kMiB + PeerMemoryBudget::kSmallBytes);
  budget.Release(7 * kMiB);
  budget.Release(PeerMemoryBudget::kSmallBytes);
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(budget.counters().high_water_bytes, 7 * kMiB + PeerMemoryBudget::kSmallBytes);
}

TEST(PeerMemoryBudget, ForcedBytesAreCountedPastTheLimit) {
  PeerMemoryBudget budget(2 * kMiB);
  budget.ForceReserve(3 * kMiB);
  EXPECT_EQ(budget.counters().overdrafts, 1u);
  EXPECT_FALSE(budget.TryReserve(1));
  budget.Release(3 * kMiB);
  EXPECT_TRUE(budget.TryReserve(1));
  budget.Release(1);
}

TEST(PeerMemoryBudget, WaitersAreServedInOrderAsBytesAreReleased) {
  uvkj::UvLoop loop;
  uvkj::UvAsyncIo io(loop.get());
  PeerMemoryBudget budget(8 * kMiB);  // large reservations: up to 7 MiB
  ASSERT_TRUE(budget.TryReserve(6 * kMiB));
  auto first = KJ_ASSERT_NONNULL(budget.WaitFor(4 * kMiB));
  auto second = KJ_ASSERT_NONNULL(budget.WaitFor(2 * kMiB));
  EXPECT_EQ(budget.waiting(), 2u);
  EXPECT_EQ(budget.counters().waits, 2u);
  // Nobody may jump the queue, even with bytes that would fit.
  EXPECT_FALSE(budget.FitsNow(kMiB));
  EXPECT_FALSE(first.poll(io.wait_scope()));
  budget.Release(6 * kMiB);
  EXPECT_EQ(budget.waiting(), 0u);
  EXPECT_EQ(budget.used(), 6 * kMiB);
  {
    auto a = first.wait(io.wait_scope());
    auto b = second.wait(io.wait_scope());
    EXPECT_EQ(a->bytes() + b->bytes(), 6 * kMiB);
  }
  EXPECT_EQ(budget.used(), 0u);
}

TEST(PeerMemoryBudget, SmallReservationsPassQueuedLargeOnes) {
  uvkj::UvLoop loop;
  uvkj::UvAsyncIo io(loop.get());
  PeerMemoryBudget budget(8 * kMiB);
  ASSERT_TRUE(budget.TryReserve(6 * kMiB));
  auto large = KJ_ASSERT_NONNULL(budget.WaitFor(4 * kMiB));
  EXPECT_TRUE(budget.FitsNow(PeerMemoryBudget::kSmallBytes));
  auto small = KJ_ASSERT_NONNULL(budget.WaitFor(PeerMemoryBudget::kSmallBytes));
  EXPECT_TRUE(small.poll(io.wait_scope()));
  EXPECT_EQ(budget.waiting(), 1u);
  EXPECT_EQ(budget.used(), 6 * kMiB + PeerMemoryBudget::kSmallBytes);
  budget.Release(6 * kMiB);
  EXPECT_TRUE(large.poll(io.wait_scope()));
}

TEST(PeerMemoryBudget, ADroppedWaiterLeavesAndAnUntakenGrantComesBack) {
  uvkj::UvLoop loop;
  uvkj::UvAsyncIo io(loop.get());
  PeerMemoryBudget budget(8 * kMiB);
  ASSERT_TRUE(budget.TryReserve(6 * kMiB));
  {
    auto dropped = KJ_ASSERT_NONNULL(budget.WaitFor(4 * kMiB));
    EXPECT_EQ(budget.waiting(), 1u);
  }
  EXPECT_EQ(budget.waiting(), 0u);
  {
    auto granted = KJ_ASSERT_NONNULL(budget.WaitFor(4 * kMiB));
    budget.Release(6 * kMiB);
    EXPECT_EQ(budget.used(), 4 * kMiB);  // granted, never taken
  }
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_TRUE(budget.WaitFor(7 * kMiB + 1) == nullptr);
  EXPECT_EQ(budget.counters().refusals, 1u);
}

// A message of about `bytes` bytes (a list of 500-byte blobs) spread over
// many small segments.
kj::Own<capnp::MallocMessageBuilder> MessageOf(size_t bytes) {
  auto builder = kj::heap<capnp::MallocMessageBuilder>(128, capnp::AllocationStrategy::FIXED_SIZE);
  auto list = builder->initRoot<capnp::AnyPointer>().initAs<capnp::List<capnp::Data>>(bytes / 512);
  for (size_t i = 0; i < list.size(); ++i) {
    auto data = list.init(i, 500);
    memset(data.begin(), static_cast<int>(i), data.size());
  }
  return builder;
}

size_t BlobsIn(capnp::MessageReader& reader) {
  auto list = reader.getRoot<capnp::AnyPointer>().getAs<capnp::List<capnp::Data>>();
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].size() != 500 || list[i][499] != static_cast<kj::byte>(i)) return 0;
  }
  return list.size();
}

struct GuardFixture {
  uvkj::UvLoop loop;
  uvkj::UvAsyncIo io{loop.get()};
  kj::TwoWayPipe pipe = kj::newTwoWayPipe();
  MessageGuardCounters counters;
};

TEST(MessageGuardStream, MultiSegmentMessagesPassIntactAndReleaseTheirBytes) {
  GuardFixture f;
  PeerMemoryBudget budget(64 * kMiB);
  MessageGuardStream guard(kj::mv(f.pipe.ends[1]), 1, 1 * kMiB, budget, f.counters, f.loop.get());
  for (size_t size : {0, 100, 5000, 300000}) {
    auto message = MessageOf(size);
    ASSERT_GT(message->getSegmentsForOutput().size(), size > 1000 ? 1u : 0u);
    auto write = capnp::writeMessage(*f.pipe.ends[0], *message).eagerlyEvaluate(nullptr);
    auto reader = capnp::readMessage(guard).wait(f.io.wait_scope());
    write.wait(f.io.wait_scope());
    EXPECT_EQ(BlobsIn(*reader), size / 512);
    EXPECT_TRUE(guard.message_started_ms() == nullptr);
    EXPECT_EQ(budget.used(), 0u);
  }
  EXPECT_EQ(budget.counters().reservations, 4u);
}

TEST(MessageGuardStream, AnOversizedBodyIsReadAndDroppedThenTheReadFailsNamingTheLimit) {
  GuardFixture f;
  PeerMemoryBudget budget(64 * kMiB);
  MessageGuardStream guard(kj::mv(f.pipe.ends[1]), 7, 64 * 1024, budget, f.counters, f.loop.get());
  auto message = MessageOf(200 * 1024);
  auto write = capnp::writeMessage(*f.pipe.ends[0], *message).eagerlyEvaluate(nullptr);
  auto read = capnp::readMessage(guard).eagerlyEvaluate(nullptr);
  // The whole body was taken from the peer (so it can read our reason).
  write.wait(f.io.wait_scope());
  try {
    read.wait(f.io.wait_scope());
    FAIL() << "an oversized message was read";
  } catch (const kj::Exception& e) {
    EXPECT_TRUE(strstr(e.getDescription().cStr(), "over the limit of 65536 bytes (--max-message-bytes)"))
        << e.getDescription().cStr();
  }
  EXPECT_EQ(f.counters.oversized_messages, 1u);
  EXPECT_EQ(budget.used(), 0u);
}

TEST(MessageGuardStream, ABodyWaitsUntilTheBudgetHasRoom) {
  GuardFixture f;
  PeerMemoryBudget budget(1 * kMiB);  // large messages: up to 896 KiB
  MessageGuardStream guard(kj::mv(f.pipe.ends[1]), 1, 1 * kMiB, budget, f.counters, f.loop.get());
  ASSERT_TRUE(budget.TryReserve(800 * 1024));
  auto message = MessageOf(200 * 1024);
  auto write = capnp::writeMessage(*f.pipe.ends[0], *message).eagerlyEvaluate(nullptr);
  auto read = capnp::readMessage(guard).eagerlyEvaluate(nullptr);
  EXPECT_FALSE(read.poll(f.io.wait_scope()));
  EXPECT_EQ(f.counters.budget_waits, 1u);
  EXPECT_EQ(budget.waiting(), 1u);
  EXPECT_TRUE(guard.message_started_ms() != nullptr);  // its deadline runs
  EXPECT_FALSE(write.poll(f.io.wait_scope()));      // the body is not read
  budget.Release(800 * 1024);
  auto reader = read.wait(f.io.wait_scope());
  write.wait(f.io.wait_scope());
  EXPECT_EQ(BlobsIn(*reader), 200u * 1024 / 512);
  EXPECT_EQ(budget.used(), 0u);
}

TEST(ListenAddress, OnlyLoopbackAndUnixSocketsCountAsLocal) {
  for (const char* local : {"tcp:127.0.0.1:5050", "tcp:127.1.2.3:0", "tcp:localhost:1", "tcp:[::1]:5050",
                            "tcp:::1:5050", "unix:/tmp/d.sock"}) {
    EXPECT_TRUE(IsLocalOnlyAddress(local)) << local;
  }
  for (const char* remote : {"tcp:0.0.0.0:5050", "tcp:*:5050", "tcp:[::]:5050", "tcp:10.0.0.1:1",
                             "tcp:127.example.com:1", "tcp:dispatcher.local:5050"}) {
    EXPECT_FALSE(IsLocalOnlyAddress(remote)) << remote;
  }
}

TEST(ListenAddress, PortZeroIsATcpPortTheKernelPicks) {
  for (const char* any : {"tcp:127.0.0.1:0", "tcp:[::1]:0", "tcp:localhost:00"}) {
    EXPECT_TRUE(IsTcpPortZero(any)) << any;
  }
  for (const char* fixed : {"tcp:127.0.0.1:5050", "tcp:127.0.0.1:10", "unix:/tmp/0", "agent-0",
                            "tcp:127.0.0.1:", "tcp:0"}) {
    EXPECT_FALSE(IsTcpPortZero(fixed)) << fixed;
  }
}

}  // namespace
}  // namespace dispatch::reactor
