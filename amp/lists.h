// TensorFlow's auto-mixed-precision op lists (allow / infer / deny / clear), per device and
// low-precision type, editable per list the way TensorFlow's
// TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_{ALLOW,INFER,DENY,CLEAR}LIST_{ADD,REMOVE}
// environment variables allow. An op is in at most one list; ops in none stay f32.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ops/op.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace campo {

class AmpLists {
 public:
  // The lists of `device` for the low-precision type `low` (bf16 or f16). The CPU's (bf16,
  // and f16, emulated) are the op schemas' own (OpSchema::amp_list, DESIGN.md's lists);
  // CUDA's (f16 and bf16) follow TensorFlow's CUDA lists (the table in lists.cc says where
  // and why they differ from the CPU's). Device::cpu_strict (--device cpu:strict) runs the
  // CPU's kernels and has the CPU's lists.
  static AmpLists defaults(Device device, DType low);

  AmpList classify(OpKind op) const;  // AmpList::fp32 when in no list
  // Adds `op` to `list` (removing it from any other list) or removes it from `list`.
  void add(AmpList list, OpKind op);
  void remove(AmpList list, OpKind op);
  // Applies edits written as "allow+=Tanh,Sigmoid" / "clear-=Relu"; several separated by
  // ';' (spaces around names allowed, empty edits between ';' skipped).
  void edit(const std::string& spec);
  // Applies a JSON file {"allow": {"add": ["Tanh"], "remove": ["MatMul"]}, ...}.
  // Both check every edit before applying any, and throw one line naming the edit (and the
  // file) for: an unknown list or op, an empty op name, an edit with no op, an op edited
  // twice in one spec or file, an always-f32 op added, an op removed from a list it is not
  // on; the file also for: not a regular file (a FIFO would hang), invalid JSON, a key
  // twice in one object, and anything not of the shape above.
  void edit_from_file(const std::string& path);
  // The same edits, read once, to each of `lists` (--low-precision auto's f16 and bf16 lists).
  static void edit_from_file(const std::string& path, const std::vector<AmpLists*>& lists);
  // Whether an op may be put on a list (leaves, casts and optimizer updates may not).
  static bool may_be_listed(OpKind op);
  const std::set<OpKind>& list(AmpList l) const;
  std::string describe() const;

 private:
  std::set<OpKind> allow_, infer_, deny_, clear_;
  std::set<OpKind>& mutable_list(AmpList l);
};

AmpList parse_amp_list(const std::string& name);

// Ops whose results need f32's exponent range: never f16 when the three-way search picks the
// type per op (amp/three_way.h), though bf16 (f32's range) where the lists allow. Softmax and
// the losses (exponentials, logarithms), batch/layer-norm (statistics: sums of squares),
// Mean and Sum (reductions; on the deny list anyway), and the gradients of these.
bool needs_range(OpKind op);

}  // namespace campo
