// The compiler and the executor.
// Compile (once): dead-code elimination from the fetched values and side-effecting nodes,
// a topological schedule, one kernel per node chosen by (op, device, dtype), and a
// liveness memory plan placing every intermediate value in one arena. Variables are bound
// to the VariableStore's tensors; placeholders get their own persistent buffers.
// Run (every step): kernels in schedule order on pre-built argument lists; nothing is
// allocated by the executor in the steady state. All memory (arena, placeholders, weight
// copies) comes from the backend of the VariableStore; the host reaches it only through
// feed / fetch (the backend's copies). A training step is one uninterrupted sequence of
// kernels: a loss-scale overflow is handled by the updates themselves (AllFinite's flag,
// ops/optimizer.cc), not by the host splitting the step.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/layout.h"
#include "graph/memory_plan.h"
#include "graph/variables.h"
#include "ops/kernel.h"

namespace campo {

// One arena for executables that never run at the same time (the profiling step's two
// precisions; a session's step graphs, sample graph and evaluation graphs): each places its
// memory plan at the arena's start, so the arena is as large as the largest plan, not the
// sum of them. An executable's values there, its fetches included, last until another
// executable of the arena runs: read them first. A plan larger than the arena grows it (a
// new buffer); the others rebind their values at their next run.
class SharedArena {
 public:
  explicit SharedArena(std::shared_ptr<Backend> backend) : backend_(std::move(backend)) {}
  // At least `bytes` large (moves the arena when it grows).
  void reserve(size_t bytes);
  char* data() const { return static_cast<char*>(buffer_.get()); }
  size_t bytes() const { return bytes_; }
  const Backend* backend() const { return backend_.get(); }

