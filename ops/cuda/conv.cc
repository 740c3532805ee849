// CUDA kernels of the convolution family through cuDNN 9's legacy descriptor API (cudnn_cnn).
// The semantics are those of the CPU kernels (ops/cpu/conv.cc): NCHW activations, OIHW filters
// ([O, C/g, kh, kw], which is also cuDNN's grouped filter layout), symmetric zero padding,
// dilation, groups; cross-correlation (cuDNN's CUDNN_CROSS_CORRELATION).
//   Conv2D               {x, w}  -> y   cudnnConvolutionForward
//   Conv2DBackpropInput  {dy, w} -> dx  cudnnConvolutionBackwardData (also the transposed
//                                       convolution: dx's shape is attrs.output_shape)
//   Conv2DBackpropFilter {x, dy} -> dw  cudnnConvolutionBackwardFilter
//
// Everything is decided once, at kernel creation (shapes are known then): the descriptors,
// and the algorithm, by measurement (cudnnFind*AlgorithmEx on scratch buffers from the
// backend's allocate(), as PyTorch's cudnn.benchmark does): the fastest one that
// ops/cuda/conv_algo_filter.h allows (its workspace within kWorkspaceCap, no TF32 for f32, no
// FFT or non-fused Winograd for f16/bf16, and only deterministic ones on a backend set
// --deterministic). The search's workspace is bounded by kWorkspaceCap too, and its time is
// counted by the cache (ConvAlgoCache::Counts::search_seconds; campo bench prints it). The choice
// is kept in the backend's algorithm cache under the whole problem (runtime/conv_algo_cache.h), so
// another kernel of the same problem on the same backend (another executable: bench's next policy,
// an evaluation graph) does not measure. Its workspace is the context's shared one (ExecContext::
// reserve_workspace), so the kernels of an executable share one buffer as large as the largest
// need. Finding needs a GPU; without one no CUDA kernel is ever created.
//
// Precision: compute type f32 for every data type. f32 runs with CUDNN_FMA_MATH (no TF32, so
// f32 results differ from the CPU's only by the order of the sums); f16 and bf16 with
// CUDNN_TENSOR_OP_MATH (tensor cores, f32 accumulation, one rounding of the result).
//
// A bf16/f16 Conv2DBackpropFilter may write an f32 dw (Node::f32_output): cuDNN writes dw in
// the data's type, so the kernel writes into its own buffer and widens it
// (ops/cuda/conv_widen.cu); that costs one pass over the weights.
//
// Padding (KernelSpec::pad_to = p > 0, amp/padding.h), the semantics of the CPU kernels: an
// f16 or bf16 kernel whose input or output channel count is not a multiple of p runs on
// zero-padded channels (ops/conv_padding.h; the copies are cudaMemcpy2DAsync on the
// stream, the padded buffers are zeroed once, stream-ordered before any run). On the CPU
// only native bf16 pads; here both low dtypes run tensor-core convolutions, so both pad.
// f32 ignores pad_to, as on the CPU.
#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "ops/conv_padding.h"
#include "ops/cuda/context.h"
#include "ops/cuda/conv_algo_filter.h"
#include "ops/cuda/conv_widen.h"
#include "runtime/conv_algo_cache.h"

