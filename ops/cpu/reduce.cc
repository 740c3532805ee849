// CPU kernels of Mean / Sum and of their gradients MeanGrad / BroadcastTo (f32).
// A reduction is planned once, at construction (ops/reduce_plan.h: contiguous runs of
// `inner` elements and two offset tables).
// Sums accumulate in double, in a fixed order that does not depend on the thread count:
// work is cut into chunks of ~kChunk elements whose partial sums are added in order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/kernel.h"
#include "ops/reduce_plan.h"

namespace campo {
namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;
constexpr int64_t kChunk = 16384;

// Mean / Sum: out = scale * sum over the reduced axes, scale = 1 / count for Mean
// (NaN for an empty Mean, as 0 / 0), 1 for Sum.
class ReduceKernel : public Kernel {
 public:
  ReduceKernel(const KernelSpec& spec, ExecContext&, bool is_mean)
      : plan_(make_reduce_plan(spec.inputs[0].shape, attrs_as<ReduceAttrs>(spec.attrs).axes)),
        is_mean_(is_mean) {
    const int64_t outer_kept = int64_t(plan_.kept_offsets.size());
    const int64_t outer_reduced = int64_t(plan_.reduced_offsets.size());
    const int64_t L = plan_.inner;
    if (plan_.inner_is_reduced) {
      // Tasks per output: one per (reduced index, block of L) when runs are long, else
      // one per group of whole runs of about kChunk elements.
      if (L >= kChunk) {
        runs_per_task_ = 1;
        blocks_per_run_ = (L + kChunk - 1) / kChunk;
        tasks_per_output_ = outer_reduced * blocks_per_run_;
      } else {
        runs_per_task_ = std::max<int64_t>(1, kChunk / L);
        blocks_per_run_ = 1;
        tasks_per_output_ = (outer_reduced + runs_per_task_ - 1) / runs_per_task_;
      }
      scratch_.resize(size_t(outer_kept * tasks_per_output_));
    } else {
      scratch_.resize(size_t(outer_kept * L));  // one double accumulator per output
    }
    numel_ = shape_numel(spec.inputs[0].shape);
  }

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const float* x = in[0].device_data<float>();
    float* y = out[0].device_data<float>();
    const int64_t out_numel = out[0].numel();
    const double scale = is_mean_ ? 1.0 / double(plan_.count) : 1.0;
    if (plan_.input_is_empty) {
      const float fill = is_mean_ ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      std::fill(y, y + out_numel, fill);
      return;
    }
    if (plan_.inner_is_reduced)
      reduce_runs(x, y, scale);
    else
      reduce_rows(x, y, scale);
  }

 private:
  // Innermost dim reduced: y[o] = scale * sum_r sum_i x[kept[o] + reduced[r] + i].
  void reduce_runs(const float* x, float* y, double scale) {
    const int64_t* kept = plan_.kept_offsets.data();
    const int64_t* red = plan_.reduced_offsets.data();
    const int64_t outer_kept = int64_t(plan_.kept_offsets.size());
    const int64_t outer_reduced = int64_t(plan_.reduced_offsets.size());
    const int64_t L = plan_.inner, tpo = tasks_per_output_, bpr = blocks_per_run_,
                  rpt = runs_per_task_;
    double* partial = scratch_.data();
    const int64_t tasks = outer_kept * tpo;
#pragma omp parallel for schedule(static) if (numel_ >= kParallelElements)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t o = t / tpo, k = t % tpo;
      int64_t r0, r1, i0, i1;
      if (bpr > 1) {
        r0 = k / bpr, r1 = r0 + 1;
        i0 = (k % bpr) * kChunk, i1 = std::min(L, i0 + kChunk);
      } else {
        r0 = k * rpt, r1 = std::min(outer_reduced, r0 + rpt);
        i0 = 0, i1 = L;
      }
      double s = 0;
      for (int64_t r = r0; r < r1; ++r) {
        const float* run = x + kept[o] + red[r];
#pragma omp simd reduction(+ : s)
        for (int64_t i = i0; i < i1; ++i) s += double(run[i]);
      }
      partial[t] = s;
    }
#pragma omp parallel for schedule(static) if (tasks >= kParallelElements)
    for (int64_t o = 0; o < outer_kept; ++o) {
      double s = 0;
      for (int64_t k = 0; k < tpo; ++k) s += partial[o * tpo + k];
      y[o] = float(s * scale);
    }
  }

  // Innermost dim kept: y[o, i] = scale * sum_r x[kept[o] + reduced[r] + i]; tasks are
  // (o, block of i), accumulating rows of doubles.
  void reduce_rows(const float* x, float* y, double scale) {
    const int64_t* kept = plan_.kept_offsets.data();
    const int64_t* red = plan_.reduced_offsets.data();
    const int64_t outer_kept = int64_t(plan_.kept_offsets.size());
    const int64_t outer_reduced = int64_t(plan_.reduced_offsets.size());
    const int64_t L = plan_.inner;
    const int64_t block = outer_kept >= 16 ? L : std::min<int64_t>(L, 1024);
    const int64_t blocks = (L + block - 1) / block;
    double* acc_all = scratch_.data();
#pragma omp parallel for schedule(static) if (numel_ >= kParallelElements)
    for (int64_t t = 0; t < outer_kept * blocks; ++t) {
      const int64_t o = t / blocks;
      const int64_t i0 = (t % blocks) * block, i1 = std::min(L, i0 + block);
      double* acc = acc_all + o * L;
      std::fill(acc + i0, acc + i1, 0.0);
      for (int64_t r = 0; r < outer_reduced; ++r) {
        const float* row = x + kept[o] + red[r];
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) acc[i] += double(row[i]);
      }
      float* yo = y + o * L;
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) yo[i] = float(acc[i] * scale);
    }
  }

  ReducePlan plan_;
  bool is_mean_;
  int64_t numel_ = 0;
  int64_t runs_per_task_ = 1, blocks_per_run_ = 1, tasks_per_output_ = 1;
  std::vector<double> scratch_;  // partial sums (inner reduced) or accumulators (inner kept)
};

