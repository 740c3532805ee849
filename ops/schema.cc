#include "ops/schema.h"

#include <array>

namespace campo {

namespace {
std::array<OpSchema, size_t(OpKind::kCount)>& schema_table() {
  static std::array<OpSchema, size_t(OpKind::kCount)> t{};
  return t;
}
std::array<bool, size_t(OpKind::kCount)>& schema_present() {
  static std::array<bool, size_t(OpKind::kCount)> p{};
  return p;
}
}  // namespace

void register_schema(const OpSchema& schema) {
  schema_table()[size_t(schema.kind)] = schema;
  schema_present()[size_t(schema.kind)] = true;
}

const OpSchema& op_schema(OpKind kind) {
  CAMPO_CHECK(size_t(kind) < size_t(OpKind::kCount) && schema_present()[size_t(kind)],
              "internal: op ", op_name(kind), " has no registered schema");
  return schema_table()[size_t(kind)];
}

}  // namespace campo
