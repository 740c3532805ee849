// Checkpoints: bit-exact round trips, files written byte by byte (the format as another
// writer would produce it), every kind of corruption refused with a message that names the
// problem and without touching the store, and atomic saves (a failed or killed write
// leaves the previous file as it was).
#include "graph/checkpoint.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

// A small store with every kind of variable, a scalar, an empty tensor and special values
// (-0 and a denormal; NaN and inf are refused at load, see NonFiniteTensorsAreRefused).
VariableStore make_store(uint64_t seed, int64_t fc_in = 5) {
  VariableStore vars(seed, default_cpu_backend());
  vars.get_or_create("conv1.weight", {4, 3, 3, 3}, Init::normal(0, 1), VariableKind::parameter);
  vars.get_or_create("bn1.weight", {4}, Init::uniform(0.5f, 1.5f), VariableKind::parameter);
  vars.get_or_create("bn1.bias", {4}, Init::uniform(-1, 1), VariableKind::parameter);
  vars.get_or_create("bn1.running_mean", {4}, Init::uniform(-1, 1), VariableKind::buffer);
  vars.get_or_create("bn1.running_var", {4}, Init::uniform(0.5f, 2), VariableKind::buffer);
  vars.get_or_create("fc.weight", {2, fc_in}, Init::normal(0, 1), VariableKind::parameter);
  vars.get_or_create("fc.bias", {2}, Init::normal(0, 1), VariableKind::parameter);
  vars.get_or_create("temperature", {}, Init::uniform(1, 2), VariableKind::parameter);
  vars.get_or_create("empty", {0, 3}, Init::zeros(), VariableKind::buffer);
  vars.get_or_create("conv1.weight.momentum_buffer", {4, 3, 3, 3}, Init::normal(0, 1),
                     VariableKind::optimizer_state);
  vars.get_or_create("fc.weight.exp_avg", {2, fc_in}, Init::normal(0, 1),
                     VariableKind::optimizer_state);
  float* w = vars.at("fc.weight").data_as<float>();
  w[1] = -0.0f;
  w[3] = std::numeric_limits<float>::denorm_min();
  return vars;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// Every variable's bytes, for "the store is untouched" checks.
std::map<std::string, std::vector<uint8_t>> snapshot(const VariableStore& vars) {
  std::map<std::string, std::vector<uint8_t>> s;
  for (const auto& n : vars.names()) s[n] = bytes_of(vars.at(n));
  return s;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A safetensors file by hand: length prefix, header text as given (no padding), data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char(uint64_t(header.size()) >> (8 * i));
  return out + header + data;
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return s;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("campo_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "ck.safetensors").string();
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  std::vector<std::string> files_in_dir() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  // Loading `path_` fails with a message containing `expected` (and the path), and leaves
  // the store bit-identical.
  void expect_refused(VariableStore& vars, const std::string& expected,
                      const LoadOptions& options = {}) {
    auto before = snapshot(vars);
    try {
      load_checkpoint(path_, vars, options);
      ADD_FAILURE() << "load succeeded; expected an error containing: " << expected;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(expected), std::string::npos) << msg;
      EXPECT_NE(msg.find(path_), std::string::npos) << "message does not name the file: " << msg;
    }
    EXPECT_TRUE(snapshot(vars) == before) << "a failed load modified the store";
  }
  CheckpointMeta full_meta() const {
    CheckpointMeta m;
    m.model = "resnet18";
    m.step = 1234;
    m.epoch = 3;
    m.position_in_epoch = 17;
    m.optimizer = "adam";
    Rng a(7), b(9);
    a.normal();  // leaves a spare normal in the state
    for (int i = 0; i < 5; ++i) b.next_u64();
    m.rng_states["variables"] = rng_state_to_string(a.state());
    m.rng_states["loader"] = rng_state_to_string(b.state());
    m.extra["lr_schedule"] = "cosine";
    m.extra["note"] = "ünïcode, \"quotes\" and \\ backslash";
    return m;
  }
  fs::path dir_;
  std::string path_;
};

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  VariableStore saved = make_store(1);
  const CheckpointMeta meta = full_meta();
  save_checkpoint(path_, saved, meta);
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"ck.safetensors"});

  VariableStore loaded = make_store(2);  // same names and shapes, other values
  std::map<std::string, const void*> storage;
  for (const auto& n : loaded.names()) storage[n] = loaded.at(n).data();
  const uint64_t generation = loaded.generation();
  CheckpointMeta got = load_checkpoint(path_, loaded, {.strict_unexpected = true});
  // Executables holding weight copies see that the variables changed (Node::weight_copy).
  EXPECT_GT(loaded.generation(), generation);

  for (const auto& n : saved.names()) {
    EXPECT_EQ(bytes_of(loaded.at(n)), bytes_of(saved.at(n))) << n;
    // Copied into the existing storage, so compiled executables see the loaded values.
    EXPECT_EQ(loaded.at(n).data(), storage[n]) << n;
  }
  EXPECT_EQ(got.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(got.model, meta.model);
  EXPECT_EQ(got.step, meta.step);
  EXPECT_EQ(got.epoch, meta.epoch);
  EXPECT_EQ(got.position_in_epoch, meta.position_in_epoch);
  EXPECT_EQ(got.optimizer, meta.optimizer);
  EXPECT_EQ(got.rng_states, meta.rng_states);
  EXPECT_EQ(got.extra, meta.extra);
}

