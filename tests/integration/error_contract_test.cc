// The error contract from outside (issue 16): a peer built from the schema
// alone (RawPeer) provokes each error code the dispatcher returns and finds
// what schema/dispatcher.capnp's header promises: the exception type
// (OVERLOADED for ResourceExhausted, FAILED for the codes here) and the
// description "remote exception: <CodeName>: <message>", where
// "<CodeName>: <message>" is the reason on the wire and the message names
// the thing involved.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "tests/support/dispatcher_process.h"
#include "tests/support/raw_peer.h"

namespace dispatch::testing {
namespace {

using Type = kj::Exception::Type;

kj::ArrayPtr<const kj::byte> Bytes(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

// `failure` is the exception the contract promises for `code`, and its
// message mentions `names` (when not empty).
void ExpectError(const std::optional<kj::Exception>& failure, Type type, const std::string& code,
                 const std::string& names = "") {
  ASSERT_TRUE(failure.has_value()) << "the call succeeded; expected " << code;
  const std::string description = failure->getDescription().cStr();
  EXPECT_EQ(failure->getType(), type) << description;
  const std::string prefix = "remote exception: " + code + ": ";
  EXPECT_EQ(description.rfind(prefix, 0), 0u) << "expected the prefix '" << prefix << "': "
                                               << description;
  if (!names.empty()) {
    EXPECT_NE(description.find(names), std::string::npos)
        << "the message should name '" << names << "': " << description;
  }
}

DispatcherProcess::Options WithFlag(std::string flag) {
  DispatcherProcess::Options options;
  options.extra_flags.push_back(std::move(flag));
  return options;
}

TEST(ErrorContract, AWrongTokenIsUnauthenticatedAndTheRightOneStillPasses) {
  DispatcherProcess dispatcher(WithFlag("--token=s3cret"));
  RawPeer peer(dispatcher.address());
  auto wrong = peer.gateway().authenticateRequest();
  wrong.setToken(Bytes("guess"));
  ExpectError(peer.Failure(wrong.send()), Type::FAILED, "Unauthenticated", "token");
  // The connection stays at the gate: the right token still gets in.
  auto dispatcher_cap = peer.Authenticate("s3cret");
  EXPECT_EQ(peer.Wait(dispatcher_cap.pingRequest().send()).getPayload().size(), 0u);
}

TEST(ErrorContract, DispatcherMethodsFailWithTheirDocumentedCodes) {
  DispatcherProcess dispatcher;
  RawPeer peer(dispatcher.address());
  rpc::Dispatcher::Client d = peer.Authenticate();

  auto def = d.getDatasetDefRequest();
  def.setDatasetId(424242);
  ExpectError(peer.Failure(def.send()), Type::FAILED, "NotFound", "424242");

  auto open_zero = d.openCoordinatorRequest();
  open_zero.setCoordinatorId(0);
  ExpectError(peer.Failure(open_zero.send()), Type::FAILED, "InvalidArgument", "coordinator id 0");

  auto empty = d.getOrRegisterDatasetRequest();
  ExpectError(peer.Failure(empty.send()), Type::FAILED, "InvalidArgument", "definition");

  auto reg = d.getOrRegisterDatasetRequest();
  reg.setDefinition(Bytes("a dataset without an element spec"));
  const uint64_t dataset_id = peer.Wait(reg.send()).getDatasetId();
  auto spec = d.getElementSpecRequest();
  spec.setDatasetId(dataset_id);
  ExpectError(peer.Failure(spec.send()), Type::FAILED, "FailedPrecondition");

  // An element spec larger than one 16 MiB journal record: the one code
  // whose exception type is OVERLOADED.
  auto big = d.getOrRegisterDatasetRequest();
  big.setDefinition(Bytes("a dataset with a huge element spec"));
  big.initElementSpec((16u << 20) + 1);
  ExpectError(peer.Failure(big.send()), Type::OVERLOADED, "ResourceExhausted", "element spec");

  // Nothing of the refused calls changed anything: one dataset.
  EXPECT_EQ(peer.Wait(d.listDatasetsRequest().send()).getDatasets().size(), 1u);
}

TEST(ErrorContract, CoordinatorMethodsFailWithTheirDocumentedCodes) {
  DispatcherProcess dispatcher(WithFlag("--max-closures-per-call=2"));
  RawPeer peer(dispatcher.address());
  rpc::Dispatcher::Client d = peer.Authenticate();
  auto open = d.openCoordinatorRequest();
  open.setCoordinatorId(16);
  rpc::Coordinator::Client c = peer.Wait(open.send()).getCoordinator();

  auto cancel = c.cancelRequest();
  cancel.initClosureIds(1).set(0, 999);
  ExpectError(peer.Failure(cancel.send()), Type::FAILED, "NotFound", "closure 999");

  auto outcomes = c.getOutcomesRequest();
  outcomes.initClosureIds(1).set(0, 998);
  ExpectError(peer.Failure(outcomes.send()), Type::FAILED, "NotFound", "closure 998");

  auto schedule = c.scheduleRequest();
  auto specs = schedule.initClosures(3);
  for (unsigned i = 0; i < 3; ++i) {
    specs[i].setFunction("noop");
    specs[i].setRequestId(i + 1);
  }
  ExpectError(peer.Failure(schedule.send()), Type::FAILED, "InvalidArgument", "limit of 2");

  // One long-poll per session: a second one at the same time is refused.
  auto first = c.awaitResultsRequest().send();
  ExpectError(peer.Failure(c.awaitResultsRequest().send()), Type::FAILED, "FailedPrecondition",
              "awaitResults");
}

}  // namespace
}  // namespace dispatch::testing