 private:
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<void> buffer_;
  size_t bytes_ = 0;
};

struct CompileOptions {
  std::vector<ValueId> fetches;  // values readable after run(); kept alive to the end
  uint64_t seed = 0;             // seeds the context RNG (dropout)
  // Whether convolution activations stay blocked between kernels (graph/layout.h); only
  // on a backend with CPU kernels (elsewhere every value is plain).
  ConvLayout conv_layout = ConvLayout::blocked;
  // Shares the arena of other executables on the same backend (see SharedArena); null:
  // the executable's own.
  std::shared_ptr<SharedArena> arena;
  // The ranks a data-parallel step reduces its gradient buckets over (AllReduceStart /
  // AllReduceWait, ops/op.h); null: one process (the buckets are their own sums).
  std::shared_ptr<Communicator> communicator;
};

// Where an executable's memory goes, in bytes (campo bench and campo train --profile print
// it, docs/usage.md).
struct ExecutableMemory {
  size_t arena = 0;          // the memory plan: every intermediate value (activations, gradients);
                             // executables sharing one arena (SharedArena) count it once
  size_t live_peak = 0;      // the plan's lower bound: the most bytes live at one position
  size_t gradients = 0;      // of the arena: the weight gradients the optimizer updates read
  size_t inputs = 0;         // placeholders (the batch, labels, scalars)
  size_t weight_copies = 0;  // low-precision copies of variables, kept from step to step
  size_t workspace = 0;      // the kernels' shared workspace: scratchpads, reorder buffers, staging
  size_t kernel_buffers = 0;  // what kernels keep for themselves (zero-padded operands)
  size_t total() const { return arena + inputs + weight_copies + workspace + kernel_buffers; }
  ExecutableMemory& operator+=(const ExecutableMemory& o);
};

// What an executable of a graph would place where, decided before anything is allocated or
// any kernel made (the executor's first stage; campo plan prints its figures): the schedule
// after dead-code elimination, the physical layouts and the memory plan.
struct StepPlan {
  std::vector<NodeId> schedule;
  LayoutAssignment layouts;
  // The values in the arena: the memory plan's first requests (the conversions' buffers,
  // by conversion, follow).
  std::vector<ValueId> planned;
  std::vector<int> outside;             // schedule positions of placeholders and weight copies
  std::vector<BufferRequest> requests;  // what `memory` places: sizes and lifetimes
  MemoryPlan memory;
  size_t input_bytes = 0, weight_copy_bytes = 0, gradient_bytes = 0;
  // The figures known before kernels are made (no workspace, no kernel buffers).
  ExecutableMemory estimate() const;
};
// `conv_layout` applies where the kernels are CPU kernels (`kernel_device`,
// Backend::kernel_device); elsewhere every value is plain.
StepPlan plan_step(const Graph& graph, const std::vector<ValueId>& fetches, ConvLayout conv_layout,
                   Device kernel_device);

class Executable {
 public:
  Executable(const Graph& graph, VariableStore& vars, const CompileOptions& options);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // The persistent buffer of a placeholder (a tensor of the backend's device: fill it with
  // feed, or through the backend).
  Tensor& input(const std::string& placeholder_name);
  bool has_input(const std::string& placeholder_name) const;
  const Shape& input_shape(const std::string& placeholder_name) {
    return input(placeholder_name).shape();
  }
  // Runs one step. Each run first refreshes the weight copies (Node::weight_copy) if the
  // variables may have changed since the last refresh (VariableStore::generation). With
  // timing on, it synchronizes at the end to read the node times.
  //
  // CUDA graphs (the backend's --cuda-graph, Backend::cuda_graph): where the backend can
  // record its queue and every kernel allows it (Kernel::capture_blocker), the first run
  // after the arena was bound launches kernel by kernel (a warm step: lazy tables, algorithm
  // searches), the next captures the step (Backend::begin_capture) and every later one
  // replays it: the kernels' before_run hooks in schedule order, the replay, their after_run
  // hooks. A run with timing on launches kernel by kernel. A moved arena (a sharing
  // executable grew it) drops the capture: a warm run, then a new one. A capture that fails
  // is an error under --cuda-graph on; under auto the step goes on kernel by kernel, the
  // failure kept in replay_blocker().
  void run();
  // One step launched kernel by kernel with brackets.start(pos) / stop(pos) around each node
  // (pos: its place in schedule()), then a synchronize: what reads hardware counters per node
  // (train/profiling.h's read_node_counters). Times nothing.
  void run_bracketed(NodeBrackets& brackets);
  // Why this executable's step is launched kernel by kernel rather than replayed ("--cuda-graph
  // off", the backend's capture_unsupported(), a node's capture_blocker(), a failed capture);
  // empty when it is replayed (or will be, from its second run).
  const std::string& replay_blocker() const { return replay_blocker_; }
  int captures() const { return captures_; }    // steps captured (1, or more after arena moves)
  int64_t replays() const { return replays_; }  // runs that replayed a capture
  // A fetched value after run() (a view into the plan: copy it to keep it).
  const Tensor& output(ValueId v) const;

  // The host boundary of a step, through the backend's copies: fill a placeholder from a
  // host tensor (same dtype and element count) or with one f32 value; read a fetched value
  // back as a new host tensor, or a fetched f32 scalar.
  void feed(const std::string& placeholder_name, const Tensor& host);
  void feed_scalar(const std::string& placeholder_name, float value);
  Tensor fetch(ValueId v);
  float fetch_scalar(ValueId v);

  // The storage bound to any computed value (meaningful for a fetch only after run(); for
  // others only while the value is live), in the layout layouts().value_layout gives
  // (fetched values are always plain). For tests and tools.
  const Tensor& buffer(ValueId v) const { return values_.at(size_t(v)); }

  const std::vector<NodeId>& schedule() const { return schedule_; }
  const Graph& graph() const { return graph_; }
  ExecContext& context() { return ctx_; }
  Backend& backend() { return ctx_.backend(); }
  const MemoryPlan& memory_plan() const { return plan_; }
  const std::shared_ptr<SharedArena>& arena() const { return arena_; }
  ExecutableMemory memory() const;
  // The physical layout of every value and the conversions run between kernels.
  const LayoutAssignment& layouts() const { return layouts_; }
  // How many times the weight copies were rebuilt from the variables (0 without copies).
  int weight_copy_refreshes() const { return copy_refreshes_; }