TEST_F(CheckpointTest, RngStateStringRestoresTheStream) {
  Rng a(42);
  a.normal();  // has_spare = true
  Rng b(0);
  b.set_state(rng_state_from_string(rng_state_to_string(a.state())));
  EXPECT_EQ(a.normal(), b.normal());  // the spare
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  for (const char* bad : {"", "xoshiro256**:", "mt19937:0,0,0,0,0,0",
                          "xoshiro256**:0000000000000001,0000000000000002,0000000000000003,"
                          "0000000000000004,2,00000000",
                          "xoshiro256**:0000000000000001,0000000000000002,0000000000000003,"
                          "0000000000000004,0,00000000,"})
    EXPECT_THROW(rng_state_from_string(bad), Error) << bad;
}

TEST_F(CheckpointTest, FileLayoutFollowsTheFormat) {
  save_checkpoint(path_, make_store(1), full_meta());
  const std::string file = read_file(path_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(file[i]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-byte aligned";
  EXPECT_EQ(file[8], '{');
  auto md = read_safetensors_metadata(path_);
  EXPECT_EQ(md.at("format"), "pt");
  EXPECT_EQ(md.at("campo.step"), "1234");
  // Every tensor aligned to its element size within the data section.
  auto header = nlohmann::json::parse(file.substr(8, n));
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t size = e["dtype"] == "I64" ? 8 : 4;
    EXPECT_EQ(e["data_offsets"][0].get<uint64_t>() % size, 0u) << name;
  }
}

TEST_F(CheckpointTest, NumBatchesTrackedIsWrittenForBatchNormLayers) {
  CheckpointMeta meta = full_meta();
  save_checkpoint(path_, make_store(1), meta);
  auto names = checkpoint_tensor_names(path_);
  // torchvision's order: weight, bias, running_mean, running_var, num_batches_tracked.
  auto it = std::find(names.begin(), names.end(), "bn1.running_var");
  ASSERT_NE(it, names.end());
  ASSERT_NE(it + 1, names.end());
  EXPECT_EQ(*(it + 1), "bn1.num_batches_tracked");
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& s) { return s.ends_with("num_batches_tracked"); }),
            1);
  auto tensors = read_safetensors(path_);
  const Tensor& t = tensors.at("bn1.num_batches_tracked");
  EXPECT_EQ(t.dtype(), DType::i64);
  EXPECT_EQ(t.shape(), Shape{});
  EXPECT_EQ(*t.data_as<int64_t>(), meta.step);
}

TEST_F(CheckpointTest, HandWrittenFileLoads) {
  // F32 [2, 2], BF16 [3] (1, -2, 0.25), F16 [2] (1, -3); offsets out of header order and
  // the header unpadded, both of which the format allows.
  const std::string header = R"({"a.bias":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
                             R"("__metadata__":{"format":"pt","origin":"hand"},)"
                             R"("a.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("a.half":{"shape":[2],"data_offsets":[22,26],"dtype":"F16"}})";
  const std::string data = raw<float>({1.0f, 2.0f, -3.0f, 0.5f}) +
                           raw<uint16_t>({0x3F80, 0xC000, 0x3E80}) +
                           raw<uint16_t>({0x3C00, 0xC200});
  write_file(path_, safetensors_bytes(header, data));

  VariableStore vars(0, default_cpu_backend());
  vars.get_or_create("a.weight", {2, 2}, Init::zeros(), VariableKind::parameter);
  vars.get_or_create("a.bias", {3}, Init::zeros(), VariableKind::parameter);
  vars.get_or_create("a.half", {2}, Init::zeros(), VariableKind::parameter);
  CheckpointMeta meta = load_checkpoint(path_, vars, {.strict_unexpected = true});
  EXPECT_EQ(vars.at("a.weight").to_float_vector(), (std::vector<float>{1, 2, -3, 0.5f}));
  EXPECT_EQ(vars.at("a.bias").to_float_vector(), (std::vector<float>{1, -2, 0.25f}));
  EXPECT_EQ(vars.at("a.half").to_float_vector(), (std::vector<float>{1, -3}));
  EXPECT_EQ(meta.format_version, 0);  // not written by campo
  EXPECT_EQ(meta.extra, (std::map<std::string, std::string>{{"origin", "hand"}}));
  EXPECT_EQ(checkpoint_tensor_names(path_),
            (std::vector<std::string>{"a.bias", "a.weight", "a.half"}));
  auto tensors = read_safetensors(path_);
  EXPECT_EQ(tensors.at("a.bias").dtype(), DType::bf16);
  EXPECT_EQ(tensors.at("a.half").dtype(), DType::f16);
}

