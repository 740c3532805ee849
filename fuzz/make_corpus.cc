// Writes the fuzz targets' seed corpus and dictionaries: small valid inputs of every
// format, made with campo's own writers where it has one (safetensors, checkpoints,
// calibration files) and stb_image_write for images.
//   campo_fuzz_corpus <fuzz-dir>    writes <fuzz-dir>/corpus/<target>/* and <target>.dict
// The committed fuzz/corpus and fuzz/*.dict are its output; rerun it after a format change.
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "amp/calibration.h"
#include "datasets/idx.h"
#include "datasets/tokenizer.h"
#include "fuzz/targets.h"
#include "graph/checkpoint.h"
#include "runtime/hardware_counters.h"
#include "runtime/kernel_activity.h"
#include "train/metrics_log.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace fs = std::filesystem;
using namespace campo;

namespace {

fs::path corpus_dir;

fs::path seed(const std::string& target, const std::string& name) {
  fs::create_directories(corpus_dir / target);
  return corpus_dir / target / name;
}

void write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  CAMPO_CHECK(out.good(), path.string(), ": cannot write");
}

void write_text(const fs::path& path, const std::string& text) {
  write(path, std::vector<uint8_t>(text.begin(), text.end()));
}

void write_gzip(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb9");
  CAMPO_CHECK(f != nullptr, path.string(), ": cannot write");
  CAMPO_CHECK(
      bytes.empty() || gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()),
      path.string(), ": gzip write failed");
  CAMPO_CHECK(gzclose(f) == Z_OK, path.string(), ": gzip close failed");
}

std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, size_t payload) {
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  for (size_t i = 0; i < payload; ++i) out.push_back(uint8_t(i * 37 % 251));
  return out;
}

// A gradient with a few colours, `channels` interleaved.
std::vector<uint8_t> pixels(int w, int h, int channels) {
  std::vector<uint8_t> p(size_t(w * h * channels));
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(i * 29 + i / size_t(channels) * 7);
  return p;
}

void make_idx() {
  write(seed("idx", "images-2x3x4"), idx_bytes(kIdxImagesMagic, {2, 3, 4}, 24));
  write_gzip(seed("idx", "images-2x3x4.gz"), idx_bytes(kIdxImagesMagic, {2, 3, 4}, 24));
  write(seed("idx", "images-1x28x28"), idx_bytes(kIdxImagesMagic, {1, 28, 28}, 784));
  write(seed("idx", "images-empty"), idx_bytes(kIdxImagesMagic, {0, 2, 2}, 0));
  std::vector<uint8_t> labels = idx_bytes(kIdxLabelsMagic, {3}, 0);
  labels.insert(labels.end(), {0, 9, 4});
  write(seed("idx", "labels-3"), labels);
  write_gzip(seed("idx", "labels-3.gz"), labels);
}

void make_cifar10() {
  for (int records : {1, 2}) {
    std::vector<uint8_t> bytes;
    for (int r = 0; r < records; ++r) {
      bytes.push_back(uint8_t(r * 7 % 10));
      std::vector<uint8_t> planes = pixels(32, 32, 3);
      bytes.insert(bytes.end(), planes.begin(), planes.end());
    }
    write(seed("cifar10", "batch-" + std::to_string(records)), bytes);
  }
}

