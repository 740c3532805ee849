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

UpdateLayout update_layout(OpKind kind, const Attrs& attrs) {
  if (kind == OpKind::ApplyMomentum) {
    const auto& a = attrs_as<MomentumAttrs>(attrs);
    return {.tensors = a.tensors, .roles = 3, .shared = 1, .has_flag = a.skip_if_not_finite};
  }
  CAMPO_CHECK(kind == OpKind::ApplyAdam, "internal: update_layout of ", op_name(kind),
              ", which is not an optimizer update");
  const auto& a = attrs_as<AdamAttrs>(attrs);
  return {.tensors = a.tensors, .roles = 4, .shared = 2, .has_flag = a.skip_if_not_finite};
}

}  // namespace campo