TEST_F(CheckpointTest, WriteAndReadEveryCampoDType) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  Rng rng(3);
  tensors.emplace_back("f32", testing::random_tensor({3, 5}, rng));
  Tensor h = Tensor::empty({7}, DType::f16), bf = Tensor::empty({2, 3}, DType::bf16);
  convert(testing::random_tensor({7}, rng).data(), DType::f32, h.data(), DType::f16, 7);
  convert(testing::random_tensor({6}, rng).data(), DType::f32, bf.data(), DType::bf16, 6);
  tensors.emplace_back("f16", h);
  tensors.emplace_back("bf16", bf);
  tensors.emplace_back("i32", Tensor::from_vector(std::vector<int32_t>{1, -2, 3}, {3}));
  Tensor i64 = Tensor::empty({2}, DType::i64);
  i64.data_as<int64_t>()[0] = -5;
  i64.data_as<int64_t>()[1] = int64_t(1) << 40;
  tensors.emplace_back("i64", i64);
  write_safetensors(path_, tensors, {{"k", "v"}});

  auto back = read_safetensors(path_);
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(back.at(name).dtype(), t.dtype()) << name;
    EXPECT_EQ(back.at(name).shape(), t.shape()) << name;
    EXPECT_EQ(bytes_of(back.at(name)), bytes_of(t)) << name;
  }
  EXPECT_EQ(read_safetensors_metadata(path_), (std::map<std::string, std::string>{{"k", "v"}}));
}

