// CPU kernels of BiasAdd and BiasAddGrad on [N, C, S...] tensors, S = product of the axes
// after 1 (1 for [N, C]). Plain loops templated on the element type T: float, or bfloat16
// (ops/cpu/low_precision.h: exact loads, f32 math and accumulation, one rounding per store);
// f16 is emulated. 4-D data may also be blocked, nChw8c or nChw16c (TensorDesc::layout,
// graph/layout.h): with block B, channel c = B cb + ci of sample n at [n][cb][s][ci].
#include <algorithm>

#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

// Splits a shape [N, C, ...] into outer N, channels C and inner S.
struct ChannelView {
  int64_t outer, channels, inner;
  explicit ChannelView(const Shape& s)
      : outer(s[0]), channels(s[1]), inner(shape_numel(s) / std::max<int64_t>(1, s[0] * s[1])) {}
};

// Sum of one row (at most H*W values) in f32, in kLanes interleaved partial sums (lane j
// takes s = j mod kLanes), then the lanes in order: a fixed order whatever the vector ISA,
// and independent chains the compiler vectorises (a single running sum is one dependent
// add per element: ~8x slower, BiasAddGrad of [32,64,32,32] in 0.83 ms).
constexpr int64_t kLanes = 16;

template <typename T>
float row_sum(const T* row, int64_t S) {
  float lanes[kLanes] = {};
  int64_t s = 0;
  for (; s + kLanes <= S; s += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += float(row[s + j]);
  for (int64_t j = 0; s < S; ++s, ++j) lanes[j] += float(row[s]);
  float sum = 0;
  for (int64_t j = 0; j < kLanes; ++j) sum += lanes[j];
  return sum;
}

// Blocked y = x + bias: rows (n, cb) of S * B values.
template <int B, typename T>
void blocked_bias_add(const T* x, const T* bias, T* y, const ChannelView& v) {
  const int64_t CB = v.channels / B, brows = v.outer * CB, S = v.inner;
  parallel_for<T>(brows, brows * S * B > 4096, [=](int64_t r) {
    const T* b = bias + (r % CB) * B;
    float bk[B];
    for (int64_t k = 0; k < B; ++k) bk[k] = float(b[k]);
    const T* xr = x + r * S * B;
    T* yr = y + r * S * B;
    for (int64_t s = 0; s < S; ++s)
#pragma omp simd
      for (int64_t k = 0; k < B; ++k) yr[s * B + k] = float(xr[s * B + k]) + bk[k];
  });
}

// Blocked dbias: one f32 lane per channel of a block for each plane, the planes in double.
template <int B, typename T>
void blocked_bias_grad(const T* dy, T* db, const ChannelView& v) {
  const int64_t N = v.outer, C = v.channels, S = v.inner, CB = C / B;
  parallel_for<T>(CB, N * C * S > 4096, [=](int64_t cb) {
    double total[B] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* plane = dy + (n * CB + cb) * S * B;
      float lanes[B] = {};
      for (int64_t s = 0; s < S; ++s)
#pragma omp simd
        for (int64_t k = 0; k < B; ++k) lanes[k] += float(plane[s * B + k]);
      for (int64_t k = 0; k < B; ++k) total[k] += lanes[k];
    }
    for (int64_t k = 0; k < B; ++k) db[cb * B + k] = float(total[k]);
  });
}

// y[n, c, s] = x[n, c, s] + bias[c]
template <typename T>
class BiasAddKernel : public Kernel {
 public:
  explicit BiasAddKernel(const KernelSpec& spec)
      : v_(spec.inputs[0].shape), block_(checked_channel_block(spec.inputs[0], "bias kernel")) {
    CAMPO_CHECK(spec.outputs[0].layout == spec.inputs[0].layout, "internal: BiasAdd '",
                spec.node_name, "' writes y in another layout than x");
  }

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].device_data());
    const T* bias = static_cast<const T*>(in[1].device_data());
    T* y = static_cast<T*>(out[0].device_data());
    const int64_t C = v_.channels, S = v_.inner, rows = v_.outer * C;
    if (block_ == 16) return blocked_bias_add<16>(x, bias, y, v_);
    if (block_ == 8) return blocked_bias_add<8>(x, bias, y, v_);
    if (S == 1) {  // [N, C]: rows are examples, parallel over N
      parallel_for<T>(v_.outer, rows > 4096, [=](int64_t n) {
        for (int64_t c = 0; c < C; ++c) y[n * C + c] = float(x[n * C + c]) + float(bias[c]);
      });
      return;
    }
    parallel_for<T>(rows, rows * S > 4096, [=](int64_t r) {
      const float b = float(bias[r % C]);
      const T* xr = x + r * S;
      T* yr = y + r * S;
      for (int64_t s = 0; s < S; ++s) yr[s] = float(xr[s]) + b;
    });
  }

 private:
  ChannelView v_;
  int block_;  // channel_block of the layout
};

// dbias[c] = sum_{n, s} dy[n, c, s], accumulated in double (each plane in f32: kLanes
// partial sums for plain data, one lane per channel for blocked data).
template <typename T>
class BiasAddGradKernel : public Kernel {
 public:
  explicit BiasAddGradKernel(const KernelSpec& spec)
      : v_(spec.inputs[0].shape), block_(checked_channel_block(spec.inputs[0], "bias kernel")) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].device_data());
    T* db = static_cast<T*>(out[0].device_data());
    const int64_t N = v_.outer, C = v_.channels, S = v_.inner;
    if (block_ == 16) return blocked_bias_grad<16>(dy, db, v_);
    if (block_ == 8) return blocked_bias_grad<8>(dy, db, v_);
    parallel_for<T>(C, N * C * S > 4096, [=](int64_t c) {
      double total = 0;
      for (int64_t n = 0; n < N; ++n) total += row_sum(dy + (n * C + c) * S, S);
      db[c] = float(total);
    });
  }

 private:
  ChannelView v_;
  int block_;  // channel_block of the layout
};

template <template <typename> class K, typename T>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext&) {
  return std::make_unique<K<T>>(spec);
}

KernelRegistrar bias_add_f32(OpKind::BiasAdd, Device::cpu, DType::f32, make<BiasAddKernel, float>);
KernelRegistrar bias_add_grad_f32(OpKind::BiasAddGrad, Device::cpu, DType::f32,
                                  make<BiasAddGradKernel, float>);
// dbias is the node's dtype (the schema's rule, as TensorFlow's BiasAddGrad<T>): the sum is
// accumulated in f32 / double and rounded once.
KernelRegistrar bias_add_bf16(OpKind::BiasAdd, Device::cpu, DType::bf16,
                              native_bf16_loops<make<BiasAddKernel, bfloat16>>);
KernelRegistrar bias_add_grad_bf16(OpKind::BiasAddGrad, Device::cpu, DType::bf16,
                                   native_bf16_loops<make<BiasAddGradKernel, bfloat16>>);

}  // namespace
}  // namespace campo
