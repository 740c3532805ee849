#include "ops/op.h"

namespace campo {

static const char* const kOpNames[] = {
#define CAMPO_NAME(name) #name,
    CAMPO_OP_KINDS(CAMPO_NAME)
#undef CAMPO_NAME
};

const char* op_name(OpKind k) {
  size_t i = size_t(k);
  return i < size_t(OpKind::kCount) ? kOpNames[i] : "?";
}

std::optional<OpKind> parse_op_kind(std::string_view name) {
  for (size_t i = 0; i < size_t(OpKind::kCount); ++i)
    if (name == kOpNames[i]) return OpKind(i);
  return std::nullopt;
}

const char* amp_list_name(AmpList l) {
  switch (l) {
    case AmpList::allow:
      return "allow";
    case AmpList::infer:
      return "infer";
    case AmpList::deny:
      return "deny";
    case AmpList::clear:
      return "clear";
    case AmpList::fp32:
      return "fp32";
  }
  return "?";
}

}  // namespace campo