TEST_F(CheckpointTest, CorruptFilesAreRefusedWithoutTouchingTheStore) {
  VariableStore vars(0, default_cpu_backend());
  vars.get_or_create("a.weight", {2}, Init::constant(7), VariableKind::parameter);
  const std::string f32x2 = raw<float>({1, 2});
  struct Case {
    const char* what;
    std::string file;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"shorter than the length prefix", "abc", "too short for a safetensors header"},
      {"header length larger than the file",
       safetensors_bytes(R"({"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32x2)
           .replace(0, 8, raw<uint64_t>({1000000})),
       "header length 1000000 is larger than the file"},
      {"malformed JSON", safetensors_bytes(R"({"a.weight":{"dtype":"F32",)", f32x2),
       "header is not valid JSON"},
      {"header not an object", safetensors_bytes("[1, 2]", ""), "header is not a JSON object"},
      {"unknown dtype",
       safetensors_bytes(R"({"a.weight":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", f32x2),
       "tensor 'a.weight' has unknown dtype 'F33'"},
      {"negative dimension",
       safetensors_bytes(R"({"a.weight":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
                         f32x2),
       "\"shape\" must hold non-negative integers"},
      {"offsets disagree with shape",
       safetensors_bytes(R"({"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
                         raw<float>({1})),
       "F32 [2] needs 8 bytes, but data_offsets [0, 4] span 4"},
      {"offsets reversed",
       safetensors_bytes(R"({"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", f32x2),
       "\"data_offsets\" must be [begin, end]"},
      {"overlapping offsets",
       safetensors_bytes(R"({"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         raw<float>({1, 2, 3})),
       "tensors 'a.weight' [0, 8) and 'b' [4, 12) overlap"},
      {"gap between tensors",
       safetensors_bytes(R"({"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         raw<float>({0, 1, 2})),
       "no tensor covers bytes [0, 4)"},
      {"trailing bytes",
       safetensors_bytes(R"({"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                         raw<float>({1, 2, 3})),
       "the data section holds 12 bytes but the tensors cover only 8"},
      {"truncated body",
       safetensors_bytes(R"({"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                         raw<float>({1})),
       "tensor 'a.weight' ends at byte 8 of the data section, which holds only 4 bytes: the "
       "file is truncated"},
      {"non-string metadata",
       safetensors_bytes(R"({"__metadata__":{"step":5},)"
                         R"("a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                         f32x2),
       "metadata 'step' is not a string"},
      {"integer tensor for a float variable",
       safetensors_bytes(R"({"a.weight":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", f32x2),
       "tensor 'a.weight' has dtype I32; a variable loads only from F32, F16, BF16 or F64"},
      {"newer format version",
       safetensors_bytes(R"({"__metadata__":{"campo.format_version":"99"},)"
                         R"("a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                         f32x2),
       "written by a newer campo (format version 99"},
      {"malformed RNG state",
       safetensors_bytes(R"({"__metadata__":{"campo.rng.loader":"zzz",)"
                         R"("campo.format_version":"2","campo.step":"0","campo.epoch":"0",)"
                         R"("campo.position_in_epoch":"0"},)"
                         R"("a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                         f32x2),
       "metadata 'campo.rng.loader': malformed RNG state 'zzz'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_file(path_, c.file);
    expect_refused(vars, c.expected);
  }
}

// A campo file whose metadata is `md` (the given keys on top of a valid set) and one tensor.
std::string file_with_metadata(const std::map<std::string, std::string>& overrides,
                               const std::vector<std::string>& removed = {}) {
  nlohmann::ordered_json md = {{"format", "pt"},          {"campo.format_version", "2"},
                               {"campo.model", "mlp"},    {"campo.step", "5"},
                               {"campo.epoch", "1"},      {"campo.position_in_epoch", "3"},
                               {"campo.optimizer", "sgd"}};
  for (const auto& [k, v] : overrides) md[k] = v;
  for (const auto& k : removed) md.erase(k);
  nlohmann::ordered_json header = {{"__metadata__", md}};
  header["a.weight"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  return safetensors_bytes(header.dump(), raw<float>({1, 2}));
}

TEST_F(CheckpointTest, MetadataFieldsAreValidated) {
  VariableStore vars(0, default_cpu_backend());
  vars.get_or_create("a.weight", {2}, Init::constant(7), VariableKind::parameter);
  write_file(path_, file_with_metadata({}));
  CheckpointMeta ok = load_checkpoint(path_, vars);
  EXPECT_EQ(ok.step, 5);
  EXPECT_EQ(ok.position_in_epoch, 3);
  vars.at("a.weight").fill_zero();

  struct Case {
    std::string key, value, expected;
  };
  const std::string range = "', not an integer from 0 to 9007199254740992";
  const std::vector<Case> cases = {
      {"campo.step", "abc", "metadata 'campo.step' is 'abc" + range},
      {"campo.step", "-1", "metadata 'campo.step' is '-1" + range},
      {"campo.step", "12x", "metadata 'campo.step' is '12x" + range},
      {"campo.step", " 5", "metadata 'campo.step' is ' 5" + range},
      {"campo.step", "+5", "metadata 'campo.step' is '+5" + range},
      {"campo.step", "", "metadata 'campo.step' is '" + range},
      {"campo.step", "99999999999999999999", "metadata 'campo.step' is '99999999999999999999"},
      {"campo.step", "9007199254740993", "metadata 'campo.step' is '9007199254740993" + range},
      {"campo.epoch", "1.5", "metadata 'campo.epoch' is '1.5" + range},
      {"campo.position_in_epoch", "nan", "metadata 'campo.position_in_epoch' is 'nan" + range},
      {"campo.format_version", "0", "metadata 'campo.format_version' is '0', not an integer"},
      {"campo.format_version", "two", "metadata 'campo.format_version' is 'two'"},
      {"campo.format_version", "3", "written by a newer campo (format version 3"},
      {"campo.optimizer", "sgd; rm -rf", "metadata 'campo.optimizer' is 'sgd; rm -rf', not a name"},
      {"campo.model", "res net", "metadata 'campo.model' is 'res net', not a name"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key + " = '" + c.value + "'");
    write_file(path_, file_with_metadata({{c.key, c.value}}));
    expect_refused(vars, c.expected);
  }
  write_file(path_, file_with_metadata({}, {"campo.epoch"}));
  expect_refused(vars, "metadata lacks 'campo.epoch'");
  write_file(path_, file_with_metadata({}, {"campo.format_version"}));
  expect_refused(vars, "metadata has 'campo.epoch' but no 'campo.format_version'");
}

TEST_F(CheckpointTest, ExtraNumbersAreParsedStrictly) {
  CheckpointMeta meta;
  meta.extra = {{"n", "42"},      {"neg", "-3"},    {"junk", "4x"},
                {"float", "0.5"}, {"tiny", "1e-9"}, {"nan", "nan"},
                {"inf", "inf"},   {"big", "1e999"}, {"sp", "1 "}};
  EXPECT_EQ(checkpoint_extra_int("f", meta, "n", 0, 100, -1), 42);
  EXPECT_EQ(checkpoint_extra_int("f", meta, "absent", 0, 100, -1), -1);
  EXPECT_EQ(checkpoint_extra_float("f", meta, "float", 0, 1, -1), 0.5);
  EXPECT_EQ(checkpoint_extra_float("f", meta, "absent", 0, 1, -1), -1);
  auto error_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of([&] {
              checkpoint_extra_int("ck.st", meta, "neg", 0, 100, 0);
            }).find("checkpoint ck.st: metadata 'neg' is '-3', not an integer from 0 to 100"),
            std::string::npos);
  for (const char* key : {"junk", "float", "n"})
    EXPECT_THROW(checkpoint_extra_int("f", meta, key, 0, 10, 0), Error) << key;
  for (const char* key : {"nan", "inf", "big", "sp", "junk", "tiny"})
    EXPECT_THROW(checkpoint_extra_float("f", meta, key, 1e-6, 1e6, 0), Error) << key;
  EXPECT_NE(error_of([&] {
              checkpoint_extra_float("ck.st", meta, "nan", 0, 1, 0);
            }).find("checkpoint ck.st: metadata 'nan' is 'nan', not a finite number"),
            std::string::npos);
}

TEST_F(CheckpointTest, NonFiniteTensorsAreRefused) {
  VariableStore saved = make_store(1);
  saved.at("conv1.weight").data_as<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  saved.at("conv1.weight").data_as<float>()[6] = -std::numeric_limits<float>::quiet_NaN();
  save_checkpoint(path_, saved, full_meta());
  VariableStore target = make_store(2);
  expect_refused(target,
                 "tensor 'conv1.weight' holds 2 NaN value(s) of 108 (the run that wrote it "
                 "diverged)");

  saved = make_store(1);
  saved.at("fc.weight.exp_avg").data_as<float>()[0] = -std::numeric_limits<float>::infinity();
  save_checkpoint(path_, saved, full_meta());
  expect_refused(target, "tensor 'optimizer.fc.weight.exp_avg' holds 1 infinite value(s) of 10");

  // An F64 value beyond f32's range would load as inf.
  write_file(path_,
             safetensors_bytes(R"({"a.weight":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})",
                               raw<double>({1.0, 1e300})));
  VariableStore small(0, default_cpu_backend());
  small.get_or_create("a.weight", {2}, Init::zeros(), VariableKind::parameter);
  expect_refused(small, "tensor 'a.weight' holds 1 infinite value(s)");
}

TEST_F(CheckpointTest, FifoAndDirectoryAreRefusedBeforeOpening) {
  VariableStore vars = make_store(1);
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Holding the FIFO open read-write keeps a plain open() from blocking, so that this test
  // fails instead of hanging if the check is missing.
  const int holder = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
  ASSERT_GE(holder, 0);
  for (const auto& [path, expected] : std::vector<std::pair<std::string, std::string>>{
           {fifo, "checkpoint " + fifo + " is a FIFO, not a regular file"},
           {dir_.string(),
            "checkpoint " + dir_.string() + " is a directory, not a regular file"}}) {
    SCOPED_TRACE(path);
    try {
      load_checkpoint(path, vars);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    EXPECT_THROW(read_safetensors_metadata(path), Error);
  }
  ::close(holder);
}

TEST_F(CheckpointTest, OptimizerStateSitsUnderItsOwnPrefix) {
  save_checkpoint(path_, make_store(1), full_meta());
  const std::vector<std::string> expected = {"conv1.weight",
                                             "bn1.weight",
                                             "bn1.bias",
                                             "bn1.running_mean",
                                             "bn1.running_var",
                                             "bn1.num_batches_tracked",
                                             "fc.weight",
                                             "fc.bias",
                                             "temperature",
                                             "empty",
                                             "optimizer.conv1.weight.momentum_buffer",
                                             "optimizer.fc.weight.exp_avg"};
  EXPECT_EQ(checkpoint_tensor_names(path_), expected);
  EXPECT_EQ(read_safetensors_metadata(path_).at("campo.format_version"), "2");

  VariableStore clash(1, default_cpu_backend());
  clash.get_or_create("optimizer.lr", {1}, Init::zeros(), VariableKind::parameter);
  EXPECT_THROW(save_checkpoint((dir_ / "clash.safetensors").string(), clash, {}), Error);
}

TEST_F(CheckpointTest, FormatVersionOneFilesStillLoad) {
  // As campo wrote them before version 2: optimizer state beside the parameters.
  VariableStore saved = make_store(1);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& n : saved.names()) tensors.emplace_back(n, saved.at(n));
  Tensor tracked = Tensor::empty({}, DType::i64);
  *tracked.data_as<int64_t>() = 1234;
  tensors.emplace_back("bn1.num_batches_tracked", tracked);
  write_safetensors(path_, tensors,
                    {{"format", "pt"},
                     {"campo.format_version", "1"},
                     {"campo.model", "resnet18"},
                     {"campo.step", "1234"},
                     {"campo.epoch", "3"},
                     {"campo.position_in_epoch", "17"},
                     {"campo.optimizer", "adam"}});
  VariableStore loaded = make_store(2);
  CheckpointMeta meta = load_checkpoint(path_, loaded, {.strict_unexpected = true});
  EXPECT_EQ(meta.format_version, 1);
  EXPECT_EQ(meta.step, 1234);
  for (const auto& n : saved.names()) EXPECT_EQ(bytes_of(loaded.at(n)), bytes_of(saved.at(n))) << n;

  // Saved again, it is a version-2 file with the same contents.
  save_checkpoint(path_, loaded, meta);
  VariableStore again = make_store(3);
  EXPECT_EQ(load_checkpoint(path_, again, {.strict_unexpected = true}).format_version, 2);
  for (const auto& n : saved.names()) EXPECT_EQ(bytes_of(again.at(n)), bytes_of(saved.at(n))) << n;
}

TEST_F(CheckpointTest, TruncatedCheckpointIsRefused) {
  VariableStore vars = make_store(1);
  save_checkpoint(path_, vars, full_meta());
  std::string file = read_file(path_);
  write_file(path_, file.substr(0, file.size() - 10));
  VariableStore target = make_store(2);
  expect_refused(target, "the file is truncated");
}

TEST_F(CheckpointTest, MissingTensorAndWrongShapeAreRefused) {
  VariableStore saved(1, default_cpu_backend());
  saved.get_or_create("layer1.0.conv1.weight", {8, 4, 3, 3}, Init::normal(0, 1),
                      VariableKind::parameter);
  save_checkpoint(path_, saved, {});

  VariableStore wrong_shape(2, default_cpu_backend());
  wrong_shape.get_or_create("layer1.0.conv1.weight", {8, 8, 3, 3}, Init::normal(0, 1),
                            VariableKind::parameter);
  expect_refused(wrong_shape,
                 "tensor 'layer1.0.conv1.weight' has shape [8, 4, 3, 3], the model expects "
                 "[8, 8, 3, 3]");

  VariableStore more(3, default_cpu_backend());
  more.get_or_create("layer1.0.conv1.weight", {8, 4, 3, 3}, Init::normal(0, 1),
                     VariableKind::parameter);
  for (int i = 0; i < 7; ++i)
    more.get_or_create("fc" + std::to_string(i) + ".bias", {2}, Init::normal(0, 1),
                       VariableKind::parameter);
  expect_refused(more,
                 "missing 7 tensor(s) the model needs: 'fc0.bias', 'fc1.bias', 'fc2.bias', "
                 "'fc3.bias', 'fc4.bias' and 2 more");
}

TEST_F(CheckpointTest, ModelOnlyFileLoadsWithFreshOptimizerStateWhenAllowed) {
  // A PyTorch export: parameters and buffers only.
  VariableStore model_only = make_store(1);
  VariableStore model(1, default_cpu_backend());
  for (const auto& n : model_only.names())
    if (model_only.kind(n) != VariableKind::optimizer_state)
      model.get_or_create(n, model_only.at(n).shape(), Init::zeros(), model_only.kind(n)) =
          model_only.at(n).clone();
  save_checkpoint(path_, model, {});

  VariableStore target = make_store(2);
  expect_refused(target, "(optimizer state only: allow missing optimizer state");
  load_checkpoint(path_, target, {.allow_missing_optimizer_state = true});
  for (const auto& n : target.names()) {
    if (target.kind(n) == VariableKind::optimizer_state) {
      for (float v : target.at(n).to_float_vector()) ASSERT_EQ(v, 0.0f) << n;
    } else {
      EXPECT_EQ(bytes_of(target.at(n)), bytes_of(model_only.at(n))) << n;
    }
  }
}

TEST_F(CheckpointTest, UnexpectedTensorsIgnoredUnlessStrict) {
  VariableStore saved = make_store(1);
  saved.get_or_create("head.weight", {3}, Init::ones(), VariableKind::parameter);
  save_checkpoint(path_, saved, {});
  VariableStore target = make_store(2);
  expect_refused(target, "1 tensor(s) match no variable of the model: 'head.weight'",
                 {.strict_unexpected = true});
  load_checkpoint(path_, target);  // num_batches_tracked and head.weight ignored
  EXPECT_EQ(bytes_of(target.at("conv1.weight")), bytes_of(saved.at("conv1.weight")));
}

TEST_F(CheckpointTest, SaveRefusesReservedMetadataKeys) {
  CheckpointMeta meta;
  meta.extra["campo.step"] = "5";
  EXPECT_THROW(save_checkpoint(path_, make_store(1), meta), Error);
  meta.extra.clear();
  meta.rng_states["loader"] = "not a state";
  EXPECT_THROW(save_checkpoint(path_, make_store(1), meta), Error);
  EXPECT_TRUE(files_in_dir().empty());
}

TEST_F(CheckpointTest, SaveIntoMissingDirectoryFailsCleanly) {
  const std::string bad = (dir_ / "no_such_dir" / "ck.safetensors").string();
  try {
    save_checkpoint(bad, make_store(1), {});
    ADD_FAILURE() << "save succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write checkpoint " + bad), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(files_in_dir().empty());
}

// Lowers the file-size limit so that writes past `bytes` fail (EFBIG, SIGXFSZ ignored).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  sighandler_t old_handler_;
};

