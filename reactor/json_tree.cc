#include "reactor/json_tree.h"

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/debug.h>

namespace dispatch::reactor {
namespace {

void Build(const Json& json, capnp::JsonValue::Builder out) {
  const auto& v = json.value();
  if (std::holds_alternative<std::monostate>(v)) {
    out.setNull();
  } else if (auto* b = std::get_if<bool>(&v)) {
    out.setBoolean(*b);
  } else if (auto* d = std::get_if<double>(&v)) {
    out.setNumber(*d);
  } else if (auto* s = std::get_if<std::string>(&v)) {
    out.setString(capnp::Text::Reader(s->data(), s->size()));
  } else if (auto* a = std::get_if<Json::Array>(&v)) {
    auto list = out.initArray(static_cast<unsigned>(a->size()));
    for (size_t i = 0; i < a->size(); ++i) Build((*a)[i], list[i]);
  } else if (auto* o = std::get_if<Json::Object>(&v)) {
    auto fields = out.initObject(static_cast<unsigned>(o->size()));
    for (size_t i = 0; i < o->size(); ++i) {
      const auto& [name, value] = (*o)[i];
      fields[i].setName(capnp::Text::Reader(name.data(), name.size()));
      Build(value, fields[i].initValue());
    }
  }
}

}  // namespace

Json& Json::Set(std::string name, Json value) {
  auto* object = std::get_if<Object>(&value_);
  KJ_REQUIRE(object != nullptr, "Json::Set on a value that is not an object");
  object->emplace_back(std::move(name), std::move(value));
  return object->back().second;
}

Json& Json::Push(Json value) {
  auto* array = std::get_if<Array>(&value_);
  KJ_REQUIRE(array != nullptr, "Json::Push on a value that is not an array");
  array->push_back(std::move(value));
  return array->back();
}

std::string Json::Encode() const {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<capnp::JsonValue>();
  Build(*this, root);
  capnp::JsonCodec codec;
  kj::String text = codec.encodeRaw(root.asReader());
  return std::string(text.cStr(), text.size());
}

}  // namespace dispatch::reactor
