#include "tests/state/schema_coverage.h"

#include <capnp/schema.capnp.h>

namespace dispatch::state::testing {

namespace {

// "CreateJob.namedKey" from "schema/journal.capnp:CreateJob.namedKey".
std::string TypeName(capnp::StructSchema schema) {
  std::string name = schema.getProto().getDisplayName().cStr();
  const size_t colon = name.find(':');
  return colon == std::string::npos ? name : name.substr(colon + 1);
}

bool IsUnionMember(capnp::StructSchema::Field field) {
  return field.getProto().getDiscriminantValue() != capnp::schema::Field::NO_DISCRIMINANT;
}

}  // namespace

SchemaCoverage::SchemaCoverage(capnp::StructSchema root) : root_(root) { Collect(root); }

void SchemaCoverage::Collect(capnp::StructSchema schema) {
  const uint64_t id = schema.getProto().getId();
  if (marked_.contains(id)) return;
  marked_[id].assign(schema.getFields().size(), false);
  order_.push_back(schema);
  for (capnp::StructSchema::Field field : schema.getFields()) {
    capnp::Type type = field.getType();
    while (type.isList()) type = type.asList().getElementType();
    if (type.isStruct()) Collect(type.asStruct());
  }
}

void SchemaCoverage::Add(capnp::DynamicStruct::Reader message) {
  KJ_REQUIRE(message.getSchema() == root_, "a message of another type");
  Visit(message);
}

bool SchemaCoverage::Visit(capnp::DynamicStruct::Reader r) {
  const capnp::StructSchema schema = r.getSchema();
  std::vector<bool>& marked = marked_.at(schema.getProto().getId());
  bool any = false;
  for (capnp::StructSchema::Field field : schema.getFields()) {
    bool used = false;
    if (IsUnionMember(field)) {
      KJ_IF_MAYBE (active, r.which()) {
        if (*active != field) continue;
      } else {
        continue;  // a discriminant this schema does not know
      }
      const bool value_used = VisitValue(r.get(field), field.getType());
      used = true;
      any = any || value_used || field.getProto().getDiscriminantValue() != 0;
    } else {
      used = VisitValue(r.get(field), field.getType());
      any = any || used;
    }
    if (used) marked[field.getIndex()] = true;
  }
  return any;
}

bool SchemaCoverage::VisitValue(capnp::DynamicValue::Reader value, capnp::Type type) {
  switch (type.which()) {
    case capnp::schema::Type::VOID:
    case capnp::schema::Type::INTERFACE:
    case capnp::schema::Type::ANY_POINTER:
      return false;
    case capnp::schema::Type::BOOL:
      return value.as<bool>();
    case capnp::schema::Type::INT8:
    case capnp::schema::Type::INT16:
    case capnp::schema::Type::INT32:
    case capnp::schema::Type::INT64:
      return value.as<int64_t>() != 0;
    case capnp::schema::Type::UINT8:
    case capnp::schema::Type::UINT16:
    case capnp::schema::Type::UINT32:
    case capnp::schema::Type::UINT64:
      return value.as<uint64_t>() != 0;
    case capnp::schema::Type::FLOAT32:
    case capnp::schema::Type::FLOAT64:
      return value.as<double>() != 0;
    case capnp::schema::Type::ENUM:
      return value.as<capnp::DynamicEnum>().getRaw() != 0;
    case capnp::schema::Type::TEXT:
      return value.as<capnp::Text>().size() > 0;
    case capnp::schema::Type::DATA:
      return value.as<capnp::Data>().size() > 0;
    case capnp::schema::Type::STRUCT:
      return Visit(value.as<capnp::DynamicStruct>());
    case capnp::schema::Type::LIST: {
      capnp::DynamicList::Reader list = value.as<capnp::DynamicList>();
      const capnp::Type element = type.asList().getElementType();
      for (capnp::DynamicValue::Reader item : list) VisitValue(item, element);
      return list.size() > 0;
    }
  }
  return false;
}

std::vector<std::string> SchemaCoverage::Unmarked(const std::set<std::string>& ignore,
                                                  bool union_members_only) const {
  std::vector<std::string> out;
  for (capnp::StructSchema schema : order_) {
    const std::vector<bool>& marked = marked_.at(schema.getProto().getId());
    for (capnp::StructSchema::Field field : schema.getFields()) {
      if (marked[field.getIndex()] || (union_members_only && !IsUnionMember(field))) continue;
      std::string name = TypeName(schema) + "." + field.getProto().getName().cStr();
      if (!ignore.contains(name)) out.push_back(std::move(name));
    }
  }
  return out;
}

std::vector<std::string> SchemaCoverage::Missing(const std::set<std::string>& ignore) const {
  return Unmarked(ignore, false);
}

std::vector<std::string> SchemaCoverage::MissingUnionMembers(
    const std::set<std::string>& ignore) const {
  return Unmarked(ignore, true);
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace dispatch::state::testing