  // Per-node time of the last run() (the backend's NodeTimer: a host clock on the CPU,
  // events on a GPU), in schedule order, when timing is on.
  void set_timing(bool on);
  const std::vector<double>& node_times_ms() const { return node_times_ms_; }
  // Called at the end of a timed run with (node id, milliseconds) for each node in
  // schedule order.
  void set_node_hook(std::function<void(NodeId, double)> hook) { hook_ = std::move(hook); }

 private:
  const Graph& graph_;
  VariableStore& vars_;
  CompileOptions options_;
  ExecContext ctx_;
  std::vector<NodeId> schedule_;
  std::vector<Tensor> values_;                    // by ValueId; undefined for values not computed
  std::vector<std::unique_ptr<Kernel>> kernels_;  // by schedule position (null for leaves)
  std::vector<std::vector<Tensor>> node_inputs_, node_outputs_;
  LayoutAssignment layouts_;
  // Layout conversions (layouts_.conversions), each run right before the schedule position
  // of its first reader (and timed with it).
  struct ConversionStep {
    size_t position;
    size_t conversion;  // index into layouts_.conversions
    std::unique_ptr<Kernel> kernel;
    std::vector<Tensor> input, output;
  };
  std::vector<ConversionStep> conversions_;  // by position
  std::vector<size_t> first_conversion_;     // by position: index into conversions_
  void run_conversions(size_t pos);
  std::vector<std::pair<std::string, Tensor>> placeholders_;
  MemoryPlan plan_;
  size_t input_bytes_ = 0, weight_copy_bytes_ = 0, gradient_bytes_ = 0;
  // Owned from the start, so that a constructor that throws later (a missing kernel)
  // frees it too (a leak found by scripts/sanitize.sh).
  std::shared_ptr<SharedArena> arena_;
  // The values placed in the arena (the plan's requests: these, then the conversions'
  // buffers), and the arena address their tensors were made for.
  std::vector<ValueId> planned_;
  std::vector<Tensor> converted_;  // by conversion
  char* bound_arena_ = nullptr;
  // Points every planned value, conversion buffer and kernel argument list at the arena
  // (at construction, and at a run after a sharing executable grew it).
  void bind_arena();
  std::unique_ptr<NodeTimer> timer_;
  void refresh_weight_copies();
  std::vector<size_t> copy_positions_;                 // schedule positions of weight-copy Casts
  std::vector<std::unique_ptr<Kernel>> copy_kernels_;  // their kernels, by copy_positions_
  std::optional<uint64_t> copies_generation_;  // VariableStore::generation at the last refresh
  int copy_refreshes_ = 0;
  std::vector<double> node_times_ms_;
  std::function<void(NodeId, double)> hook_;
  // CAMPO_CUDA_SYNC=1 (read at construction): run() synchronizes the backend after every
  // node, so an asynchronous kernel fault is reported with the node that caused it.
  bool sync_each_node_ = false;
  void run_synchronized();
  void rebind_if_moved();  // a sharing executable grew the arena: bind again, drop the capture
  void issue_bracketed(NodeBrackets& brackets);  // every node, bracketed; then a synchronize
  void run_launched();   // kernel by kernel, each with its before_run and after_run
  void run_replayed();   // warm, capture, replay (see run())
  void issue_kernels();  // every node's run() alone: what a capture records
  std::string why_not_replayed();
  std::string replay_blocker_;
  std::unique_ptr<CapturedWork> captured_;
  bool warm_ = false;  // a launched run since the arena was last bound
  int captures_ = 0;
  int64_t replays_ = 0;
};

}  // namespace campo
