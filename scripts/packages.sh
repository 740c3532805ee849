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

# What building campo needs (scripts/quickstart.sh). ocl-icd-opencl-dev: Debian's oneDNN
# CMake package looks for OpenCL, which libdnnl-dev only recommends.
campo_build_packages=(cmake ninja-build g++ libdnnl-dev ocl-icd-opencl-dev zlib1g-dev libstb-dev
                      libturbojpeg0-dev nlohmann-json3-dev libcli11-dev libgtest-dev)

# The data sets the tests use where installed (each test skips, saying why, without them):
# Fashion-MNIST, and English text for the masked-language-model tests (the fortunes
# quotation files, 2.7 MB installed; datasets/text.h).
campo_data_packages=(dataset-fashion-mnist fortunes)