void make_images() {
  const std::vector<uint8_t> rgb = pixels(6, 5, 3), grey_alpha = pixels(4, 4, 2);
  const std::vector<uint8_t> rgba = pixels(5, 3, 4), grey = pixels(8, 8, 1);
  stbi_write_png(seed("image", "rgb.png").c_str(), 6, 5, 3, rgb.data(), 6 * 3);
  stbi_write_png(seed("image", "grey-alpha.png").c_str(), 4, 4, 2, grey_alpha.data(), 4 * 2);
  stbi_write_bmp(seed("image", "rgb.bmp").c_str(), 6, 5, 3, rgb.data());
  stbi_write_tga_with_rle = 1;
  stbi_write_tga(seed("image", "rgba-rle.tga").c_str(), 5, 3, 4, rgba.data());
  stbi_write_tga_with_rle = 0;
  stbi_write_tga(seed("image", "grey.tga").c_str(), 8, 8, 1, grey.data());
  stbi_write_jpg(seed("image", "rgb.jpg").c_str(), 6, 5, 3, rgb.data(), 90);
  stbi_write_jpg(seed("image", "grey.jpg").c_str(), 8, 8, 1, grey.data(), 75);
  // Netpbm: binary grey (P5) and colour (P6), written by hand (stb_image_write has none).
  std::string pgm = "P5\n4 3\n255\n";
  for (int i = 0; i < 12; ++i) pgm.push_back(char(i * 20));
  write_text(seed("image", "grey.pgm"), pgm);
  std::string ppm = "P6\n# a comment\n3 2\n255\n";
  for (int i = 0; i < 18; ++i) ppm.push_back(char(i * 13));
  write_text(seed("image", "rgb.ppm"), ppm);
  // GIF89a, 1x1, a two-colour global table, one LZW-coded pixel (GIF89a specification).
  write(seed("image", "one-pixel.gif"),
        {'G', 'I',  'F', '8', '9', 'a', 1, 0, 1, 0, 0x80, 0, 0, 0,    0, 0, 255, 255,
         255, 0x2c, 0,   0,   0,   0,   1, 0, 1, 0, 0,    2, 2, 0x44, 1, 0, 0x3b});
}

Tensor filled(const Shape& shape, DType dtype) {
  Tensor t = Tensor::zeros(shape, dtype);
  auto* bytes = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = uint8_t(i * 11 % 97);
  return t;
}

void make_safetensors() {
  // The fuzz target's model (fuzz/safetensors_fuzz.cc), saved as a checkpoint.
  VariableStore vars(7, default_cpu_backend());
  vars.get_or_create("fc.weight", {2, 3}, Init::constant(0.5f), VariableKind::parameter);
  vars.get_or_create("fc.bias", {2}, Init::constant(-1.0f), VariableKind::parameter);
  vars.get_or_create("bn.running_mean", {2}, Init::zeros(), VariableKind::buffer);
  vars.get_or_create("fc.weight.momentum", {2, 3}, Init::ones(), VariableKind::optimizer_state);
  CheckpointMeta meta;
  meta.model = "mlp";
  meta.step = 12;
  meta.epoch = 1;
  meta.position_in_epoch = 3;
  meta.optimizer = "sgd";
  meta.rng_states["data"] = rng_state_to_string(Rng(5).state());
  meta.extra["note"] = "seed";
  save_checkpoint(seed("safetensors", "checkpoint.safetensors").string(), vars, meta);
  // A PyTorch-style export: the model only, in other dtypes.
  write_safetensors(seed("safetensors", "export-f16-bf16.safetensors").string(),
                    {{"fc.weight", filled({2, 3}, DType::f16)},
                     {"fc.bias", filled({2}, DType::bf16)},
                     {"bn.running_mean", filled({2}, DType::f32)},
                     {"bn.num_batches_tracked", filled({}, DType::i64)}},
                    {{"format", "pt"}});
  write_safetensors(seed("safetensors", "ints-and-empty.safetensors").string(),
                    {{"a", filled({3}, DType::i32)}, {"empty", filled({0, 4}, DType::f32)}}, {});
  write_safetensors(seed("safetensors", "nothing.safetensors").string(), {}, {});
  // Many tensors: the header is read in time linear in its entries (reading it was once
  // quadratic: 40,000 entries took 4 s before any check), and the mutations of a long
  // header reach the duplicate, gap and overlap checks among many entries.
  std::vector<std::pair<std::string, Tensor>> many;
  for (int i = 0; i < 1000; ++i) many.emplace_back("t" + std::to_string(i), filled({}, DType::i32));
  write_safetensors(seed("safetensors", "many-tensors.safetensors").string(), many,
                    {{"format", "pt"}});
}