TEST_F(CheckpointTest, FailedWriteKeepsTheOldFileAndLeavesNoTempFile) {
  save_checkpoint(path_, make_store(1), full_meta());
  const std::string old_bytes = read_file(path_);
  VariableStore big(2, default_cpu_backend());
  big.get_or_create("w", {100000}, Init::normal(0, 1), VariableKind::parameter);
  try {
    FileSizeLimit limit(64 * 1024);
    save_checkpoint(path_, big, {});
    ADD_FAILURE() << "save succeeded past the file-size limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write checkpoint " + path_), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("File too large"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(path_), old_bytes);
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"ck.safetensors"});
}

// In a death-test child: with a 64 KiB file-size limit and SIGXFSZ's default action, the
// write past the limit kills the process mid-save, as a crash would.
void save_with_crashing_size_limit(const std::string& path, const VariableStore& vars) {
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  rlimit lim;
  getrlimit(RLIMIT_FSIZE, &lim);
  lim.rlim_cur = 64 * 1024;
  setrlimit(RLIMIT_FSIZE, &lim);
  signal(SIGXFSZ, SIG_DFL);
  save_checkpoint(path, vars, {});
  std::_Exit(0);
}

TEST_F(CheckpointTest, KilledMidWriteKeepsTheOldFile) {
  save_checkpoint(path_, make_store(1), full_meta());
  const std::string old_bytes = read_file(path_);
  VariableStore big(2, default_cpu_backend());
  big.get_or_create("w", {100000}, Init::normal(0, 1), VariableKind::parameter);
  GTEST_FLAG_SET(death_test_style, "fast");  // the child must see this test's directory
  // The child process is killed by SIGXFSZ in the middle of writing: a crash, no cleanup.
  EXPECT_EXIT(save_with_crashing_size_limit(path_, big), ::testing::KilledBySignal(SIGXFSZ), "");
  EXPECT_EQ(read_file(path_), old_bytes);
  VariableStore target = make_store(3);
  EXPECT_NO_THROW(load_checkpoint(path_, target));
  // The crashed writer's partial temp file is all it left behind.
  auto names = files_in_dir();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_TRUE(names[0].starts_with(".ck.safetensors.campo-tmp-")) << names[0];
  EXPECT_EQ(fs::file_size(dir_ / names[0]), 64u * 1024);
  // Its writer is dead, so the next save of the same path removes it.
  save_checkpoint(path_, make_store(4), full_meta());
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"ck.safetensors"});
}

