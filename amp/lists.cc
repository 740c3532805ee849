#include "amp/lists.h"

#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "amp/json_input.h"
#include "graph/graph.h"

namespace campo {

namespace {

struct ListedOp {
  OpKind op;
  AmpList list;
};

// CUDA, f16 and bf16: TensorFlow's CUDA lists, AutoMixedPrecisionListsFp16 (formerly
// AutoMixedPrecisionListsCuda) in tensorflow/core/grappler/optimizers/
// auto_mixed_precision_lists.h, restricted to campo's ops. TensorFlow has no CUDA bf16
// lists (its bf16 rewrite runs on the CPU only, with the oneDNN lists); bf16 on CUDA takes
// the same ones, as PyTorch's CUDA autocast has one op list for both types.
//
// Where they differ from the CPU's (the schemas' lists): nowhere, for campo's ops. The one
// place TensorFlow's own lists differ for them is Mean and Sum: deny in the CUDA lists, infer
// in today's oneDNN bf16 lists (AutoMixedPrecisionListsMkl, same file; deny there too in
// earlier versions). campo's CPU keeps them on deny, as it always has (the pinned losses of
// tests/train/loss_pin_test.cc), so CUDA and CPU agree today; an op added to the CPU's lists
// needs its CUDA list here (AmpListsTest.EveryListedOpHasACudaList), since TensorFlow's two
// sets of lists differ for ops campo does not have yet (Rsqrt, Square, SquaredDifference:
// oneDNN infer, CUDA none; OneHot: CUDA clear only).
//
// TensorFlow's names: FusedBatchNorm(Grad) is its FusedBatchNorm(Grad)V2/V3 (the rewrite
// turns V1 into V2 first), Add its Add/AddV2. Not TensorFlow ops, on the CPU's lists:
// Dropout (TensorFlow composes it of GreaterEqual/Select, clear, and Mul, infer: clear here,
// a mask multiply), SigmoidCrossEntropyWithLogits(Grad) (composed of Exp, deny), MeanGrad
// (Mean's gradient: BroadcastTo, clear, then RealDiv, infer).
constexpr ListedOp kCudaLists[] = {
    {OpKind::Conv2D, AmpList::allow},
    {OpKind::Conv2DBackpropInput, AmpList::allow},
    {OpKind::Conv2DBackpropFilter, AmpList::allow},
    {OpKind::MatMul, AmpList::allow},
    {OpKind::BatchMatMulV2, AmpList::allow},  // TensorFlow's from CUDA 9.1
    {OpKind::Add, AmpList::infer},
    {OpKind::AddN, AmpList::infer},
    {OpKind::AvgPool, AmpList::infer},
    {OpKind::AvgPoolGrad, AmpList::infer},
    {OpKind::BiasAdd, AmpList::infer},
    {OpKind::BiasAddGrad, AmpList::infer},
    {OpKind::FusedBatchNorm, AmpList::infer},
    {OpKind::FusedBatchNormGrad, AmpList::infer},
    {OpKind::LeakyRelu, AmpList::infer},
    {OpKind::LeakyReluGrad, AmpList::infer},
    {OpKind::Mul, AmpList::infer},
    {OpKind::Sigmoid, AmpList::infer},
    {OpKind::SigmoidGrad, AmpList::infer},
    {OpKind::Tanh, AmpList::infer},
    {OpKind::TanhGrad, AmpList::infer},
    {OpKind::MeanGrad, AmpList::infer},
    // Softmax: infer in TensorFlow's CUDA (and oneDNN) lists. SoftmaxGrad, Gelu(Grad) and
    // LayerNorm(Grad) are not TensorFlow ops: the CPU's lists, whose reasons (ops/softmax.cc,
    // ops/elementwise.cc, ops/layer_norm.cc) come from TensorFlow's CUDA lists too.
    {OpKind::Softmax, AmpList::infer},
    {OpKind::SoftmaxGrad, AmpList::infer},
    {OpKind::Gelu, AmpList::infer},
    {OpKind::GeluGrad, AmpList::infer},
    {OpKind::LayerNorm, AmpList::infer},
    {OpKind::LayerNormGrad, AmpList::infer},
    {OpKind::Mean, AmpList::deny},
    {OpKind::Sum, AmpList::deny},
    {OpKind::SparseSoftmaxCrossEntropyWithLogits, AmpList::deny},
    {OpKind::SigmoidCrossEntropyWithLogits, AmpList::deny},
    {OpKind::SigmoidCrossEntropyWithLogitsGrad, AmpList::deny},
    {OpKind::BroadcastTo, AmpList::clear},
    {OpKind::MaxPool, AmpList::clear},
    {OpKind::MaxPoolGrad, AmpList::clear},
    {OpKind::Relu, AmpList::clear},
    {OpKind::ReluGrad, AmpList::clear},
    {OpKind::Reshape, AmpList::clear},
    {OpKind::ConcatV2, AmpList::clear},
    {OpKind::SplitV, AmpList::clear},
    {OpKind::Transpose, AmpList::clear},
    // GatherV2: clear in TensorFlow's CUDA (and oneDNN) lists. UnsortedSegmentSum, its
    // gradient, is on none of TensorFlow's lists, so it stays f32 on both devices.
    {OpKind::GatherV2, AmpList::clear},
    {OpKind::Dropout, AmpList::clear},
};

}  // namespace

AmpLists AmpLists::defaults(Device device, DType low) {
  CAMPO_CHECK(is_low_precision(low), "mixed-precision lists are for bf16 or f16, not ",
              dtype_name(low));
  AmpLists l;
  switch (device) {
    case Device::cpu:
    case Device::cpu_strict:
      for (size_t k = 0; k < size_t(OpKind::kCount); ++k) {
        const OpKind op = OpKind(k);
        const AmpList list = op_schema(op).amp_list;
        if (list != AmpList::fp32) l.mutable_list(list).insert(op);
      }
      return l;
    case Device::cuda:
      for (const ListedOp& e : kCudaLists) l.add(e.list, e.op);
      return l;
  }
  CAMPO_FAIL("no mixed-precision lists for device ", device_name(device));
}

std::set<OpKind>& AmpLists::mutable_list(AmpList l) {
  switch (l) {
    case AmpList::allow:
      return allow_;
    case AmpList::infer:
      return infer_;
    case AmpList::deny:
      return deny_;
    case AmpList::clear:
      return clear_;
    default:
      CAMPO_FAIL("fp32 is not an editable mixed-precision list");
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

bool AmpLists::may_be_listed(OpKind op) {
  return op != OpKind::Variable && op != OpKind::Placeholder && op != OpKind::Cast &&
         op != OpKind::ApplyMomentum && op != OpKind::ApplyAdam && op != OpKind::AllFinite &&
         op != OpKind::AllReduceStart && op != OpKind::AllReduceWait;
}

void AmpLists::add(AmpList list, OpKind op) {
  CAMPO_CHECK(may_be_listed(op), op_name(op),
              " always runs in f32 and cannot be put on a mixed-precision list");
  for (AmpList l : {AmpList::allow, AmpList::infer, AmpList::deny, AmpList::clear})
    mutable_list(l).erase(op);
  mutable_list(list).insert(op);
}

void AmpLists::remove(AmpList list, OpKind op) { mutable_list(list).erase(op); }

bool needs_range(OpKind op) {
  switch (op) {
    case OpKind::Softmax:
    case OpKind::SoftmaxGrad:
    case OpKind::SparseSoftmaxCrossEntropyWithLogits:
    case OpKind::SigmoidCrossEntropyWithLogits:
    case OpKind::SigmoidCrossEntropyWithLogitsGrad:
    case OpKind::FusedBatchNorm:
    case OpKind::FusedBatchNormGrad:
    case OpKind::LayerNorm:
    case OpKind::LayerNormGrad:
    case OpKind::Mean:
    case OpKind::MeanGrad:
    case OpKind::Sum:
      return true;
    default:
      return false;
  }
}

AmpList parse_amp_list(const std::string& name) {
  if (name == "allow") return AmpList::allow;
  if (name == "infer") return AmpList::infer;
  if (name == "deny") return AmpList::deny;
  if (name == "clear") return AmpList::clear;
  CAMPO_FAIL("unknown mixed-precision list '", name, "' (expected allow, infer, deny or clear)");
}

namespace {

using nlohmann::json;

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// One edit, parsed and checked before any is applied; `where` says where it came from.
struct ListEdit {
  AmpList list;
  bool adding;
  OpKind op;
  std::string where;
};

AmpList parse_list_in(const std::string& name, const std::string& where) {
  try {
    return parse_amp_list(name);
  } catch (const Error& e) {
    CAMPO_FAIL(where, ": ", e.what());
  }
}

// Each op is edited at most once per spec or file: two edits of one op (allow+=Tanh and
// deny+=Tanh) would leave the result to their order, which is easy to get wrong unseen.
void check_each_op_once(const std::vector<ListEdit>& edits) {
  for (size_t i = 0; i < edits.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      CAMPO_CHECK(edits[k].op != edits[i].op, edits[i].where, ": ", op_name(edits[i].op),
                  " is edited twice (also in ", edits[k].where, "); edit each op once");
}

// Checked in full first, so a failing edit leaves the lists as they were.
void apply_edits(AmpLists& lists, const std::vector<ListEdit>& edits) {
  check_each_op_once(edits);
  for (const ListEdit& e : edits) {
    if (e.adding)
      CAMPO_CHECK(AmpLists::may_be_listed(e.op), e.where, ": ", op_name(e.op),
                  " always runs in f32 and cannot be put on a mixed-precision list");
    else
      CAMPO_CHECK(lists.list(e.list).count(e.op), e.where, ": ", op_name(e.op), " is not on the ",
                  amp_list_name(e.list), " list (",
                  lists.classify(e.op) == AmpList::fp32
                      ? std::string("it is on none")
                      : std::string("it is on ") + amp_list_name(lists.classify(e.op)),
                  "), so there is nothing to remove");
  }
  for (const ListEdit& e : edits) e.adding ? lists.add(e.list, e.op) : lists.remove(e.list, e.op);
}

}  // namespace

void AmpLists::edit(const std::string& spec) {
  std::vector<ListEdit> edits;
  std::stringstream all(spec);
  std::string one;
  while (std::getline(all, one, ';')) {
    if (trimmed(one).empty()) continue;  // "a;;b" and a trailing ';' are harmless
    const std::string where = "mixed-precision list edit '" + shown(trimmed(one)) + "'";
    size_t pos = one.find("+=");
    const bool adding = pos != std::string::npos;
    if (!adding) pos = one.find("-=");
    CAMPO_CHECK(pos != std::string::npos, where,
                " must look like allow+=Op1,Op2 or clear-=Op (lists: allow, infer, deny, ",
                "clear; edits separated by ';')");
    const AmpList list = parse_list_in(trimmed(one.substr(0, pos)), where);
    const std::string names = one.substr(pos + 2);
    CAMPO_CHECK(!trimmed(names).empty(), where, " names no op (allow+=Op1,Op2)");
    std::stringstream ops(names + ",");  // the comma keeps a trailing empty name
    std::string op;
    while (std::getline(ops, op, ','))
      edits.push_back({list, adding, parse_op_in(trimmed(op), where), where});
  }
  CAMPO_CHECK(!edits.empty(), "mixed-precision list edits '", shown(spec),
              "' hold no edit (expected e.g. allow+=Tanh;clear-=Relu)");
  apply_edits(*this, edits);
}

void AmpLists::edit_from_file(const std::string& path) { edit_from_file(path, {this}); }

void AmpLists::edit_from_file(const std::string& path, const std::vector<AmpLists*>& lists) {
  const json j = read_json_file(path, "mixed-precision list file");
  const std::string file = "mixed-precision list file " + path;
  const char* shape =
      " (expected {\"allow\": {\"add\": [\"Tanh\"], \"remove\": [\"MatMul\"]}, ...})";
  CAMPO_CHECK(j.is_object(), file, " must hold a JSON object", shape);
  std::vector<ListEdit> edits;
  for (const auto& [name, list_edits] : j.items()) {
    const AmpList list = parse_list_in(name, file);
    CAMPO_CHECK(list_edits.is_object(), file, ": \"", name,
                "\" must be an object with \"add\" and/or \"remove\" arrays", shape);
    for (const auto& [what, ops] : list_edits.items()) {
      const std::string where = file + ", " + name + "." + shown(what);
      CAMPO_CHECK(what == "add" || what == "remove", where, ": expected \"add\" or \"remove\"");
      CAMPO_CHECK(ops.is_array(), where, " must be an array of op names");
      for (const json& op : ops) {
        CAMPO_CHECK(op.is_string(), where, ": op names are strings, got ", shown(op.dump()));
        edits.push_back({list, what == "add", parse_op_in(op.get<std::string>(), where), where});
      }
    }
  }
  for (AmpLists* l : lists) apply_edits(*l, edits);
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