void make_calibration() {
  Calibration cal;
  cal.machine = fuzz::calibration_fuzz_machine();
  cal.campo_version = fuzz::kCalibrationFuzzCampoVersion;
  cal.created = "2026-01-01T00:00:00Z";
  cal.hardware_counters = "unavailable: fuzz";
  cal.cast = {0.001, 1e-6};
  cal.cast_all = {cal.cast, 12, 4.5};
  cal.cast_to_low = {{0.002, 2e-6}, 6, 3.0};
  cal.cast_to_f32 = {{0.0005, 1e-6}, 6, 2.0};
  OpModel conv;
  conv.key = "Conv2D";
  conv.features = {Feature::flops, Feature::bytes};
  conv.rho = {0.9, 0.8};
  conv.weights = {1e-9, 2e-8};
  conv.sigma = 0.7;
  conv.bias = 0.01;
  conv.train_samples = 20;
  conv.heldout_samples = 5;
  conv.train_mape = 8;
  conv.heldout_mape = 12;
  cal.ops[conv.key] = conv;
  OpModel matmul;
  matmul.key = "MatMul:unaligned";
  matmul.fit = "ratio";
  matmul.sigma = 1.4;
  matmul.train_samples = 3;
  cal.ops[matmul.key] = matmul;
  cal.configurations = 7;
  cal.heldout_configurations = 2;
  cal.seconds = 42.5;
  save_calibration(cal, seed("calibration", "two-ops.json").string());
  cal.ops.clear();
  save_calibration(cal, seed("calibration", "no-ops.json").string());
}

void make_amp_lists() {
  write_text(seed("amp_lists_file", "add-remove.json"),
             R"({"allow": {"add": ["Tanh", "Sigmoid"], "remove": ["MatMul"]},)"
             R"( "clear": {"remove": ["Relu"]}})");
  write_text(seed("amp_lists_file", "deny.json"), R"({"deny": {"add": ["Conv2D"]}})");
  write_text(seed("amp_lists_file", "empty.json"), "{}");
  write_text(seed("amp_lists_edit", "add"), "allow+=Tanh,Sigmoid");
  write_text(seed("amp_lists_edit", "several"), "allow+=Tanh;clear-=Relu;deny+=MatMul");
  write_text(seed("amp_lists_edit", "remove"), "infer-=BiasAdd");
}

void make_precision_policy() {
  write_text(seed("precision_policy_file", "first-last-f32.json"),
             R"({"description": "first and last layers f32", "rules": [)"
             R"({"name": "*", "format": "bf16", "note": "every node low"}, )"
             R"({"layers": {"first": 1, "last": 1}, "format": "f32"}]})");
  write_text(seed("precision_policy_file", "ops-and-globs.json"),
             R"({"rules": [{"op": ["Conv2D", "MatMul"], "name": ["conv*", "fc?.*"], )"
             R"("format": "fp16"}, {"op": "Relu", "layers": {"last": 2}, "format": "f32"}]})");
}

// A text file and a tokenizer vocabulary trained on it (the text target reads each input
// as both).
void make_text() {
  const std::string text =
      "The quick brown fox jumps over the lazy dog. \"Don't panic!\" -- Douglas Adams\n"
      "A caf\xc3\xa9 in Z\xc3\xbcrich serves cr\xc3\xa8me br\xc3\xbbl\xc3\xa9"
      "e at 9:30; "
      "it\xe2\x80\x99s \xe2\x80\x9cgood\xe2\x80\x9d \xe4\xb8\xad\xe6\x96\x87.\n"
      "The fox and the dog, the dog and the fox: foxes, dogs, quickly, quicker.\n";
  write_text(seed("text", "english.txt"), text);
  WordPieceTokenizer::train(text, 120).save(seed("text", "vocab.json").string());
}

// A step of three nodes as the CUPTI timer records it: a convolution of two kernels, a node
// with none, a GEMM, a memset of no node.
void make_activity_table() {
  const uint64_t t0 = 1754000000000000000ull;  // GPU timestamps are ns since the epoch
  ActivityTable t;
  t.kernels = {{"[CUDA memset]", t0, t0 + 1500, 11},
               {"cudnn::ops::nchwToNhwcKernel", t0 + 5000, t0 + 9000, 12},
               {"sm90_xmma_fprop_implicit_gemm_cudnn", t0 + 9500, t0 + 31500, 13},
               {"sm90_xmma_gemm_cublas", t0 + 40000, t0 + 52000, 15}};
  t.correlations = {{12, 1}, {13, 1}, {14, 2}, {15, 3}, {16, 0}};
  write_activity_table(seed("activity_table", "step.jsonl").string(), t, "fuzz gpu");
  write_activity_table(seed("activity_table", "empty.jsonl").string(), {}, "");
}