TEST_F(CheckpointTest, ReadOnlyDirectoryKeepsTheOldFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  save_checkpoint(path_, make_store(1), full_meta());
  const std::string old_bytes = read_file(path_);
  fs::permissions(dir_, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  EXPECT_THROW(save_checkpoint(path_, make_store(2), {}), Error);
  fs::permissions(dir_, fs::perms::owner_write, fs::perm_options::add);
  EXPECT_EQ(read_file(path_), old_bytes);
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"ck.safetensors"});
}

// The header is read in time linear in its entries. Before, each entry went into an
// ordered JSON object that finds keys by a linear search: 40,000 entries took 4 s, 200,000
// over a minute, before any check ran. Now 200,000 take about a second.
TEST_F(CheckpointTest, ManyEntriesAreReadInLinearTime) {
  constexpr int n = 200000;
  std::string header = "{";
  for (int i = 0; i < n; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) +
              "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) + "," +
              std::to_string(i + 1) + "]}";
  header += "}";
  write_file(path_, safetensors_bytes(header, std::string(n, '\x01')));
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> names = checkpoint_tensor_names(path_);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(names.size(), size_t(n));
  EXPECT_EQ(names.front(), "t0");  // header order
  EXPECT_EQ(names.back(), "t" + std::to_string(n - 1));
  EXPECT_LT(seconds, 20.0) << "quadratic again?";
}

