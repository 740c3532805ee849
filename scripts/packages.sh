# shellcheck shell=bash disable=SC2034  # sourced: the arrays are used by the sourcing scripts
# Sourced by the scripts in scripts/: installs the Debian packages named that are missing
# (with sudo unless root; recommends are not installed).
#   install_missing_packages cmake ninja-build ...
install_missing_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then return; fi
  echo "$(basename "$0"): installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# What building campo needs (scripts/quickstart.sh), besides oneDNN 3 (install_onednn below).
# python3-venv: the virtual environment oneDNN 3 is installed into.
campo_build_packages=(cmake ninja-build g++ zlib1g-dev libstb-dev libturbojpeg0-dev
                      nlohmann-json3-dev libcli11-dev libgtest-dev python3-venv)

# oneDNN 3, the CPU kernels. Debian 12 has only oneDNN 2.6 (libdnnl-dev), which has no native
# FP16 kernels; PyPI's onednn-devel-cpu-gomp is oneDNN's own build (GNU OpenMP, no other
# dependency, headers and CMake config files included), installed in a virtual environment
# in .deps/onednn (git-ignored; CMakeLists.txt looks there first). 2023.2.0 is oneDNN 3.2.
campo_onednn_package=onednn-devel-cpu-gomp==2023.2.0
#   install_onednn [DIR]   DIR defaults to $CAMPO_ONEDNN_DIR, then .deps/onednn
install_onednn() {
  local dir="${1:-${CAMPO_ONEDNN_DIR:-.deps/onednn}}"
  if [ -f "$dir/lib/cmake/dnnl/dnnl-config.cmake" ] &&
      [ "$(cat "$dir/campo-onednn" 2>/dev/null)" = "$campo_onednn_package" ]; then
    return
  fi
  echo "$(basename "$0"): installing oneDNN 3 ($campo_onednn_package from PyPI) into $dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install --quiet --disable-pip-version-check "$campo_onednn_package"
  [ -f "$dir/lib/cmake/dnnl/dnnl-config.cmake" ] ||
    { echo "$(basename "$0"): $campo_onednn_package installed no $dir/lib/cmake/dnnl" >&2; return 1; }
  echo "$campo_onednn_package" > "$dir/campo-onednn"
}

# Data-parallel training (scripts/quickstart.sh; `mpirun -np N campo train ... --data-parallel`):
# Open MPI's headers and library (libopenmpi-dev), and its launcher (openmpi-bin: mpirun, and
# orted, which MPI's start in a process that mpirun did not start needs too). CMake builds
# with them where found (CAMPO_MPI=AUTO: "campo: MPI ON"), and ctest then runs the Mpi* test
# suites as two ranks; without them --data-parallel is one error line. Not for the sanitizer
# build, which leaves MPI out (scripts/sanitize.sh).
campo_mpi_packages=(openmpi-bin libopenmpi-dev)

# The sanitizer and fuzz build (scripts/sanitize.sh, scripts/fuzz.sh): clang, its sanitizer
# and libFuzzer runtimes (libclang_rt.fuzzer-x86_64.a) and OpenMP for clang.
campo_sanitizer_packages=(clang libclang-rt-14-dev libomp-14-dev)

# The data sets the tests use where installed (each test skips, saying why, without them):
# Fashion-MNIST, and English text for the masked-language-model tests (the fortunes
# quotation files, 2.7 MB installed; datasets/text.h).
campo_data_packages=(dataset-fashion-mnist fortunes)

# A lent GPU machine (docs/gpu.md) has a compiler, nvcc, CMake and ninja but no package
# registry: scripts/fetch-gpu-debs downloads the rest here as .deb files (campo_gpu_debs) and
# scripts/gpu-check unpacks them there. What such a machine has already:
campo_gpu_machine_packages=(cmake ninja-build g++)
# Not carried: python3-venv only installs oneDNN 3 into .deps/onednn, which gpu-prebuild
# carries already built (onednn.tar.xz).
campo_gpu_not_carried=(python3-venv)
# The run-time packages behind the -dev ones (oneDNN 3 is no Debian package: scripts/gpu-prebuild
# carries .deps/onednn as onednn.tar.xz, and scripts/gpu-check unpacks it). Left out on
# purpose: libc6, libstdc++6, libgcc-s1, libgomp1 (the machine's compiler brings newer ones,
# which older copies on LD_LIBRARY_PATH would shadow), googletest (sources only: libgtest-dev
# holds the built libraries) and libstb0 (campo compiles stb_image itself).
campo_gpu_runtime_packages=(zlib1g libturbojpeg0)
# Open MPI's run-time libraries (campo_mpi_packages carried too, so that the GPU build has MPI
# and NCCL and runs the Mpi* tests; scripts/gpu-check points Open MPI at the unpacked copy).
# libudev1 is hwloc's. Left out on purpose: the network transports one machine does not use
# (InfiniBand, libfabric, PSM, UCX: Open MPI skips a component whose library is missing),
# hwloc's plugins, ssh (remote start), and the -dev, Fortran and JavaScript packages
# libopenmpi-dev names, whose files mpi.h does not need (fetch-gpu-debs: not_needed).
campo_gpu_mpi_runtime_packages=(libopenmpi3 openmpi-common libhwloc15 libevent-core-2.1-7
                                libevent-pthreads-2.1-7 libpmix2 libmunge2 libudev1)
# Prints the packages of gpu-debs/, one a line: campo_build_packages and campo_mpi_packages
# less campo_gpu_machine_packages and campo_gpu_not_carried, plus campo_gpu_runtime_packages and
# campo_gpu_mpi_runtime_packages.
campo_gpu_debs() {
  local p m skip
  for p in "${campo_build_packages[@]}" "${campo_mpi_packages[@]}"; do
    skip=0
    for m in "${campo_gpu_machine_packages[@]}" "${campo_gpu_not_carried[@]}"; do
      [ "$p" = "$m" ] && skip=1
    done
    [ "$skip" -eq 1 ] || echo "$p"
  done
  printf '%s\n' "${campo_gpu_runtime_packages[@]}" "${campo_gpu_mpi_runtime_packages[@]}"
}
