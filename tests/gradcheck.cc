#include "tests/gradcheck.h"

#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "tests/test_util.h"

namespace campo::testing {

std::vector<Tensor> run_op(OpKind kind, const Attrs& attrs, const std::vector<Tensor>& inputs,
                           DType dtype) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  std::vector<ValueId> ins;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(b.placeholder("in" + std::to_string(i), inputs[i].shape(), inputs[i].dtype()));
  NodeId id = g.add_node(kind, ins, attrs, "op", dtype);
  std::vector<TensorDesc> outs;
  for (ValueId v : g.node(id).outputs) outs.push_back(desc_of(g, v));
  ExecContext ctx;
  std::vector<Tensor> copies;
  for (const Tensor& t : inputs) copies.push_back(t.clone());  // in-place ops must not touch ours
  return run_op_eager(kind, attrs, dtype, copies, outs, ctx);
}

::testing::AssertionResult check_gradients(OpKind kind, const Attrs& attrs,
                                           const std::vector<Tensor>& inputs,
                                           const GradCheckOptions& opts) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  Rng rng(opts.seed);
  std::vector<ValueId> ins;
  std::vector<int> check = opts.check_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    if (inputs[i].dtype() == DType::f32) {
      ins.push_back(b.variable_exact(name, inputs[i].shape(), Init::zeros(),
                                     VariableKind::parameter));
      vars.at(name).copy_from(inputs[i]);
      if (opts.check_inputs.empty()) check.push_back(int(i));
    } else {
      ins.push_back(b.placeholder(name, inputs[i].shape(), inputs[i].dtype()));
    }
  }
  std::vector<ValueId> outs = b.op_multi(kind, ins, attrs, "op");
  std::vector<int> loss_outputs = opts.loss_outputs.empty() ? std::vector<int>{0} : opts.loss_outputs;
  std::vector<ValueId> terms;
  std::vector<std::pair<std::string, Tensor>> weights;
  for (int k : loss_outputs) {
    ValueId out = outs.at(size_t(k));
    std::string name = "r" + std::to_string(k);
    ValueId r = b.placeholder(name, g.value(out).shape);
    weights.push_back({name, random_tensor(g.value(out).shape, rng)});
    terms.push_back(b.sum(b.mul(out, r)));
  }
  ValueId loss = b.add_n(terms);
  ValueId seed = b.placeholder("seed", g.value(loss).shape);
  std::vector<ValueId> wrt;
  for (int i : check) wrt.push_back(ins.at(size_t(i)));
  std::vector<ValueId> grads = append_gradients(b, loss, seed, wrt);
  CompileOptions co;
  co.fetches = {loss};
  for (ValueId gv : grads)
    if (gv != kNoValue) co.fetches.push_back(gv);
  Executable exe(g, vars, co);
  for (auto& [name, t] : weights) exe.input(name).copy_from(t);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].dtype() != DType::f32) exe.input("in" + std::to_string(i)).copy_from(inputs[i]);
  exe.input("seed").data_as<float>()[0] = 1.0f;

  auto run_loss = [&]() {
    exe.context().rng.reseed(opts.seed);
    exe.run();
    return double(exe.output(loss).data_as<float>()[0]);
  };
  run_loss();
  std::vector<std::vector<float>> analytic;
  for (ValueId gv : grads) analytic.push_back(gv == kNoValue ? std::vector<float>{}
                                                              : exe.output(gv).to_float_vector());
  for (size_t c = 0; c < check.size(); ++c) {
    int i = check[c];
    Tensor& x = vars.at("in" + std::to_string(i));
    std::vector<float> numeric(size_t(x.numel()));
    float* p = x.data_as<float>();
    for (int64_t e = 0; e < x.numel(); ++e) {
      const float saved = p[e];
      p[e] = saved + opts.eps;
      double plus = run_loss();
      p[e] = saved - opts.eps;
      double minus = run_loss();
      p[e] = saved;
      numeric[size_t(e)] = float((plus - minus) / (2.0 * double(opts.eps)));
    }
    if (analytic[c].empty()) {
      bool all_zero = true;
      for (float v : numeric) all_zero &= std::fabs(v) <= opts.atol;
      if (!all_zero)
        return ::testing::AssertionFailure()
               << op_name(kind) << ": autodiff gave no gradient for input " << i
               << " but finite differences are non-zero";
      continue;
    }
    auto r = all_close(analytic[c], numeric, opts.rtol, opts.atol);
    if (!r) return ::testing::AssertionFailure() << op_name(kind) << " input " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace campo::testing
