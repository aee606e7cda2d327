#include "clients/element_list.h"

#include <capnp/orphan.h>

namespace dispatch::clients {

void SetElementList(const std::vector<std::string>& elements, capnp::List<capnp::Data>::Builder list) {
  auto orphanage = capnp::Orphanage::getForMessageContaining(list);
  size_t external = 0;
  for (size_t i = 0; i < elements.size(); ++i) {
    const std::string& e = elements[i];
    capnp::Data::Reader bytes(reinterpret_cast<const capnp::byte*>(e.data()), e.size());
    if (e.size() >= kExternalElementBytes && external++ < kMaxExternalElements) {
      // Written from where it lies: no zeroed segment, no copy.
      list.adopt(static_cast<unsigned>(i), orphanage.referenceExternalData(bytes));
    } else {
      list.set(static_cast<unsigned>(i), bytes);
    }
  }
}

}  // namespace dispatch::clients
