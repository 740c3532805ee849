// The emulated low-precision kernel and the native-bf16 capability check
// (ops/cpu/low_precision.h).
#include "ops/cpu/low_precision.h"

#include <omp.h>

#include <atomic>

namespace campo {
namespace {

constexpr size_t kAlignment = 64;

size_t round_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// One low-precision argument staged through f32: where it lies in the context's emulation
// workspace and its own type.
struct Staged {
  int index;
  DType dtype;
  size_t offset;  // bytes into the workspace
};

// run(): low-precision inputs -> f32 (exact), f32 kernel, f32 outputs -> their low-precision
// type (one rounding each). Arguments that are not low precision are handed to the f32
// kernel as they are.
class EmulatedKernel final : public Kernel {
 public:
  EmulatedKernel(const KernelSpec& spec, ExecContext& ctx) : spec_(spec) {
    CAMPO_CHECK(is_low_precision(spec.dtype), "internal: emulated kernel of ", op_name(spec.kind),
                " requested for ", dtype_name(spec.dtype));
    KernelSpec f32 = spec;
    f32.dtype = DType::f32;
    size_t bytes = 0;
    auto stage = [&](std::vector<TensorDesc>& descs, std::vector<Staged>& staged) {
      for (size_t i = 0; i < descs.size(); ++i) {
        if (!is_low_precision(descs[i].dtype)) continue;
        staged.push_back({int(i), descs[i].dtype, bytes});
        bytes += round_up(size_t(shape_numel(descs[i].shape)) * sizeof(float));
        descs[i].dtype = DType::f32;
      }
    };
    stage(f32.inputs, staged_inputs_);
    stage(f32.outputs, staged_outputs_);
    offset_ = ctx.reserve_workspace(bytes);
    ExecContext::WorkspaceFloor floor(ctx, offset_ + bytes);  // the f32 kernel's own after
    inner_ = create_kernel(f32, ctx);
    inner_inputs_.resize(spec.inputs.size());
    inner_outputs_.resize(spec.outputs.size());
  }

  void before_run(ExecContext& ctx) override { inner_->before_run(ctx); }
  void after_run(ExecContext& ctx) override { inner_->after_run(ctx); }
  std::string capture_blocker() const override { return inner_->capture_blocker(); }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    bind(ctx, in, out);
    for (const Staged& s : staged_inputs_) {
      const Tensor& t = in[size_t(s.index)];
      convert(t.device_data(), s.dtype, inner_inputs_[size_t(s.index)].device_data(), DType::f32,
              size_t(t.numel()));
    }
    inner_->run(ctx, inner_inputs_, inner_outputs_);
    for (const Staged& s : staged_outputs_) {
      const Tensor& t = out[size_t(s.index)];
      convert(inner_outputs_[size_t(s.index)].device_data(), DType::f32, t.device_data(), s.dtype,
              size_t(t.numel()));
    }
  }

 private:
  // Points the f32 kernel's arguments at the workspace (staged) or at the caller's tensors
  // (passed through). Tensors are rebuilt only when an address changed, so the steady state
  // (the executor hands the same tensors every step) copies nothing.
  void bind(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
    char* workspace = static_cast<char*>(ctx.workspace());
    const bool moved = workspace != workspace_;
    workspace_ = workspace;
    auto bind_list = [&](const std::vector<Tensor>& args, const std::vector<TensorDesc>& descs,
                         const std::vector<Staged>& staged, std::vector<Tensor>& inner) {
      size_t next = 0;
      for (size_t i = 0; i < args.size(); ++i) {
        if (next < staged.size() && staged[next].index == int(i)) {
          if (moved || !inner[i].defined())
            inner[i] = Tensor::borrow(workspace + offset_ + staged[next].offset, descs[i].shape,
                                      DType::f32, args[i].device());
          ++next;
        } else if (inner[i].device_data() != args[i].device_data() || !inner[i].defined()) {
          inner[i] = args[i];
        }
      }
    };
    bind_list(in, spec_.inputs, staged_inputs_, inner_inputs_);
    bind_list(out, spec_.outputs, staged_outputs_, inner_outputs_);
  }

  KernelSpec spec_;
  std::unique_ptr<Kernel> inner_;
  std::vector<Staged> staged_inputs_, staged_outputs_;
  std::vector<Tensor> inner_inputs_, inner_outputs_;
  char* workspace_ = nullptr;
  size_t offset_ = 0;  // of the staged operands in the workspace
};

}  // namespace

std::unique_ptr<Kernel> make_emulated_kernel(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<EmulatedKernel>(spec, ctx);
}

bool is_emulated_kernel(const Kernel& kernel) {
  return dynamic_cast<const EmulatedKernel*>(&kernel) != nullptr;
}

namespace {
std::atomic<bool> avx512_loops_enabled{true};
}  // namespace

bool cpu_has_avx512_loops() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has && avx512_loops_enabled.load(std::memory_order_relaxed);
}

void set_avx512_loops_enabled(bool enabled) { avx512_loops_enabled = enabled; }

int lp_detail::thread_num() { return omp_get_thread_num(); }
int lp_detail::num_threads() { return omp_get_num_threads(); }
int lp_detail::max_threads() { return omp_get_max_threads(); }

}  // namespace campo
