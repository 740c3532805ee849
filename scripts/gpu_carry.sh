# What scripts/gpu-prebuild and scripts/gpu-check share about the carry folder (docs/gpu.md):
# the device tool's limits, the hash of the sources the carried binaries were built from,
# and the size of what one call sends. Sourced, not run.

# One device call sends the working tree (tracked and untracked-not-ignored files) and the
# carried paths, at most 64 MiB together, and brings back at most 8 files from $OUT.
gpu_carry_limit_bytes=$((64 * 1024 * 1024))
gpu_out_files_max=8
# The budget of the whole check inside the call's timeout_s (600): what is left covers the
# machine's own start of the command and the copy of $OUT back.
gpu_check_budget_default=540
gpu_check_timeout_s=600

# The sources campo and campo_tests are built from, in a fixed order; a text file per line.
# Run in the repository root. The device has the tree but not .git, so git is not used.
gpu_source_files() {
  find CMakeLists.txt cmake runtime ops graph amp models datasets train perf tools tests fuzz \
    -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \
    -o -name '*.cmake' -o -name 'CMakeLists.txt' -o -name 'devices.json' \) 2>/dev/null |
    LC_ALL=C sort
}

# One sha256 over every source file's path and contents: equal here and on the device when
# the tree sent is the tree the binaries were built from.
gpu_source_hash() {
  gpu_source_files | while IFS= read -r f; do sha256sum "$f"; done | sha256sum | cut -c1-16
}

# Bytes of the working tree the device tool sends from the repository root `$1`: tracked and
# untracked files that git does not ignore (a checkout without git: every file but .git).
gpu_tree_bytes() {
  local root=$1
  if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 -r stat -c %s -- 2>/dev/null |
      awk '{s += $1} END {print s + 0}')
  else
    (cd "$root" && find . -path ./.git -prune -o -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  fi
}

# Bytes under `$1` (files, links not followed).
gpu_dir_bytes() {
  find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

gpu_mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