namespace campo {
namespace {

// The most workspace a convolution may use (PyTorch's benchmark caps by free memory; a fixed
// cap keeps a model's footprint predictable). A smaller buffer is tried where this one cannot
// be had.
constexpr size_t kWorkspaceCap = size_t(256) << 20;
constexpr size_t kWorkspaceFloor = size_t(16) << 20;

cudnnDataType_t cudnn_type(DType t, const KernelSpec& spec) {
  switch (t) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      CAMPO_FAIL(op_name(spec.kind), " '", spec.node_name, "': no CUDA kernel for ", dtype_name(t));
  }
}

int as_int(int64_t v, const KernelSpec& spec) {
  CAMPO_CHECK(v >= 0 && v <= INT32_MAX, op_name(spec.kind), " '", spec.node_name, "': dimension ",
              v, " does not fit cuDNN's int descriptors");
  return int(v);
}

// RAII holders of the three descriptor kinds.
class TensorDescriptor {
 public:
  TensorDescriptor() { CAMPO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(d_); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  // A dense NCHW tensor.
  void set(const Shape& s, cudnnDataType_t type, const KernelSpec& spec) {
    CAMPO_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, type, as_int(s[0], spec),
                                                 as_int(s[1], spec), as_int(s[2], spec),
                                                 as_int(s[3], spec)));
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDescriptor {
 public:
  FilterDescriptor() { CAMPO_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_)); }
  ~FilterDescriptor() { cudnnDestroyFilterDescriptor(d_); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  // OIHW, I = C / groups.
  void set(const Shape& s, cudnnDataType_t type, const KernelSpec& spec) {
    CAMPO_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d_, type, CUDNN_TENSOR_NCHW, as_int(s[0], spec),
                                                 as_int(s[1], spec), as_int(s[2], spec),
                                                 as_int(s[3], spec)));
  }
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor() { CAMPO_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_)); }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(d_); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

