#include "clients/dataset_client.h"

namespace dispatch::clients {
namespace {

kj::ArrayPtr<const kj::byte> Bytes(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

}  // namespace

kj::Promise<RegisteredDataset> RegisterDataset(rpc::Dispatcher::Client dispatcher,
                                               const DatasetSpec& spec) {
  auto request = dispatcher.getOrRegisterDatasetRequest();
  request.setDefinition(Bytes(spec.definition));
  auto source = request.initSplitSource();
  if (!spec.explicit_splits.empty()) {
    auto list = source.initExplicit(spec.explicit_splits.size());
    for (size_t i = 0; i < spec.explicit_splits.size(); ++i) {
      list.set(i, Bytes(spec.explicit_splits[i]));
    }
  } else if (spec.num_splits > 0) {
    source.setIndexed(spec.num_splits);
  } else {
    source.setNone();
  }
  request.setElementSpec(Bytes(spec.element_spec));
  request.setMetadata(Bytes(spec.metadata));
  return request.send().then([](capnp::Response<rpc::Dispatcher::GetOrRegisterDatasetResults> r) {
    return RegisteredDataset{r.getDatasetId(), r.getIncarnation()};
  });
}

}  // namespace dispatch::clients
