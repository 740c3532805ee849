// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors):
//
//   u64 little-endian N | N bytes of JSON header, space-padded so the data starts 8-byte
//   aligned | data section (raw little-endian tensor bytes)
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end)}
// (offsets relative to the data section) plus an optional "__metadata__" object of
// string -> string. Invariants this file enforces on every read: the header fits in the
// file, each tensor's byte range equals numel * dtype size, and the ranges tile the data
// section exactly (no gap, no overlap, nothing left over).
//
// A checkpoint holds the model's parameters and buffers under their PyTorch state_dict names
// and nothing else at the top level, so PyTorch loads it with
//   sd = safetensors.torch.load_file(path)
//   model.load_state_dict({k: v for k, v in sd.items() if not k.startswith("optimizer.")})
// The optimizer state follows under "optimizer." ("optimizer.conv1.weight.momentum_buffer"),
// every tensor in its variable's stored type (F32; BF16 for the weights and state of pure
// low-precision training, graph/optimizer.h), and the training position is in "__metadata__".
// Writes are atomic: a temp file next to the target is fsynced and then renamed over it, so `path`
// always holds either the old or the new complete file. Loads are transactional: nothing in the
// store changes unless the whole load succeeds; every metadata field is validated, and a tensor
// holding NaN or inf (a diverged run) is refused.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/variables.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace campo {

// Version of the layout below; a file with a newer version is refused. Version 1 stored
// optimizer state beside the parameters ("conv1.weight.momentum_buffer"); it still loads.
inline constexpr int kCheckpointFormatVersion = 2;

// Prefix of the optimizer state's tensor names (format version 2 on); a model variable may
// not start with it.
inline constexpr char kOptimizerStatePrefix[] = "optimizer.";
// Prefix of the quantized GEMMs' state (VariableKind::quantization_state: scales, step counts
// and amax histories, runtime/gemm_quant.h), written after the optimizer state:
// "quantization.fc1.MatMul/quant.a". A resumed run continues it.
inline constexpr char kQuantizationStatePrefix[] = "quantization.";

// The training position stored with the variables. Every field becomes a string entry of
// "__metadata__" ("campo.step", "campo.rng.<name>", ...); `extra` keys are stored as they
// are and must not start with "campo." or be "format" (reserved).
struct CheckpointMeta {
  // Written as kCheckpointFormatVersion whatever this holds; 0 after loading a file that
  // campo did not write (e.g. one exported from PyTorch), whose other fields are defaults.
  // Loaded counts are at most 2^53; model and optimizer are plain names.
  int format_version = kCheckpointFormatVersion;
  std::string model;                              // registry name, e.g. "resnet18"
  int64_t step = 0;                               // optimizer steps taken
  int64_t epoch = 0;                              // current epoch (0-based)
  int64_t position_in_epoch = 0;                  // batches of `epoch` already consumed
  std::string optimizer;                          // "sgd" | "adam" | "" (none)
  std::map<std::string, std::string> rng_states;  // name -> rng_state_to_string(...)
  std::map<std::string, std::string> extra;
};

// Rng::State as text ("xoshiro256**:" then the four state words, the spare flag and the
// spare float's bits, all hex), exact in both directions.
std::string rng_state_to_string(const Rng::State& state);
Rng::State rng_state_from_string(const std::string& text);  // throws on malformed text

// Writes every parameter and buffer of `vars` (in creation order, each in its stored type,
// F32 or BF16) plus, for each
// batch-norm layer ("<prefix>.running_mean"), "<prefix>.num_batches_tracked" = meta.step as
// an I64 scalar, as in torchvision's state_dict; then the optimizer state under
// kOptimizerStatePrefix. Atomic (see above); throws campo::Error naming `path` on any
// failure, leaving a previous file at `path` untouched.
void save_checkpoint(const std::string& path, const VariableStore& vars,
                     const CheckpointMeta& meta);

struct LoadOptions {
  // A file exported from PyTorch holds only the model state: load it and reset the
  // optimizer state to zero (a fresh optimizer) instead of failing.
  bool allow_missing_optimizer_state = false;
  // Refuse tensors in the file that match no variable. "<prefix>.num_batches_tracked" of
  // a batch-norm layer in `vars` is always accepted (save_checkpoint writes it).
  bool strict_unexpected = false;
};

// Loads every variable of `vars` from the tensor of its name (optimizer state under
// kOptimizerStatePrefix, or beside the parameters in a version-1 file; same shape; F32, or
// F16/BF16/F64 converted to f32; then into the variable's stored type: exact for BF16 into a
// bf16 variable, rounded to nearest even for wider values), copying into the existing storage so
// compiled executables keep seeing it. Validates the whole file (a FIFO or directory is refused
// before it is opened) and its metadata first and stages all tensors, refusing NaN and
// inf; on any error throws campo::Error naming `path` and leaves `vars` untouched.
CheckpointMeta load_checkpoint(const std::string& path, VariableStore& vars,
                               const LoadOptions& options = {});

// Typed readers of the `extra` fields callers store in a checkpoint ("loss_scale"): the
// whole string must be the number (no spaces or trailing junk, no overflow) and lie in
// [min, max]; a float must also be finite. `fallback` when the key is absent. Throws
// campo::Error "checkpoint <path>: metadata '<key>' is '<value>', ..." otherwise.
int64_t checkpoint_extra_int(const std::string& path, const CheckpointMeta& meta,
                             const std::string& key, int64_t min, int64_t max, int64_t fallback);
double checkpoint_extra_float(const std::string& path, const CheckpointMeta& meta,
                              const std::string& key, double min, double max, double fallback);

// Tensor names in the file, in header order (the file is fully validated).
std::vector<std::string> checkpoint_tensor_names(const std::string& path);

// All tensors of a safetensors file with their stored dtype (F32, F16, BF16, I32, I64;
// another dtype is an error naming the tensor). For tools and tests.
std::map<std::string, Tensor> read_safetensors(const std::string& path);
// The "__metadata__" of a safetensors file (empty when absent).
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

// Writes `tensors` (host tensors of any campo dtype) in the given header order,
// atomically as save_checkpoint. Names must be unique and not "__metadata__".
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace campo
