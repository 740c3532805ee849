// The CPU layout conversion (ops/kernel.h create_layout_conversion): a oneDNN reorder
// between plain NCHW and blocked nChw8c / nChw16c of one 4-D tensor, built once; run() only
// rebinds the two buffers. A pure permutation of the elements: exact for every dtype.
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/cpu/context.h"
#include "ops/kernel.h"

namespace campo {

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::plain:
      return "plain";
    case Layout::nChw8c:
      return "nChw8c";
    case Layout::nChw16c:
      return "nChw16c";
  }
  return "?";
}

Layout cpu_blocked_layout() {
  const auto avx512 = unsigned(dnnl::cpu_isa::avx512_core);
  return (unsigned(dnnl::get_effective_cpu_isa()) & avx512) == avx512 ? Layout::nChw16c
                                                                      : Layout::nChw8c;
}

namespace {

class LayoutConversionKernel : public Kernel {
 public:
  LayoutConversionKernel(const TensorDesc& from, const TensorDesc& to, ExecContext& ctx) {
    CAMPO_CHECK(from.shape == to.shape && from.dtype == to.dtype && from.shape.size() == 4,
                "internal: a layout conversion needs one 4-D shape and dtype, got ",
                dtype_name(from.dtype), shape_str(from.shape), " -> ", dtype_name(to.dtype),
                shape_str(to.shape));
    const dnnl::memory::dims dims(from.shape.begin(), from.shape.end());
    const auto type = dnnl_type(from.dtype, "oneDNN reorder");
    src_ = dnnl::memory({dims, type, activation_format(from.layout)}, cpu_engine(ctx),
                        DNNL_MEMORY_NONE);
    dst_ =
        dnnl::memory({dims, type, activation_format(to.layout)}, cpu_engine(ctx), DNNL_MEMORY_NONE);
    reorder_ = dnnl::reorder(src_, dst_);
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    src_.set_data_handle(in[0].device_data());
    dst_.set_data_handle(out[0].device_data());
    reorder_.execute(cpu_stream(ctx), src_, dst_);
    cpu_stream(ctx).wait();
  }

 private:
  dnnl::memory src_, dst_;
  dnnl::reorder reorder_;
};

}  // namespace

std::unique_ptr<Kernel> create_layout_conversion(const TensorDesc& from, const TensorDesc& to,
                                                 ExecContext& ctx) {
  return std::make_unique<LayoutConversionKernel>(from, to, ctx);
}

}  // namespace campo
