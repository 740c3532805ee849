#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine:
#   bash scripts/quickstart.sh train   install dependencies, build, train LeNet on Fashion-MNIST
#   bash scripts/quickstart.sh test    install dependencies, build, run every test
#   bash scripts/quickstart.sh build   install dependencies and build only
# Environment: BUILD_DIR (default build), CAMPO_CUDA (AUTO|ON|OFF). `train` builds only the
# campo binary, and the CUDA backend only where a GPU is present or CAMPO_CUDA=ON asks for it
# (the first command takes minutes, not the quarter of an hour the tests and the CUDA backend
# take); `test` and `build` build everything, the CUDA backend wherever nvcc is found
# (CAMPO_CUDA default AUTO).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-test}"
build_dir="${BUILD_DIR:-build}"

# shellcheck source=scripts/packages.sh
source scripts/packages.sh
# python3: ctest runs tests/tools/safetensors_torch_test.py (the PyTorch converter). Open MPI:
# data-parallel training and its tests (campo_mpi_packages).
packages=("${campo_build_packages[@]}" "${campo_mpi_packages[@]}" "${campo_data_packages[@]}"
          python3)

install_dependencies() {
  install_missing_packages "${packages[@]}"
  install_onednn
}

# Whether this machine has an NVIDIA GPU its driver sees.
have_gpu() { [ -e /dev/nvidiactl ] && command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; }

build() {
  local cuda="${CAMPO_CUDA:-AUTO}" targets=()
  if [ "$mode" = train ]; then
    targets=(--target campo)
    if [ -z "${CAMPO_CUDA:-}" ]; then
      if have_gpu; then cuda=ON; else cuda=OFF; fi
    fi
  fi
  mkdir -p "$build_dir"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCAMPO_CUDA="$cuda" > "$build_dir/configure.log" 2>&1 \
    || { cat "$build_dir/configure.log"; exit 1; }
  grep "campo:" "$build_dir/configure.log" || true
  cmake --build "$build_dir" -j"$(nproc)" "${targets[@]}"
}

install_dependencies
build
case "$mode" in
  train)
    shift || true
    "$build_dir/campo" train --model lenet --dataset fashion-mnist --epochs 1 "$@"
    ;;
  test)
    # One ctest test per GoogleTest suite (cmake/gtest_suites.cmake); a failing test is named
    # in its suite's output, and the skipped tests are listed by reason after the run.
    status=0
    ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" || status=$?
    bash scripts/report-skips "$build_dir"
    exit "$status"
    ;;
  build) ;;
  *)
    echo "usage: bash scripts/quickstart.sh train|test|build" >&2
    exit 2
    ;;
esac