// Two nodes' counters as a GPU's profiling step reads them, one with its recorded times;
// a node with a counter unread; an empty table.
void make_counter_table() {
  CounterTable t;
  t.device = "fuzz gpu";
  NodeCounters conv;
  conv.node = "conv1";
  conv.values = {3145728, 61.5, 42.25, 87.5, 125000};
  conv.fp32_ms = 0.125;
  conv.low_ms = 0.0625;
  NodeCounters relu;
  relu.node = "relu1";
  relu.values[size_t(Counter::dram_bytes)] = 1048576;
  t.nodes = {conv, relu};
  write_counter_table(seed("counter_table", "step.jsonl").string(), t);
  write_counter_table(seed("counter_table", "empty.jsonl").string(), {});
}

// A --metrics file of a --numerics run, as MetricsLog writes it: a train line, the records of
// one step (a GEMM's two operands, per-tensor and MX, and a Cast), an eval line.
void make_numerics_file() {
  MetricsLog log({.metrics_path = seed("numerics_file", "run.jsonl").string()});
  log.log_step({.step = 10, .epoch = 1, .losses = {2.25}, .lrs = {0.05f}});
  NumericsEntry a{.node = "fc1.MatMul", .operand = "a", .pass = "forward", .format = "e4m3"};
  a.written = true;
  a.numerics.counts = {.elements = 8192, .underflow = 96, .saturated = 2, .amax = 3.5f};
  a.numerics.scale = 128.0f;
  NumericsEntry b = a;
  b.operand = "b";
  b.format = "e2m1";
  b.numerics.counts = {.elements = 4096, .underflow = 7, .saturated = 30, .nan = 1, .amax = 0.25f};
  b.numerics.scale = NAN;  // MX: null
  NumericsEntry x{.node = "Cast_3", .operand = "x", .pass = "backward", .format = "f16"};
  x.written = true;
  x.numerics.counts = {.elements = 1024, .underflow = 1, .overflow = 3, .inf = 2, .amax = 7e4f};
  log.log_numerics(10, {a, b, x});
  log.log_eval(10, {0.5});
}