// The math type a data type runs with (see the file comment).
cudnnMathType_t math_type_for(DType t) {
  return t == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

// A device buffer for the measurement, zeroed (an uninitialised one may hold NaNs and
// denormals, which some algorithms run slower on).
std::shared_ptr<void> scratch(cuda::CudaBackend& backend, size_t bytes) {
  std::shared_ptr<void> p = backend.allocate(std::max<size_t>(bytes, 1));
  CAMPO_CUDA_CHECK(cudaMemsetAsync(p.get(), 0, bytes, backend.stream()));
  return p;
}

// The workspace for the measurement: kWorkspaceCap, or less where that cannot be had (halving
// down to kWorkspaceFloor, then none).
std::shared_ptr<void> find_workspace(cuda::CudaBackend& backend, size_t* bytes) {
  for (size_t b = kWorkspaceCap; b >= kWorkspaceFloor; b /= 2) {
    try {
      std::shared_ptr<void> p = backend.allocate(b);
      *bytes = b;
      return p;
    } catch (const std::exception&) {
      // Out of memory: try a smaller one, first clearing the failed cudaMalloc's error so
      // the next launch check does not report it.
      (void)cudaGetLastError();
    }
  }
  *bytes = 0;
  return nullptr;
}

// Runs `find` (a cudnnFind*AlgorithmEx call and its buffers), turning a failure into an error
// that also names the node, its dtype and shapes.
template <typename F>
void find_or_explain(const KernelSpec& spec, const Shape& x, const Shape& w, const Shape& y,
                     F&& find) {
  try {
    find();
  } catch (const Error& e) {
    CAMPO_FAIL(op_name(spec.kind), " '", spec.node_name, "': no cuDNN ", dtype_name(spec.dtype),
               " algorithm for x ", shape_str(x), " w ", shape_str(w), " y ", shape_str(y), ": ",
               e.what());
  }
}

// What the three kernels share: the geometry as cuDNN descriptors, for the convolution
// x [N, C, H, W] * w [O, C/g, kh, kw] -> y [N, O, Ho, Wo] (for the backprops x is dx and y is
// dy), the algorithm's workspace size, and the error context.
class CudnnConvolution {
 protected:
  CudnnConvolution(const KernelSpec& spec, const Shape& x, const Shape& w, const Shape& y)
      : spec_(spec), x_shape_(x), w_shape_(w), y_shape_(y) {
    const ConvAttrs& a = attrs_as<ConvAttrs>(spec.attrs);
    for (const TensorDesc& d : spec.inputs)
      CAMPO_CHECK(d.layout == Layout::plain, op_name(spec.kind), " '", spec.node_name,
                  "': the CUDA kernel takes plain NCHW data, got ", layout_name(d.layout));
    for (const TensorDesc& d : spec.outputs)
      CAMPO_CHECK(d.layout == Layout::plain, op_name(spec.kind), " '", spec.node_name,
                  "': the CUDA kernel writes plain NCHW data, got ", layout_name(d.layout));
    const cudnnDataType_t type = cudnn_type(spec.dtype, spec);
    x_.set(x, type, spec);
    y_.set(y, type, spec);
    w_.set(w, type, spec);
    CAMPO_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_.get(), a.pad_h, a.pad_w, a.stride_h,
                                                      a.stride_w, a.dilation_h, a.dilation_w,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CAMPO_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_.get(), a.groups));
    CAMPO_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), math_type_for(spec.dtype)));
  }

  // The algorithm of this convolution in `direction` (returned as cuDNN's enum value): the
  // backend's cached choice for the same problem (runtime/conv_algo_cache.h), or a
  // measurement, find(perf, &count, workspace, limit) filling up to Count results, of which
  // the fastest usable one is taken and cached. Sets the chosen math type (f16/bf16: what
  // cuDNN measured it with; f32 stays CUDNN_FMA_MATH) and reserves its workspace; fails
  // naming the node when no algorithm ran.
  template <typename Perf, int Count, typename Find>
  int select(ExecContext& ctx, ConvDirection direction, const char* what, Find find) {
    cuda::CudaBackend& backend = cuda_backend(ctx);
    size_t limit = 0;
    std::shared_ptr<void> ws = find_workspace(backend, &limit);
    const cuda::ConvAlgoRules rules{
        .dtype = spec_.dtype, .workspace_limit = limit, .deterministic = backend.deterministic()};
    const ConvProblem problem = problem_for(direction, rules, backend.index());
    const ConvAlgoChoice choice =
        backend.conv_algos().find_or_search(problem, [&]() -> ConvAlgoChoice {
          Perf perf[Count];
          int count = 0;
          find_or_explain(spec_, x_shape_, w_shape_, y_shape_,
                          [&] { find(perf, &count, ws.get(), limit); });
          // Which ones may be used: ops/cuda/conv_algo_filter.h.
          const int i = cuda::pick_conv_algo(perf, count, rules);
          if (i >= 0)
            return ConvAlgoChoice{int(perf[i].algo), int(perf[i].mathType), perf[i].memory,
                                  perf[i].time};
          CAMPO_FAIL(op_name(spec_.kind), " '", spec_.node_name, "': cuDNN has no ", what,
                     " algorithm for ", dtype_name(spec_.dtype), " x ", shape_str(x_shape_), " w ",
                     shape_str(w_shape_), " y ", shape_str(y_shape_), " within ", limit >> 20,
                     " MiB of workspace", rules.deterministic ? " that is deterministic" : "", " (",
                     count, " measured", count > 0 ? ", the fastest refused: " : "",
                     count > 0 ? cuda::conv_algo_refusal(perf[0], rules) : "", ")");
        });
    if (spec_.dtype != DType::f32)
      CAMPO_CUDNN_CHECK(
          cudnnSetConvolutionMathType(conv_.get(), cudnnMathType_t(choice.math_type)));
    workspace_bytes_ = choice.workspace_bytes;
    if (workspace_bytes_ > 0) ctx.reserve_workspace(workspace_bytes_);
    return choice.algo;
  }

  // The cache key of this convolution: everything the descriptors and the search depend on.
  ConvProblem problem_for(ConvDirection direction, const cuda::ConvAlgoRules& rules,
                          int device) const {
    const ConvAttrs& a = attrs_as<ConvAttrs>(spec_.attrs);
    return {.direction = direction,
            .dtype = spec_.dtype,
            .math_type = int(math_type_for(spec_.dtype)),
            .n = x_shape_[0],
            .c = x_shape_[1],
            .h = x_shape_[2],
            .w = x_shape_[3],
            .k = w_shape_[0],
            .r = w_shape_[2],
            .s = w_shape_[3],
            .out_h = y_shape_[2],
            .out_w = y_shape_[3],
            .pad_h = a.pad_h,
            .pad_w = a.pad_w,
            .stride_h = a.stride_h,
            .stride_w = a.stride_w,
            .dilation_h = a.dilation_h,
            .dilation_w = a.dilation_w,
            .groups = a.groups,
            .layout = int(CUDNN_TENSOR_NCHW),
            .workspace_limit = rules.workspace_limit,
            .device = device,
            .deterministic = rules.deterministic};
  }

  void* workspace(ExecContext& ctx) const {
    return workspace_bytes_ > 0 ? ctx.workspace() : nullptr;
  }
  size_t bytes_of(const Shape& s) const { return size_t(shape_numel(s)) * dtype_size(spec_.dtype); }

  KernelSpec spec_;
  Shape x_shape_, w_shape_, y_shape_;
  TensorDescriptor x_, y_;
  FilterDescriptor w_;
  ConvolutionDescriptor conv_;
  size_t workspace_bytes_ = 0;
};

