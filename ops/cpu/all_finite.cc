// CPU kernel of AllFinite: a parallel scan of every input for a non-finite exponent
// (all exponent bits set: inf or NaN), on the raw bits so any floating type works.
#include <cstring>

#include "ops/kernel.h"

namespace campo {
namespace {

bool all_finite_f32(const float* p, int64_t n) {
  const uint32_t* u = reinterpret_cast<const uint32_t*>(p);
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
  return bad == 0;
}

bool all_finite_16(const uint16_t* p, int64_t n, uint16_t exp_mask) {
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) bad |= (p[i] & exp_mask) == exp_mask;
  return bad == 0;
}

class AllFiniteKernel : public Kernel {
 public:
  AllFiniteKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    bool ok = true;
    for (const Tensor& t : in) {
      switch (t.dtype()) {
        case DType::f32: ok = ok && all_finite_f32(t.device_data<float>(), t.numel()); break;
        case DType::f16: ok = ok && all_finite_16(t.device_data<uint16_t>(), t.numel(), 0x7c00); break;
        case DType::bf16: ok = ok && all_finite_16(t.device_data<uint16_t>(), t.numel(), 0x7f80); break;
        default: CAMPO_FAIL("AllFinite: unsupported input type ", dtype_name(t.dtype()));
      }
    }
    out[0].device_data<float>()[0] = ok ? 1.0f : 0.0f;
  }
};

std::unique_ptr<Kernel> make_all_finite(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<AllFiniteKernel>(spec, ctx);
}

KernelRegistrar all_finite_f32_kernel(OpKind::AllFinite, Device::cpu, DType::f32, make_all_finite);

}  // namespace
}  // namespace campo
