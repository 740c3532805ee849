// The `campo` command line: one small dispatch over the subcommands, each a file of its own
// (tools/commands.h), and --version.
#include "tools/cli.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "ops/cpu/low_precision.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_features.h"
#include "tools/commands.h"
#include "tools/paths.h"
#include "train/interrupt.h"
#ifdef CAMPO_HAVE_CUDA
#include "runtime/cuda/device_info.h"
#endif

namespace campo::cli {

namespace {

std::string cpu_features() {
  std::string s;
  auto add = [&](const char* name, bool has) {
    if (has) s += (s.empty() ? "" : " ") + std::string(name);
  };
  __builtin_cpu_init();
  add("avx2", __builtin_cpu_supports("avx2"));
  add("fma", __builtin_cpu_supports("fma"));
  add("f16c", cpu_has_f16c_instructions());
  add("avx512f", __builtin_cpu_supports("avx512f"));
  add("avx512bw", __builtin_cpu_supports("avx512bw"));
  add("avx512_vnni", __builtin_cpu_supports("avx512vnni"));
  add("avx512_bf16", __builtin_cpu_supports("avx512bf16"));
  add("amx_bf16", cpu_has_amx_bf16_instructions());
  return s.empty() ? "none" : s;
}

std::string version_text() {
  std::ostringstream os;
  const dnnl_version_t* v = dnnl_version();
  os << "campo " CAMPO_VERSION "\n";
#ifdef CAMPO_HAVE_CUDA
  int devices = cuda::device_count();
  // CUDA versions as major.minor from major * 1000 + minor * 10.
  const auto cuda_version = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  os << "cuda: on (runtime " << cuda_version(cuda::runtime_version()) << ", " << devices
     << " device" << (devices == 1 ? "" : "s");
  if (devices > 0) os << ": " << cuda::device_name(0);
  os << ")\n";
  const int driver = cuda::driver_version();
  // cuDNN 9: major * 10000 + minor * 100 + patch; cuBLASLt: major * 10000 + minor * 100 + patch.
  const size_t dnn = cuda::cudnn_version(), lt = cuda::cublaslt_version();
  os << "cuda libraries: driver " << (driver ? "supports CUDA " + cuda_version(driver) : "absent")
     << ", cuDNN " << dnn / 10000 << "." << dnn % 10000 / 100 << "." << dnn % 100 << ", cuBLASLt "
     << lt / 10000 << "." << lt % 10000 / 100 << "." << lt % 100 << "\n";
#else
  os << "cuda: off (built without nvcc)\n";
#endif
  os << "onednn: " << v->major << "." << v->minor << "." << v->patch << " (isa "
     << onednn_isa_name() << ")\n";
  CpuBackend cpu;
  os << cpu.describe() << " (" << cpu_features() << ")\n";
  const bool native_allowed = cpu.allows_native_low_precision();  // CAMPO_CPU_BF16
  if (!cpu_has_native_bf16())
    os << "bf16: emulated in f32 (no AVX-512 BF16)\n";
  else if (!native_allowed)
    os << "bf16: emulated in f32 (CAMPO_CPU_BF16=emulate; the CPU has AVX-512 BF16)\n";
  else
    os << "bf16: native (AVX-512 BF16)\n";
  if (!cpu_has_native_f16())
    os << "fp16: emulated in f32 (no AVX-512 FP16)\n";
  else if (!cpu.allows_native_f16())
    os << "fp16: emulated in f32 (CAMPO_CPU_F16=emulate; the CPU has AVX-512 FP16)\n";
  else
    os << "fp16: native (AVX-512 FP16)\n";
  os << "data-parallel: " << (mpi_built_in() ? "Open MPI" : "off (built without MPI)")
     << (nccl_built_in() ? ", NCCL" : "") << "\n";
  return os.str();
}

// The subcommands, added to `app` in the order `campo --help` lists them.
std::vector<std::unique_ptr<Command>> add_commands(CLI::App& app) {
  std::vector<std::unique_ptr<Command>> commands;
  for (auto add : {add_train_command, add_graph_command, add_predict_command, add_eval_command,
                   add_plan_command, add_bench_command, add_calibrate_command})
    commands.push_back(add(app));
  return commands;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> path_options() {
  CLI::App app;
  const std::vector<std::unique_ptr<Command>> commands = add_commands(app);
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::unique_ptr<Command>& command : commands)
    for (CLI::Option* option : command->app()->get_options())
      if (is_path_option(option)) out.emplace_back(command->app()->get_name(), option->get_name());
  return out;
}

int run(const std::vector<std::string>& args) {
  CLI::App app{"campo: a cost-aware mixed-precision training runtime", "campo"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version and what this build supports");
  const std::vector<std::unique_ptr<Command>> commands = add_commands(app);

  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ConversionError& e) {
    // CLI11 says "Could not convert: --batch = abc"; only numeric options can fail to convert.
    const std::string text = e.what();
    const std::string prefix = "Could not convert: ";
    const size_t eq = text.find(" = ");
    if (text.rfind(prefix, 0) == 0 && eq != std::string::npos)
      std::cerr << "campo: error: " << text.substr(prefix.size(), eq - prefix.size())
                << " expects a number (in its range), got '" << text.substr(eq + 3) << "'\n";
    else
      std::cerr << "campo: error: " << text << "\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    std::cerr << "campo: error: " << e.what() << "\n";
    return 2;
  }

  try {
    if (show_version) {
      std::cout << version_text();
      return 0;
    }
    for (const std::unique_ptr<Command>& command : commands)
      if (command->parsed()) {
        check_paths_given(command->app());
        return command->run();
      }
    std::cout << app.help();
    return 0;
  } catch (const Interrupted& e) {
    std::cout.flush();
    std::cerr << "campo: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    // campo's tensors say how many bytes they wanted; this is a host-side container.
    std::cout.flush();
    std::cerr << "campo: error: out of memory: a buffer sized by the options (--batch, "
                 "--image-size, --limit-train, ...) does not fit in this machine's memory; try "
                 "smaller values\n";
    return 1;
  } catch (const std::length_error& e) {  // a container asked for more than it can hold
    std::cout.flush();
    std::cerr << "campo: error: out of memory: a buffer sized by the options (--batch, "
                 "--image-size, --limit-train, ...) is larger than any machine's memory ("
              << e.what() << "); try smaller values\n";
    return 1;
  } catch (const Error& e) {
    std::cout.flush();
    std::cerr << "campo: error: " << e.what() << "\n";
    if (std::getenv("CAMPO_DEBUG")) std::cerr << "  at " << e.where() << "\n";
    return 1;
  } catch (const dnnl::error& e) {
    std::cerr << "campo: error: oneDNN: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "campo: error: " << e.what() << "\n";
    return 1;
  }
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return run(args);
}

}  // namespace campo::cli