// y = conv(x, w); inputs {x, w}, output y.
class Conv2DKernel final : public Kernel, CudnnConvolution {
 public:
  Conv2DKernel(const KernelSpec& spec, ExecContext& ctx)
      : CudnnConvolution(spec, spec.inputs[0].shape, spec.inputs[1].shape, spec.outputs[0].shape) {
    algo_ = cudnnConvolutionFwdAlgo_t(
        select<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
            ctx, ConvDirection::forward, "forward",
            [&](cudnnConvolutionFwdAlgoPerf_t* perf, int* count, void* ws, size_t limit) {
              cuda::CudaBackend& backend = cuda_backend(ctx);
              std::shared_ptr<void> x = scratch(backend, bytes_of(x_shape_));
              std::shared_ptr<void> w = scratch(backend, bytes_of(w_shape_));
              std::shared_ptr<void> y = scratch(backend, bytes_of(y_shape_));
              CAMPO_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
                  backend.cudnn(), x_.get(), x.get(), w_.get(), w.get(), conv_.get(), y_.get(),
                  y.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, count, perf, ws, limit));
            }));
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const float alpha = 1.0f, beta = 0.0f;
    CAMPO_CUDNN_CHECK(cudnnConvolutionForward(cuda_backend(ctx).cudnn(), &alpha, x_.get(),
                                              in[0].device_data(), w_.get(), in[1].device_data(),
                                              conv_.get(), algo_, workspace(ctx), workspace_bytes_,
                                              &beta, y_.get(), out[0].device_data()));
  }

 private:
  cudnnConvolutionFwdAlgo_t algo_{};
};

// dx = conv^T(dy, w); inputs {dy, w}, output dx (also the transposed convolution).
class Conv2DBackpropInputKernel final : public Kernel, CudnnConvolution {
 public:
  Conv2DBackpropInputKernel(const KernelSpec& spec, ExecContext& ctx)
      : CudnnConvolution(spec, spec.outputs[0].shape, spec.inputs[1].shape, spec.inputs[0].shape) {
    algo_ = cudnnConvolutionBwdDataAlgo_t(
        select<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
            ctx, ConvDirection::backward_data, "backward-data",
            [&](cudnnConvolutionBwdDataAlgoPerf_t* perf, int* count, void* ws, size_t limit) {
              cuda::CudaBackend& backend = cuda_backend(ctx);
              std::shared_ptr<void> dy = scratch(backend, bytes_of(y_shape_));
              std::shared_ptr<void> w = scratch(backend, bytes_of(w_shape_));
              std::shared_ptr<void> dx = scratch(backend, bytes_of(x_shape_));
              CAMPO_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
                  backend.cudnn(), w_.get(), w.get(), y_.get(), dy.get(), conv_.get(), x_.get(),
                  dx.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, count, perf, ws, limit));
            }));
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const float alpha = 1.0f, beta = 0.0f;
    CAMPO_CUDNN_CHECK(cudnnConvolutionBackwardData(
        cuda_backend(ctx).cudnn(), &alpha, w_.get(), in[1].device_data(), y_.get(),
        in[0].device_data(), conv_.get(), algo_, workspace(ctx), workspace_bytes_, &beta, x_.get(),
        out[0].device_data()));
  }

 private:
  cudnnConvolutionBwdDataAlgo_t algo_{};
};