// A name or key given twice leaves which value counts to the reader: refused.
TEST_F(CheckpointTest, DuplicateNamesAndKeysAreRefused) {
  VariableStore vars(0, default_cpu_backend());
  vars.get_or_create("a.weight", {2}, Init::constant(7), VariableKind::parameter);
  const std::string entry = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string entry_2 = R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})";
  const std::string f32x4 = raw<float>({1, 2, 3, 4});
  write_file(path_, safetensors_bytes(R"({"a.weight":)" + entry + R"(,"a.weight":)" + entry_2 + "}",
                                      f32x4));
  expect_refused(vars, "tensor 'a.weight' appears twice in the header");
  write_file(path_, safetensors_bytes(R"({"__metadata__":{"format":"pt","format":"np"},)"
                                      R"("a.weight":)" +
                                          entry + "}",
                                      raw<float>({1, 2})));
  expect_refused(vars, "metadata 'format' appears twice");
  write_file(path_, safetensors_bytes(
                        R"({"__metadata__":{},"a.weight":)" + entry + R"(,"__metadata__":{}})",
                        raw<float>({1, 2})));
  expect_refused(vars, "\"__metadata__\" appears twice in the header");
  write_file(path_, safetensors_bytes(R"({"__metadata__":{"k":["x"]},"a.weight":)" + entry + "}",
                                      raw<float>({1, 2})));
  expect_refused(vars, "metadata 'k' is not a string");
  write_file(path_, safetensors_bytes(R"({"__metadata__":[],"a.weight":)" + entry + "}",
                                      raw<float>({1, 2})));
  expect_refused(vars, "\"__metadata__\" is not an object");
  write_file(path_, safetensors_bytes(R"({"a.weight":[1,2]})", raw<float>({1, 2})));
  expect_refused(vars, "header entry 'a.weight' is not an object");
}

