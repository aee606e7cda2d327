// Conversions between Cap'n Proto blobs and the std::string copies the state
// keeps. Internal to state/ (and its tests): the records own their bytes, so
// nothing points into an Update's message after Apply returns.
#pragma once

#include <capnp/blob.h>

#include <string>
#include <string_view>

namespace dispatch::state {

inline std::string ToString(capnp::Text::Reader text) {
  return std::string(text.cStr(), text.size());
}

inline std::string ToString(capnp::Data::Reader data) {
  return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
}

inline std::string_view ToView(capnp::Text::Reader text) {
  return std::string_view(text.cStr(), text.size());
}

inline capnp::Data::Reader AsData(const std::string& bytes) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size());
}

inline capnp::Text::Reader AsText(const std::string& text) {
  return capnp::Text::Reader(text.data(), text.size());
}

}  // namespace dispatch::state
