// Channel padding of the convolution family's low-precision kernels (KernelSpec::pad_to =
// p > 0, set by the cost-aware policy, amp/padding.h), the same on every device. For the
// convolution x [N, C, H, W] * w [K, C, kh, kw] -> y [N, K, Ho, Wo] whose C or K is not a
// multiple of p, the kernel runs the device's unpadded kernel on the padded problem
//   x_pad [N, Cp, H, W] * w_pad [Kp, Cp, kh, kw] -> y_pad [N, Kp, Ho, Wo],
//   Cp = ceil(C / p) p, Kp = ceil(K / p) p,
// with zeros in every new channel and filter row/column, and hands back the valid part:
//   Conv2D               {x, w}  -> y    y  = y_pad[:, :K]
//   Conv2DBackpropInput  {dy, w} -> dx   dx = dx_pad[:, :C]
//   Conv2DBackpropFilter {x, dy} -> dw   dw = dw_pad[:K, :C]
// A valid element of y (or dx) sums the unpadded products plus products with a zero
// channel of x (dy) and a zero row of w, which add exact zeros; a valid element of dw sums
// exactly the unpadded products. So the valid part is the unpadded result wherever the
// padded kernel adds the valid products in the same order, and always within two f32
// summation orders of the same products (tests/ops/conv_padding_test.cc).
//
// Only the operands whose channels grow are copied: a padded operand is a buffer the kernel
// owns, allocated and zeroed once at construction (counted by ExecContext::
// count_kernel_buffer, as MatMul's padded operands), into which run() copies the valid
// channels each step (so its padding stays zero); a padded output is copied back. Every
// copy is "rows of a row-major matrix into rows of another stride": an NCHW activation is
// [N, channels * H * W], a filter [K, C * kh * kw]. The device supplies that copy.
//
// Grouped convolutions are not padded (a group's channels would each need their own
// padding): a pad_to on one is refused. Padded operands must be stored plain (NCHW): an
// activation whose channels are not a multiple of the blocked layout's block is plain
// anyway (graph/layout.h), so with p a multiple of the block this always holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ops/kernel.h"

namespace campo {

// Copies `rows` rows of `row_elems` elements of `elem` bytes from `src` (a row every
// `src_stride` elements) to `dst` (a row every `dst_stride` elements), in stream order on
// the context's device.
using CopyRowsFn = void (*)(ExecContext& ctx, const void* src, int64_t src_stride, void* dst,
                            int64_t dst_stride, int64_t rows, int64_t row_elems, size_t elem);

// C and K of a convolution-family kernel spec (Conv2D, Conv2DBackpropInput,
// Conv2DBackpropFilter), read from its filter (or dw) shape.
struct ConvChannels {
  int64_t C = 0, K = 0;
};
ConvChannels conv_channels(const KernelSpec& spec);

// Throws, naming the node, for a negative pad_to: every kernel of the family checks it,
// also those that ignore padding (f32), so a bad request never passes unnoticed.
void check_pad_to(const KernelSpec& spec);

// Whether the kernel of `spec` runs padded: pad_to > 0 and C or K is not a multiple of it.
// Throws for a negative pad_to and for a pad_to on a grouped convolution whose channels
// would grow.
bool conv_runs_padded(const KernelSpec& spec);

// The padded kernel of `spec` (conv_runs_padded(spec) must hold): `unpadded` builds the
// device's kernel of the padded problem (a spec with pad_to 0), `copy_rows` moves the valid
// channels in and out.
std::unique_ptr<Kernel> make_padded_conv(const KernelSpec& spec, ExecContext& ctx,
                                         KernelFactory unpadded, CopyRowsFn copy_rows);

// A kernel factory for a low-precision registration: the padded kernel where the spec asks
// for padding that applies, Unpadded otherwise.
template <KernelFactory Unpadded, CopyRowsFn Copy>
std::unique_ptr<Kernel> conv_with_padding(const KernelSpec& spec, ExecContext& ctx) {
  if (conv_runs_padded(spec)) return make_padded_conv(spec, ctx, Unpadded, Copy);
  return Unpadded(spec, ctx);
}

}  // namespace campo
