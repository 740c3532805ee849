#include "amp/lists.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/graph.h"

namespace campo {

AmpLists AmpLists::defaults() {
  AmpLists l;
  for (size_t k = 0; k < size_t(OpKind::kCount); ++k) {
    OpKind op = OpKind(k);
    AmpList list = op_schema(op).amp_list;
    if (list != AmpList::fp32) l.mutable_list(list).insert(op);
  }
  return l;
}

std::set<OpKind>& AmpLists::mutable_list(AmpList l) {
  switch (l) {
    case AmpList::allow: return allow_;
    case AmpList::infer: return infer_;
    case AmpList::deny: return deny_;
    case AmpList::clear: return clear_;
    default: CAMPO_FAIL("fp32 is not an editable mixed-precision list");
  }
}

const std::set<OpKind>& AmpLists::list(AmpList l) const {
  return const_cast<AmpLists*>(this)->mutable_list(l);
}

AmpList AmpLists::classify(OpKind op) const {
  if (allow_.count(op)) return AmpList::allow;
  if (infer_.count(op)) return AmpList::infer;
  if (deny_.count(op)) return AmpList::deny;
  if (clear_.count(op)) return AmpList::clear;
  return AmpList::fp32;
}

void AmpLists::add(AmpList list, OpKind op) {
  CAMPO_CHECK(op != OpKind::Variable && op != OpKind::Placeholder && op != OpKind::Cast &&
                  op != OpKind::ApplyMomentum && op != OpKind::ApplyAdam &&
                  op != OpKind::AllFinite,
              op_name(op), " always runs in f32 and cannot be put on a mixed-precision list");
  for (AmpList l : {AmpList::allow, AmpList::infer, AmpList::deny, AmpList::clear})
    mutable_list(l).erase(op);
  mutable_list(list).insert(op);
}

void AmpLists::remove(AmpList list, OpKind op) { mutable_list(list).erase(op); }

AmpList parse_amp_list(const std::string& name) {
  if (name == "allow") return AmpList::allow;
  if (name == "infer") return AmpList::infer;
  if (name == "deny") return AmpList::deny;
  if (name == "clear") return AmpList::clear;
  CAMPO_FAIL("unknown mixed-precision list '", name, "' (expected allow, infer, deny or clear)");
}

static OpKind parse_op_or_fail(const std::string& name) {
  auto op = parse_op_kind(name);
  CAMPO_CHECK(op.has_value(), "unknown op '", name, "' in a mixed-precision list edit");
  return *op;
}

void AmpLists::edit(const std::string& spec) {
  std::stringstream all(spec);
  std::string one;
  while (std::getline(all, one, ';')) {
    if (one.empty()) continue;
    size_t pos = one.find("+=");
    bool adding = pos != std::string::npos;
    if (!adding) pos = one.find("-=");
    CAMPO_CHECK(pos != std::string::npos, "list edit '", one,
                "' must look like allow+=Op1,Op2 or clear-=Op");
    AmpList list = parse_amp_list(one.substr(0, pos));
    std::stringstream ops(one.substr(pos + 2));
    std::string op;
    while (std::getline(ops, op, ','))
      if (!op.empty()) adding ? add(list, parse_op_or_fail(op)) : remove(list, parse_op_or_fail(op));
  }
}

void AmpLists::edit_from_file(const std::string& path) {
  std::ifstream f(path);
  CAMPO_CHECK(f.good(), "cannot open mixed-precision list file '", path, "'");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    CAMPO_FAIL("mixed-precision list file '", path, "' is not valid JSON: ", e.what());
  }
  CAMPO_CHECK(j.is_object(), "mixed-precision list file '", path, "' must hold a JSON object");
  for (auto& [name, edits] : j.items()) {
    AmpList list = parse_amp_list(name);
    CAMPO_CHECK(edits.is_object(), "'", name, "' in '", path,
                "' must be an object with \"add\" and/or \"remove\" arrays");
    for (auto& [what, ops] : edits.items()) {
      CAMPO_CHECK((what == "add" || what == "remove") && ops.is_array(), "'", name, ".", what,
                  "' in '", path, "': expected \"add\" or \"remove\" with an array of op names");
      for (auto& op : ops) {
        CAMPO_CHECK(op.is_string(), "op names in '", path, "' must be strings");
        what == "add" ? add(list, parse_op_or_fail(op)) : remove(list, parse_op_or_fail(op));
      }
    }
  }
}

std::string AmpLists::describe() const {
  std::ostringstream os;
  for (AmpList l : {AmpList::allow, AmpList::infer, AmpList::deny, AmpList::clear}) {
    os << amp_list_name(l) << ":";
    for (OpKind op : list(l)) os << " " << op_name(op);
    os << "\n";
  }
  return os.str();
}

}  // namespace campo
