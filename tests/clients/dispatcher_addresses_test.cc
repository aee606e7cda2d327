// Dispatcher address lists (clients/dispatcher_addresses.h): parsing, the
// leader named in a standby's refusal, and the order of a round. Pure: no
// dispatcher. Connecting through a list is tested against real processes in
// tests/etcd/ha_clients_test.cc.
#include "clients/dispatcher_addresses.h"

#include <gtest/gtest.h>

namespace dispatch::clients {
namespace {

using Addresses = std::vector<std::string>;

TEST(DispatcherAddressList, OneAddressIsAListOfOne) {
  auto one = ParseDispatcherAddressList("tcp:127.0.0.1:5050");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(*one, Addresses{"tcp:127.0.0.1:5050"});
  auto unix_one = ParseDispatcherAddressList("unix:/run/dispatch.sock");
  ASSERT_TRUE(unix_one.ok());
  EXPECT_EQ(*unix_one, Addresses{"unix:/run/dispatch.sock"});
}

TEST(DispatcherAddressList, EntriesKeepTheirOrderAndLoseSurroundingSpaces) {
  auto list = ParseDispatcherAddressList("tcp:a:1, tcp:b:2 ,unix:/s");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(*list, (Addresses{"tcp:a:1", "tcp:b:2", "unix:/s"}));
}

TEST(DispatcherAddressList, EmptyEntriesAreRefusedNamingTheirPosition) {
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "no dispatcher address given"},
           {"  ", "no dispatcher address given"},
           {",tcp:a:1", "entry 1 is empty"},
           {"tcp:a:1,,tcp:b:2", "entry 2 is empty"},
           {"tcp:a:1,", "entry 2 is empty"},
           {"tcp:a:1, ,tcp:b:2", "entry 2 is empty"}}) {
    auto parsed = ParseDispatcherAddressList(text);
    ASSERT_FALSE(parsed.ok()) << "'" << text << "'";
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(why), std::string::npos)
        << "'" << text << "': " << parsed.status().ToString();
  }
}

TEST(DispatcherAddressList, AMalformedEntryIsRefusedNamingIt) {
  auto single = ParseDispatcherAddressList("127.0.0.1:5050");
  ASSERT_FALSE(single.ok());
  // One address keeps the message it always had.
  EXPECT_EQ(single.status().message(), "address '127.0.0.1:5050' must start with tcp: or unix:");
  auto listed = ParseDispatcherAddressList("tcp:a:1,tcp:b:99999");
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(listed.status().message().find("entry 2: address 'tcp:b:99999' is not tcp:HOST:PORT"),
            std::string::npos)
      << listed.status().ToString();
}

TEST(DispatcherAddressList, TooManyEntriesAreRefused) {
  std::string text = "tcp:a:1";
  for (size_t i = 1; i < kMaxDispatcherAddresses; ++i) text += ",tcp:a:1";
  EXPECT_TRUE(ParseDispatcherAddressList(text).ok());
  auto over = ParseDispatcherAddressList(text + ",tcp:a:1");
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("more than 64 entries"), std::string::npos)
      << over.status().ToString();
}

TEST(LeaderNamedIn, ReadsTheAddressAStandbyNames) {
  EXPECT_EQ(LeaderNamedIn(UnavailableError("not the leader; the leader is tcp:10.0.0.2:5050")),
            "tcp:10.0.0.2:5050");
  EXPECT_EQ(LeaderNamedIn(UnavailableError("not the leader; the leader is unix:/a,b")),
            "unix:/a,b");
  EXPECT_EQ(LeaderNamedIn(UnavailableError("not the leader; no leader is known yet")), std::nullopt);
  EXPECT_EQ(LeaderNamedIn(UnavailableError("not the leader; the leader is nonsense")), std::nullopt);
  EXPECT_EQ(LeaderNamedIn(InternalError("not the leader; the leader is tcp:a:1")), std::nullopt);
  EXPECT_EQ(LeaderNamedIn(UnavailableError("the dispatcher is shutting down")), std::nullopt);
}

TEST(DispatcherAddresses, ARoundStartsAtTheAddressThatLastWorked) {
  auto parsed = DispatcherAddresses::Parse("tcp:a:1,tcp:b:2,tcp:c:3");
  ASSERT_TRUE(parsed.ok());
  DispatcherAddresses addresses = *parsed;
  EXPECT_EQ(addresses.RoundOrder(), (Addresses{"tcp:a:1", "tcp:b:2", "tcp:c:3"}));
  addresses.Worked("tcp:b:2");
  EXPECT_EQ(addresses.RoundOrder(), (Addresses{"tcp:b:2", "tcp:c:3", "tcp:a:1"}));
  // A copy shares what was learnt (each client keeps one and hands copies out).
  DispatcherAddresses copy = addresses;
  copy.Worked("tcp:c:3");
  EXPECT_EQ(addresses.RoundOrder(), (Addresses{"tcp:c:3", "tcp:a:1", "tcp:b:2"}));
  // A leader a standby named, outside the list, goes first, then the list.
  addresses.Worked("tcp:d:4");
  EXPECT_EQ(addresses.RoundOrder(), (Addresses{"tcp:d:4", "tcp:a:1", "tcp:b:2", "tcp:c:3"}));
}

}  // namespace
}  // namespace dispatch::clients