// Dictionaries: the format's keywords, so the fuzzer need not guess them byte by byte.
void make_dictionaries(const fs::path& dir) {
  auto dict = [&](const std::string& target, const std::vector<std::string>& words) {
    std::ofstream out(dir / (target + ".dict"), std::ios::trunc);
    out << "# Written by campo_fuzz_corpus (fuzz/make_corpus.cc).\n";
    for (const std::string& w : words) out << '"' << w << "\"\n";
  };
  std::vector<std::string> ops, lists = {"allow", "infer", "deny", "clear", "fp32"};
  for (size_t k = 0; k < size_t(OpKind::kCount); ++k) ops.push_back(op_name(OpKind(k)));
  std::vector<std::string> edit = lists;
  edit.insert(edit.end(), {"+=", "-=", ";", ","});
  edit.insert(edit.end(), ops.begin(), ops.end());
  dict("amp_lists_edit", edit);
  std::vector<std::string> json = {"{",
                                   "}",
                                   "[",
                                   "]",
                                   ":",
                                   ",",
                                   "\\\"",
                                   "true",
                                   "false",
                                   "null",
                                   "-1",
                                   "1e308",
                                   "18446744073709551615"};
  std::vector<std::string> file = json;
  file.insert(file.end(), {"\\\"add\\\"", "\\\"remove\\\""});
  for (const std::string& l : lists) file.push_back("\\\"" + l + "\\\"");
  for (const std::string& op : ops) file.push_back("\\\"" + op + "\\\"");
  dict("amp_lists_file", file);
  std::vector<std::string> policy = json;
  for (const char* w : {"rules", "description", "op", "name", "layers", "first", "last", "format",
                        "note", "f32", "bf16", "f16", "fp8_e4m3", "mxfp4", "*"})
    policy.push_back("\\\"" + std::string(w) + "\\\"");
  for (const std::string& op : ops) policy.push_back("\\\"" + op + "\\\"");
  dict("precision_policy_file", policy);
  std::vector<std::string> st = json;
  for (const char* w : {"__metadata__",
                        "dtype",
                        "shape",
                        "data_offsets",
                        "F32",
                        "F16",
                        "BF16",
                        "F64",
                        "I32",
                        "I64",
                        "U8",
                        "BOOL",
                        "campo.format_version",
                        "campo.step",
                        "campo.epoch",
                        "campo.position_in_epoch",
                        "campo.rng.",
                        "campo.model",
                        "campo.optimizer",
                        "xoshiro256**:",
                        "running_mean",
                        "num_batches_tracked"})
    st.push_back("\\\"" + std::string(w) + "\\\"");
  dict("safetensors", st);
  std::vector<std::string> cal = json;
  for (const char* w : {"format",       "campo-calibration",
                        "version",      "machine",
                        "ops",          "key",
                        "fit",          "features",
                        "name",         "rho",
                        "weight",       "sigma",
                        "bias_ms",      "cast",
                        "cast_fits",    "both",
                        "to_low",       "to_f32",
                        "fixed_ms",     "per_element_ms",
                        "samples",      "mape",
                        "flops",        "bytes",
                        "intensity",    "elements",
                        "aligned",      ":unaligned",
                        "dram_bytes",   "instructions",
                        "analytic",     "tensor_pipe",
                        "bf16",         "f16",
                        "cpu",          "device",
                        "campo_version"})
    cal.push_back("\\\"" + std::string(w) + "\\\"");
  dict("calibration", cal);
  std::vector<std::string> text = json;
  for (const char* w : {"format", "campo-wordpiece", "version", "vocab_size", "vocab", "[PAD]",
                        "[UNK]", "[CLS]", "[SEP]", "[MASK]", "##"})
    text.push_back("\\\"" + std::string(w) + "\\\"");
  for (const char* w : {"\\xc3\\xa9", "\\xe2\\x80\\x99", "\\xe4\\xb8\\xad", "\\xef\\xbb\\xbf",
                        "\\xed\\xa0\\x80", "\\x00"})
    text.push_back(w);
  dict("text", text);
  std::vector<std::string> activity = json;
  for (const char* w : {"format", "campo-cupti-activity", "version", "device", "kernels",
                        "external_correlations", "kind", "kernel", "external_correlation", "name",
                        "start_ns", "end_ns", "correlation_id", "external_id"})
    activity.push_back("\\\"" + std::string(w) + "\\\"");
  activity.push_back("\\x0a");  // records are lines
  dict("activity_table", activity);
  std::vector<std::string> counters = json;
  for (const char* w :
       {"format", "campo-hardware-counters", "version", "device", "nodes", "node", "dram_bytes",
        "achieved_occupancy", "tensor_pipe", "l2_hit_rate", "instructions", "fp32_ms", "low_ms"})
    counters.push_back("\\\"" + std::string(w) + "\\\"");
  counters.push_back("\\x0a");  // records are lines
  dict("counter_table", counters);
  std::vector<std::string> numerics = json;
  for (const char* w :
       {"event",  "numerics", "train",   "step",     "node",      "operand",   "pass",
        "format", "elements", "amax",    "scale",    "underflow", "saturated", "overflow",
        "nan",    "inf",      "forward", "backward", "e4m3",      "e5m2",      "bf16"})
    numerics.push_back("\\\"" + std::string(w) + "\\\"");
  numerics.push_back("\\x0a");  // records are lines
  dict("numerics_file", numerics);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: campo_fuzz_corpus <fuzz-dir>\n");
    return 2;
  }
  try {
    corpus_dir = fs::path(argv[1]) / "corpus";
    make_idx();
    make_cifar10();
    make_images();
    make_safetensors();
    make_calibration();
    make_amp_lists();
    make_precision_policy();
    make_text();
    make_activity_table();
    make_counter_table();
    make_numerics_file();
    make_dictionaries(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "campo_fuzz_corpus: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
