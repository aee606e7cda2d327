// SchemaCoverage: which fields of a Cap'n Proto schema a set of messages uses.
// It walks, by reflection, every struct type reachable from a root type (union
// members, groups, struct fields and lists of structs); Add(message) marks each
// field of each struct it meets that holds a non-default value (a nonzero
// number or enum, true, non-empty text, data or list, a struct with a marked
// field) and each union member that is active. A field added to the schema is
// unmarked until the code under test fills it, so tests that feed generated
// updates or snapshots through it fail on a variant or field that the
// generator, the builders or the snapshot writer forgot.
#pragma once

#include <capnp/dynamic.h>
#include <capnp/schema.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dispatch::state::testing {

class SchemaCoverage {
 public:
  explicit SchemaCoverage(capnp::StructSchema root);

  // REQUIRES: `message` is of the root type.
  void Add(capnp::DynamicStruct::Reader message);

  // Fields never marked, as "Struct.field" ("CreateJob.namedKey.named" for a
  // group's), in schema order; `ignore` lists names not to report.
  std::vector<std::string> Missing(const std::set<std::string>& ignore = {}) const;
  // Only the union members among them: variants never taken.
  std::vector<std::string> MissingUnionMembers(const std::set<std::string>& ignore = {}) const;

 private:
  // Marks the fields of `r`; true when any field of it holds a non-default
  // value or a union member other than the first is active.
  bool Visit(capnp::DynamicStruct::Reader r);
  bool VisitValue(capnp::DynamicValue::Reader value, capnp::Type type);
  void Collect(capnp::StructSchema schema);
  std::vector<std::string> Unmarked(const std::set<std::string>& ignore,
                                    bool union_members_only) const;

  capnp::StructSchema root_;
  // Every reachable struct type in the order found, and by type id whether
  // each of its fields (by index) was marked.
  std::vector<capnp::StructSchema> order_;
  std::map<uint64_t, std::vector<bool>> marked_;
};

// "a, b, c" for messages.
std::string JoinNames(const std::vector<std::string>& names);

}  // namespace dispatch::state::testing
