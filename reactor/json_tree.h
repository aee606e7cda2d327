// Json: a small JSON document built in C++ and encoded by Cap'n Proto's JSON
// codec (capnp/compat/json.h, through its JsonValue), so escaping and number
// formatting are the codec's, not ours. For /api/status. Object members keep
// the order they were set in.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace dispatch::reactor {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;  // null
  Json(bool b) : value_(b) {}
  Json(double d) : value_(d) {}
  Json(int i) : value_(static_cast<double>(i)) {}
  Json(int64_t i) : value_(static_cast<double>(i)) {}
  Json(uint64_t u) : value_(static_cast<double>(u)) {}
  Json(uint32_t u) : value_(static_cast<double>(u)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(Array a) : value_(std::move(a)) {}
  Json(Object o) : value_(std::move(o)) {}

  static Json MakeArray() { return Json(Array{}); }
  static Json MakeObject() { return Json(Object{}); }

  // REQUIRES: an object. Appends the member (names are not checked for repeats).
  Json& Set(std::string name, Json value);
  // REQUIRES: an array.
  Json& Push(Json value);

  // The document as compact JSON text.
  std::string Encode() const;

  const auto& value() const { return value_; }

 private:
  std::variant<std::monostate, bool, double, std::string, Array, Object> value_;
};

}  // namespace dispatch::reactor
