// The JSON mapping against etcd 3.4's own answers (copied from a live
// gateway, ../shared/notes/etcd.md) and the requests it must accept.
#include "reactor/etcd/gateway_json.h"

#include <gtest/gtest.h>

namespace dispatch::etcd {
namespace {

constexpr const char* kHeader =
    R"("header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"4","raft_term":"2"})";

TEST(GatewayJson, AFailedTxnHasNoSucceededFieldAndDecodesAsFailed) {
  GatewayJson json;
  // etcd omits `succeeded` when false; the failure branch ranged the leader key.
  std::string body = std::string("{") + kHeader +
                     R"(,"responses":[{"response_range":{"header":{"revision":"9"},"kvs":[{"key":"cC9sZWFkZXI=","create_revision":"7","mod_revision":"7","version":"1","value":"YQ==","lease":"4111120380974596621"}],"count":"1"}}]})";
  auto txn = json.DecodeTxn(body);
  ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  EXPECT_FALSE(txn->succeeded);
  EXPECT_EQ(txn->revision, 4);
  ASSERT_EQ(txn->responses.size(), 1u);
  ASSERT_EQ(txn->responses[0].range.kvs.size(), 1u);
  const KeyValue& kv = txn->responses[0].range.kvs[0];
  EXPECT_EQ(kv.key, "p/leader");
  EXPECT_EQ(kv.value, "a");
  EXPECT_EQ(kv.create_revision, 7);
  // Over 2^53: a double would have lost the last digits.
  EXPECT_EQ(kv.lease, 4111120380974596621);

  auto ok = json.DecodeTxn(std::string("{") + kHeader +
                           R"(,"succeeded":true,"responses":[{"response_put":{"header":{"revision":"3"}}}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->succeeded);
  ASSERT_EQ(ok->responses.size(), 1u);
  EXPECT_EQ(ok->responses[0].kind, Op::Kind::kPut);
}

TEST(GatewayJson, AKeepAliveWithoutTtlMeansTheLeaseIsGone) {
  GatewayJson json;
  auto alive = json.DecodeKeepAliveLine(
      std::string(R"({"result":{)") + kHeader + R"(,"ID":"4111120380974596627","TTL":"5"}})", 4111120380974596627);
  ASSERT_TRUE(alive.ok()) << alive.status().ToString();
  EXPECT_EQ(*alive, 5);
  auto gone = json.DecodeKeepAliveLine(std::string(R"({"result":{)") + kHeader + R"(,"ID":"4111120380974596621"}})",
                                       4111120380974596621);
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("lease 4111120380974596621 is gone"), std::string::npos);
}

TEST(GatewayJson, WatchLinesDecodePutsWithoutTypeAndDeletes) {
  GatewayJson json;
  auto created = json.DecodeWatchLine(std::string(R"({"result":{)") + kHeader + R"(,"created":true}})");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_TRUE(created->created);
  EXPECT_TRUE(created->events.empty());
  auto events = json.DecodeWatchLine(
      std::string(R"({"result":{)") + kHeader +
      R"(,"events":[{"kv":{"key":"YQ==","create_revision":"2","mod_revision":"4","version":"3","value":"Yw=="}},{"type":"DELETE","kv":{"key":"YQ==","mod_revision":"5"}}]}})");
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->events.size(), 2u);
  EXPECT_FALSE(events->events[0].is_delete);
  EXPECT_EQ(events->events[0].kv.value, "c");
  EXPECT_TRUE(events->events[1].is_delete);
  EXPECT_EQ(events->events[1].kv.mod_revision, 5);
  auto canceled = json.DecodeWatchLine(std::string(R"({"result":{)") + kHeader +
                                       R"(,"canceled":true,"compact_revision":"3"}})");
  ASSERT_TRUE(canceled.ok());
  EXPECT_TRUE(canceled->canceled);
  EXPECT_EQ(canceled->compact_revision, 3);
  EXPECT_EQ(json.DecodeWatchLine(R"({"error":{"grpc_code":2,"message":"bad watch"}})").status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(json.DecodeWatchLine("{not json").status().code(), StatusCode::kInternal);
}

TEST(GatewayJson, RequestsUseEtcdNamesBase64AndStringIntegers) {
  GatewayJson json;
  Txn txn;
  txn.compare.push_back(Compare::CreateRevisionIs("p/leader", 7));
  txn.compare.push_back(Compare::VersionIs("p/journal/1", 0));
  txn.success.push_back(Op::Put("a", "b", 4111120380974596621));
  txn.failure.push_back(Op::Get("p/", PrefixEnd("p/")));
  const std::string text = json.EncodeTxn(txn);
  EXPECT_NE(text.find(R"("target":"CREATE")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("create_revision":"7")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("result":"EQUAL")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("key":"cC9sZWFkZXI=")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("request_put":{"key":"YQ==","value":"Yg==","lease":"4111120380974596621"})"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"("range_end":"cDA=")"), std::string::npos) << text;  // "p0"
  // Only the compare's active operand is written (etcd's oneof).
  EXPECT_EQ(text.find(R"("mod_revision")"), std::string::npos) << text;
  EXPECT_EQ(json.EncodeLeaseGrant(2), R"({"TTL":"2","ID":"0"})");
}

TEST(GatewayJson, PrefixEndFollowsEtcdsRule) {
  EXPECT_EQ(PrefixEnd("abc"), "abd");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
}

TEST(GatewayJson, ErrorAnswersKeepEtcdsMessageAndCode) {
  GatewayJson json;
  int code = -1;
  EXPECT_EQ(json.DecodeError(
                R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})",
                &code),
            "etcdserver: requested lease not found (gRPC code 5)");
  EXPECT_EQ(code, 5);
  EXPECT_EQ(json.DecodeError("404 page not found", &code), "404 page not found");
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace dispatch::etcd