// MeanGrad / BroadcastTo, input {dY}: dX[index] = dY[reduced index] * scale, with
// scale = 1 / count for MeanGrad and 1 for BroadcastTo. Tasks are (o, r, block of i);
// writes are disjoint.
class BroadcastBackKernel : public Kernel {
 public:
  BroadcastBackKernel(const KernelSpec& spec, ExecContext&, bool is_mean) {
    const auto& a = attrs_as<ReduceAttrs>(spec.attrs);
    plan_ = make_reduce_plan(a.input_shape, a.axes);
    scale_ = is_mean ? float(1.0 / double(plan_.count)) : 1.0f;
    numel_ = shape_numel(a.input_shape);
  }

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    if (plan_.input_is_empty) return;
    const float* dy = in[0].device_data<float>();
    float* dx = out[0].device_data<float>();
    const int64_t* kept = plan_.kept_offsets.data();
    const int64_t* red = plan_.reduced_offsets.data();
    const int64_t outer_reduced = int64_t(plan_.reduced_offsets.size());
    const int64_t L = plan_.inner;
    const int64_t blocks = (L + kChunk - 1) / kChunk;
    const int64_t tasks = int64_t(plan_.kept_offsets.size()) * outer_reduced * blocks;
    const bool inner_is_reduced = plan_.inner_is_reduced;
    const float scale = scale_;
#pragma omp parallel for schedule(static) if (numel_ >= kParallelElements)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t o = t / (outer_reduced * blocks);
      const int64_t r = (t / blocks) % outer_reduced;
      const int64_t i0 = (t % blocks) * kChunk, i1 = std::min(L, i0 + kChunk);
      float* run = dx + kept[o] + red[r];
      if (inner_is_reduced) {
        const float v = dy[o] * scale;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) run[i] = v;
      } else {
        const float* dyo = dy + o * L;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) run[i] = dyo[i] * scale;
      }
    }
  }

 private:
  ReducePlan plan_;
  float scale_ = 1.0f;
  int64_t numel_ = 0;
};

std::unique_ptr<Kernel> make_mean(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ReduceKernel>(spec, ctx, true);
}
std::unique_ptr<Kernel> make_sum(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ReduceKernel>(spec, ctx, false);
}
std::unique_ptr<Kernel> make_mean_grad(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<BroadcastBackKernel>(spec, ctx, true);
}
std::unique_ptr<Kernel> make_broadcast_to(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<BroadcastBackKernel>(spec, ctx, false);
}

KernelRegistrar mean_f32(OpKind::Mean, Device::cpu, DType::f32, make_mean);
KernelRegistrar sum_f32(OpKind::Sum, Device::cpu, DType::f32, make_sum);
KernelRegistrar mean_grad_f32(OpKind::MeanGrad, Device::cpu, DType::f32, make_mean_grad);
KernelRegistrar broadcast_to_f32(OpKind::BroadcastTo, Device::cpu, DType::f32, make_broadcast_to);

}  // namespace
}  // namespace campo