// No C0 control byte (newline, ESC of an ANSI sequence, bell, ...) and no DEL.
bool is_inert(const std::string& s) {
  return std::none_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7F;
  });
}

// 1 MB of terminal escapes, carriage returns and newlines.
std::string hostile_text() {
  std::string s = "\x1b[2J\x1b[31m\n";
  while (s.size() < (1u << 20)) s += "line\r\n\x1b[1A\x07";
  return s;
}

// What a file says reaches an error line escaped and cut to 200 bytes (runtime/escape.h):
// a metadata value of 1 MB full of escapes, a model name, a tensor name, a metadata key.
// Before, they were echoed as they were: the error cleared the screen and ran to 1 MB.
TEST_F(CheckpointTest, ValuesFromTheFileAreEscapedAndCutInErrors) {
  VariableStore vars(0, default_cpu_backend());
  vars.get_or_create("a.weight", {2}, Init::constant(7), VariableKind::parameter);
  const std::string hostile = hostile_text();
  const std::string shown = "\\x1b[2J\\x1b[31m\\x0aline\\x0d\\x0a\\x1b[1A\\x07line";
  for (const char* key : {"campo.step", "campo.model", "campo.format_version"}) {
    SCOPED_TRACE(key);
    write_file(path_, file_with_metadata({{key, hostile}}));
    try {
      load_checkpoint(path_, vars);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(is_inert(msg)) << msg.substr(0, 300);
      EXPECT_LT(msg.size(), 1500u) << msg.substr(0, 300);
      EXPECT_NE(msg.find("metadata '" + std::string(key) + "' is '" + shown), std::string::npos)
          << msg.substr(0, 300);
      EXPECT_NE(msg.find(" more bytes)'"), std::string::npos) << msg.substr(0, 300);
    }
  }
  write_file(path_, safetensors_bytes(
                        R"({"w\u001b[0m\n":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})",
                        raw<float>({1, 2})));
  expect_refused(vars, "tensor 'w\\x1b[0m\\x0a' has unknown dtype 'F33'");
  write_file(path_, safetensors_bytes(R"({"__metadata__":{"k\u0007\u009b":5}})", ""));
  expect_refused(vars, "metadata 'k\\x07\\u{009b}' is not a string");
  nlohmann::json evil_name = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  write_file(path_,
             safetensors_bytes(nlohmann::json{{hostile, evil_name}}.dump(), raw<float>({1})));
  try {
    load_checkpoint(path_, vars);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(is_inert(msg)) << msg.substr(0, 300);
    EXPECT_LT(msg.size(), 1500u) << msg.substr(0, 300);
    EXPECT_NE(msg.find("tensor '" + shown), std::string::npos) << msg.substr(0, 300);
  }
}

}  // namespace
}  // namespace campo