// dw = d<conv(x, w), dy>/dw; inputs {x, dy}, output dw (f32 for a low-precision node with
// Node::f32_output: computed in the data's type, then widened).
class Conv2DBackpropFilterKernel final : public Kernel, CudnnConvolution {
 public:
  Conv2DBackpropFilterKernel(const KernelSpec& spec, ExecContext& ctx)
      : CudnnConvolution(spec, spec.inputs[0].shape, spec.outputs[0].shape, spec.inputs[1].shape) {
    const DType dw_type = spec.outputs[0].dtype;
    CAMPO_CHECK(dw_type == spec.dtype || dw_type == DType::f32, "Conv2DBackpropFilter '",
                spec.node_name, "': a ", dtype_name(spec.dtype), " kernel cannot write a ",
                dtype_name(dw_type), " dw");
    cuda::CudaBackend& backend = cuda_backend(ctx);
    if (dw_type != spec.dtype) narrow_dw_ = backend.allocate(bytes_of(w_shape_));
    algo_ = cudnnConvolutionBwdFilterAlgo_t(
        select<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
            ctx, ConvDirection::backward_filter, "backward-filter",
            [&](cudnnConvolutionBwdFilterAlgoPerf_t* perf, int* count, void* ws, size_t limit) {
              std::shared_ptr<void> x = scratch(backend, bytes_of(x_shape_));
              std::shared_ptr<void> dy = scratch(backend, bytes_of(y_shape_));
              std::shared_ptr<void> dw = scratch(backend, bytes_of(w_shape_));
              CAMPO_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                  backend.cudnn(), x_.get(), x.get(), y_.get(), dy.get(), conv_.get(), w_.get(),
                  dw.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, count, perf, ws, limit));
            }));
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    cuda::CudaBackend& backend = cuda_backend(ctx);
    const float alpha = 1.0f, beta = 0.0f;
    void* dw = narrow_dw_ ? narrow_dw_.get() : out[0].device_data();
    CAMPO_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        backend.cudnn(), &alpha, x_.get(), in[0].device_data(), y_.get(), in[1].device_data(),
        conv_.get(), algo_, workspace(ctx), workspace_bytes_, &beta, w_.get(), dw));
    if (narrow_dw_)
      cuda::widen_to_f32(narrow_dw_.get(), spec_.dtype, out[0].device_data<float>(),
                         shape_numel(w_shape_), backend.multiprocessors(), backend.stream());
  }

 private:
  cudnnConvolutionBwdFilterAlgo_t algo_{};
  std::shared_ptr<void> narrow_dw_;  // dw in the data's type, for an f32 dw
};

template <typename K>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  check_pad_to(spec);
  return std::make_unique<K>(spec, ctx);
}

#define CAMPO_REGISTER_CONV(name, kind, K)                                     \
  KernelRegistrar name##_f32(OpKind::kind, Device::cuda, DType::f32, make<K>); \
  KernelRegistrar name##_f16(OpKind::kind, Device::cuda, DType::f16,           \
                             conv_with_padding<make<K>, cuda::copy_rows>);     \
  KernelRegistrar name##_bf16(OpKind::kind, Device::cuda, DType::bf16,         \
                              conv_with_padding<make<K>, cuda::copy_rows>);

CAMPO_REGISTER_CONV(conv2d, Conv2D, Conv2DKernel)
CAMPO_REGISTER_CONV(conv2d_backprop_input, Conv2DBackpropInput, Conv2DBackpropInputKernel)
CAMPO_REGISTER_CONV(conv2d_backprop_filter, Conv2DBackpropFilter, Conv2DBackpropFilterKernel)
#undef CAMPO_REGISTER_CONV

}  // namespace
}  // namespace campo
