// What CPU kernels reach through their ExecContext: the CPU backend's oneDNN engine and
// stream. Any backend whose kernels are the CPU's (Backend::kernel_device() == cpu) is a
// CpuBackend (the test-only staging backend derives from it).
#pragma once

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"
#include "runtime/cpu_backend.h"

namespace campo {

inline CpuBackend& cpu_backend(ExecContext& ctx) {
  auto* cpu = dynamic_cast<CpuBackend*>(&ctx.backend());
  CAMPO_CHECK(cpu != nullptr, "internal: a CPU kernel runs on the ", ctx.backend().device().str(),
              " backend");
  return *cpu;
}
inline dnnl::engine& cpu_engine(ExecContext& ctx) { return cpu_backend(ctx).engine(); }
inline dnnl::stream& cpu_stream(ExecContext& ctx) { return cpu_backend(ctx).stream(); }

// A oneDNN primitive's scratchpad (scratchpad_mode::user) in the context's shared workspace:
// reserved when the kernel is made, bound to the workspace's current address at each run (a
// later kernel's larger reservation moves it). For kernels whose only workspace it is (a
// kernel reserves once: a second reservation would overlap the first).
class WorkspaceScratchpad {
 public:
  // Adds the scratchpad `desc` describes to `args` (nothing when it is empty).
  void reserve(const dnnl::memory::desc& desc, ExecContext& ctx,
               std::unordered_map<int, dnnl::memory>& args) {
    if (desc.get_size() == 0) return;
    memory_ = dnnl::memory(desc, cpu_engine(ctx), DNNL_MEMORY_NONE);
    offset_ = ctx.reserve_workspace(desc.get_size());
    args[DNNL_ARG_SCRATCHPAD] = memory_;
  }
  void bind(ExecContext& ctx) {
    if (memory_) memory_.set_data_handle(static_cast<char*>(ctx.workspace()) + offset_);
  }

 private:
  dnnl::memory memory_;
  size_t offset_ = 0;
};

// oneDNN's data type for a floating dtype; `primitive` names the caller in the error for any
// other ("oneDNN convolution has no i32 variant").
inline dnnl::memory::data_type dnnl_type(DType t, const char* primitive) {
  switch (t) {
    case DType::f32:
      return dnnl::memory::data_type::f32;
    case DType::bf16:
      return dnnl::memory::data_type::bf16;
    case DType::f16:
      return dnnl::memory::data_type::f16;
    default:
      CAMPO_FAIL(primitive, " has no ", dtype_name(t), " variant");
  }
}

// oneDNN's format of a 4-D activation in `layout` (ops/kernel.h): nchw, nChw8c or nChw16c.
inline dnnl::memory::format_tag activation_format(Layout layout) {
  switch (layout) {
    case Layout::nChw8c:
      return dnnl::memory::format_tag::nChw8c;
    case Layout::nChw16c:
      return dnnl::memory::format_tag::nChw16c;
    case Layout::plain:
      break;
  }
  return dnnl::memory::format_tag::nchw;
}

// Copies `rows` rows of `row_elems` elements of `elem` bytes from `src` (a row every
// `src_stride` elements) to `dst` (a row every `dst_stride` elements): the padded operands of
// MatMul and of the convolutions (ops/conv_padding.h). Rows are split over the threads when
// there is enough to copy (a few hundred KiB).
inline void copy_rows(const void* src, int64_t src_stride, void* dst, int64_t dst_stride,
                      int64_t rows, int64_t row_elems, size_t elem) {
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  const size_t row_bytes = size_t(row_elems) * elem;
  if (row_elems == src_stride && row_elems == dst_stride) {  // one contiguous block
    std::memcpy(d, s, size_t(rows) * row_bytes);
    return;
  }
  parallel_for<float>(rows, size_t(rows) * row_bytes >= (size_t(1) << 18), [&](int64_t r) {
    std::memcpy(d + size_t(r) * size_t(dst_stride) * elem,
                s + size_t(r) * size_t(src_stride) * elem, row_bytes);
  });
}
// copy_rows as ops/conv_padding.h's CopyRowsFn (CPU kernels run synchronously).
inline void copy_rows_cpu(ExecContext&, const void* src, int64_t src_stride, void* dst,
                          int64_t dst_stride, int64_t rows, int64_t row_elems, size_t elem) {
  copy_rows(src, src_stride, dst, dst_stride, rows, row_elems, elem);
}

}  // namespace campo
