// DispatcherService::getSplit: dynamic sharding, decided by
// state::PlanGetSplit (state/split_planner.h: splits in order, each exactly
// once per repetition, a retry answered as the first time). Here: decode the
// request, carry the plan (its ProduceSplit), and encode the answer with the
// split source's payloads.

#include <string>
#include <vector>

#include "reactor/data_service.h"
#include "reactor/service_util.h"
#include "reactor/services.h"
#include "state/split_planner.h"

namespace dispatch::reactor {

namespace {

void FillSplits(const SplitSourceInfo& source, const std::vector<uint64_t>& indices,
                capnp::List<rpc::Split>::Builder splits) {
  for (size_t i = 0; i < indices.size(); ++i) {
    splits[i].setIndex(indices[i]);
    if (source.kind == SplitSourceInfo::Kind::kExplicit && indices[i] < source.payloads.size()) {
      const std::string& payload = source.payloads[indices[i]];
      splits[i].setPayload(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(payload.data()),
                                               payload.size()));
    }
  }
}

}  // namespace

kj::Promise<void> DispatcherService::getSplit(GetSplitContext context) {
  DataService& data = this->data();
  auto request = context.getParams().getRequest();
  const state::GetSplitRequest decoded{request.getTaskId(), request.getProviderIndex(),
                                       request.getSequence(), request.getRepetition(),
                                       request.getMaxSplits()};
  state::GetSplitPlan plan = ValueOrThrow(state::PlanGetSplit(
      data.state(), decoded, data.split_sources(), data.Stamp(), data.policy()));
  ThrowIfError(data.Carry(plan.updates));
  const state::SplitAnswer& answer = plan.answer;
  if (!plan.updates.empty()) data.mutable_stats().splits_handed_out += answer.split_indices.size();

  const SplitSourceInfo& source = *ValueOrThrow(data.datasets().SplitSource(plan.dataset_id));
  auto response = context.getResults().initResponse();
  response.setIncarnation(data.incarnation());
  response.setRepetition(answer.repetition);
  response.setEndOfSplits(answer.end_of_splits);
  FillSplits(source, answer.split_indices,
             response.initSplits(static_cast<unsigned>(answer.split_indices.size())));
  return data.durable().pipeline().Barrier();
}

}  // namespace dispatch::reactor
