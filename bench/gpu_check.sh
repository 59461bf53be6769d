#!/usr/bin/env bash
# One prepared GPU check for sluice: configure with CUDA, build only the GPU tests and benchmark,
# run them, print a summary and write it as JSON to $OUT/gpu_summary.json (or to the build dir).
#
#   bash bench/gpu_check.sh            # from the repository root; about 1-3 minutes on one H200
#
# Needs only the CUDA toolkit (nvcc, cudart) and a C++20 host compiler; CMake is used when present
# (with Ninja when present), otherwise nvcc builds the four executables directly. No test or
# benchmark library, nothing fetched. The benchmark's JSON (the summary's "bench") includes
# "resident": a Fashion-MNIST-sized device-resident epoch against the host loader. Every step has
# a time limit, and the summary is written even when a step fails. Exit status: 0 when every test
# passed and the benchmark ran; 77 when there was no usable device (tests and benchmark report
# SKIPPED: nothing was checked); 1 otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-16}"
mkdir -p "$BUILD"
DEST="${OUT:-$BUILD}"
mkdir -p "$DEST"
LOGS="$DEST/gpu_logs"
mkdir -p "$LOGS"
START=$(date +%s)

declare -A STEP_RC=()
declare -A STEP_S=()
STEPS=()
NVCC_VERSION="none"; CMAKE_VERSION="none"; BUILD_MODE="none"; GPU_NAME="unknown"

# run_step NAME TIMEOUT_S CMD... : runs CMD with its output in $LOGS/NAME.log (and on screen).
BUDGET_S="${GPU_CHECK_BUDGET_S:-480}"   # the whole script, summary included, stays under this
run_step() {
  local name="$1" limit="$2"; shift 2
  local t0 rc left
  t0=$(date +%s)
  left=$(( START + BUDGET_S - 10 - t0 ))
  if (( left < limit )); then limit=$left; fi
  if (( limit <= 0 )); then
    echo "=== $name: not run, the time budget of $BUDGET_S s is spent"
    STEP_RC[$name]=124; STEP_S[$name]=0; STEPS+=("$name")
    return 0
  fi
  echo "=== $name: $*"
  if timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1; then rc=0; else rc=$?; fi
  tail -n 40 "$LOGS/$name.log" || true
  STEP_RC[$name]=$rc
  STEP_S[$name]=$(( $(date +%s) - t0 ))
  STEPS+=("$name")
  echo "=== $name: exit $rc after ${STEP_S[$name]} s"
  write_summary >/dev/null 2>&1 || true  # a summary exists even if the whole run is cut short
  return 0
}

status_of() {  # rc -> word
  case "$1" in
    0) echo passed ;; 77) echo skipped ;; 124|137) echo timeout ;; *) echo failed ;;
  esac
}

json_escape() { sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr -d '\n\r\t'; }

write_summary() {
  local f="$DEST/gpu_summary.json" first=1 name bench_json="null" overall="passed"
  if [[ -s "$DEST/gpu_bench.json" ]] && head -c 1 "$DEST/gpu_bench.json" | grep -q '{'; then
    bench_json="$(cat "$DEST/gpu_bench.json")"
  fi
  {
    echo "{"
    echo "  \"gpu\": \"$(printf '%s' "$GPU_NAME" | json_escape)\","
    echo "  \"nvcc\": \"$(printf '%s' "$NVCC_VERSION" | json_escape)\","
    echo "  \"cmake\": \"$(printf '%s' "$CMAKE_VERSION" | json_escape)\","
    echo "  \"build_mode\": \"$BUILD_MODE\","
    echo "  \"elapsed_s\": $(( $(date +%s) - START )),"
    echo "  \"steps\": {"
    for name in "${STEPS[@]}"; do
      [[ $first -eq 1 ]] || echo ","
      first=0
      printf '    "%s": {"exit": %s, "status": "%s", "seconds": %s}' "$name" "${STEP_RC[$name]}" \
        "$(status_of "${STEP_RC[$name]}")" "${STEP_S[$name]}"
    done
    echo ""
    echo "  },"
    # The tests' measured figures ("note:" lines: nvJPEG images/s, device-vs-host differences).
    echo "  \"notes\": ["
    local nf=1 line
    while IFS= read -r line; do
      [[ $nf -eq 1 ]] || echo ","
      nf=0
      printf '    "%s"' "$(printf '%s' "$line" | json_escape)"
    done < <(grep -h '^  note: ' "$LOGS"/test_*.log 2>/dev/null | sed 's/^  note: //')
    echo ""
    echo "  ],"
    echo "  \"bench\": $bench_json"
    echo "}"
  } >"$f"
  echo
  echo "================ sluice GPU check summary ================"
  echo "gpu: $GPU_NAME | nvcc: $NVCC_VERSION | cmake: $CMAKE_VERSION | build: $BUILD_MODE"
  for name in "${STEPS[@]}"; do
    printf '  %-22s %-8s (exit %s, %s s)\n' "$name" "$(status_of "${STEP_RC[$name]}")" "${STEP_RC[$name]}" "${STEP_S[$name]}"
    if [[ "$BUILD_MODE" == "nvcc-direct" && ( "$name" == configure || "$name" == build ) ]]; then
      continue  # the CMake build failed but nvcc built everything directly: reported, not fatal
    fi
    if [[ "$name" == memcheck_* && "${STEP_RC[$name]}" =~ ^(124|137)$ ]]; then
      continue  # the optional sanitizer run ran out of time: reported, not fatal
    fi
    case "${STEP_RC[$name]}" in
      0) ;;
      77) [[ "$overall" == "FAILED" ]] || overall="SKIPPED (no usable device: nothing ran)" ;;
      *) overall="FAILED" ;;
    esac
  done
  if [[ "$BUILD_MODE" == "nvcc-direct" && -n "${STEP_RC[configure]:-}" ]]; then
    echo "  note: the CMake build failed (see $LOGS/configure.log, build.log); nvcc built the checks directly"
  fi
  if [[ -s "$DEST/gpu_bench.txt" ]]; then grep -E '^(h2d|to_device|pipeline|overlap|normalize|resident)' "$DEST/gpu_bench.txt" || true; fi
  echo "overall: $overall   (summary: $f, logs: $LOGS)"
  echo "elapsed: $(( $(date +%s) - START )) s"
  case "$overall" in passed) return 0 ;; SKIPPED*) return 77 ;; *) return 1 ;; esac
}

trap 'rc=$?; if [[ $rc -ne 0 && ${#STEPS[@]} -eq 0 ]]; then echo "gpu_check: aborted early (exit $rc)"; fi' EXIT

# ---- tools --------------------------------------------------------------------------------------
NVCC="${CUDACXX:-}"
[[ -n "$NVCC" && -x "$NVCC" ]] || NVCC="$(command -v nvcc || true)"
[[ -n "$NVCC" ]] || { [[ -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc; } || true
if [[ -z "$NVCC" ]]; then
  for d in /usr/local/cuda-*/bin/nvcc; do [[ -x "$d" ]] && NVCC="$d"; done
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  GPU_NAME="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1 || echo unknown)"
fi
if [[ -z "$NVCC" ]]; then
  echo "gpu_check: no nvcc found (CUDACXX, PATH, /usr/local/cuda/bin)"
  STEP_RC[find_nvcc]=1; STEP_S[find_nvcc]=0; STEPS+=(find_nvcc)
  write_summary || true
  exit 1
fi
export CUDACXX="$NVCC"
export PATH="$(dirname "$NVCC"):$PATH"
CUDA_HOME_GUESS="$(cd "$(dirname "$NVCC")/.." && pwd)"
export LD_LIBRARY_PATH="$CUDA_HOME_GUESS/lib64:$CUDA_HOME_GUESS/lib:${LD_LIBRARY_PATH:-}"
NVCC_VERSION="$("$NVCC" --version | grep -o 'release [0-9.]*' | head -n 1 || echo unknown)"
CMAKE_BIN="$(command -v cmake || true)"
[[ -n "$CMAKE_BIN" ]] && CMAKE_VERSION="$("$CMAKE_BIN" --version | head -n 1)"
echo "gpu_check: gpu '$GPU_NAME', nvcc $NVCC_VERSION ($NVCC), cmake '${CMAKE_VERSION}', $JOBS jobs, build dir $BUILD"

TEST_BINS=(); BENCH_BIN=""
built_ok=0
# nvJPEG where the toolkit lacks it: $SLUICE_NVJPEG_ROOT, else the wheel .ci/test unpacks into
# build/nvjpeg (carry it along from the CPU machine: 4 MB).
NVJPEG_ROOT_ARG=()
if [[ -n "${SLUICE_NVJPEG_ROOT:-}" ]]; then
  NVJPEG_ROOT_ARG=(-DSLUICE_NVJPEG_ROOT="$SLUICE_NVJPEG_ROOT")
else
  for d in "$ROOT"/build/nvjpeg/nvidia/cu*; do
    [[ -e "$d/include/nvjpeg.h" ]] && NVJPEG_ROOT_ARG=(-DSLUICE_NVJPEG_ROOT="$d")
  done
fi
# ---- configure + build with CMake ---------------------------------------------------------------
if [[ -n "$CMAKE_BIN" ]]; then
  GEN=()
  if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
  run_step configure 120 "$CMAKE_BIN" -S "$ROOT" -B "$BUILD/cmake" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_EXAMPLES=OFF \
    -DSLUICE_BUILD_BENCHMARKS=OFF -DSLUICE_INSTALL=OFF -DSLUICE_GPU_CHECKS=ON "${NVJPEG_ROOT_ARG[@]}" \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90-real
  if [[ ${STEP_RC[configure]} -eq 0 ]]; then
    # nvJPEG's test exists where CMake found nvJPEG (the toolkit's, or -DSLUICE_NVJPEG_ROOT) and TurboJPEG.
    NVJPEG_TARGET=()
    if "$CMAKE_BIN" --build "$BUILD/cmake" --target help 2>/dev/null | grep -q sluice_gpu_test_nvjpeg; then
      NVJPEG_TARGET=(sluice_gpu_test_nvjpeg)
    else
      echo "gpu_check: no nvJPEG or no TurboJPEG found by CMake: the nvJPEG test is not built"
    fi
    run_step build 300 "$CMAKE_BIN" --build "$BUILD/cmake" -j "$JOBS" \
      --target sluice_gpu_test_transfer sluice_gpu_test_batch_ops sluice_gpu_test_resident sluice_gpu_test_fused_resample \
      "${NVJPEG_TARGET[@]}" sluice_gpu_bench
    if [[ ${STEP_RC[build]} -eq 0 ]]; then
      built_ok=1; BUILD_MODE="cmake"
      TEST_BINS=("$BUILD/cmake/gpu_checks/tests/sluice_gpu_test_transfer" "$BUILD/cmake/gpu_checks/tests/sluice_gpu_test_batch_ops"
                 "$BUILD/cmake/gpu_checks/tests/sluice_gpu_test_resident" "$BUILD/cmake/gpu_checks/tests/sluice_gpu_test_fused_resample")
      [[ ${#NVJPEG_TARGET[@]} -eq 1 ]] && TEST_BINS+=("$BUILD/cmake/gpu_checks/tests/sluice_gpu_test_nvjpeg")
      BENCH_BIN="$BUILD/cmake/gpu_checks/bench/sluice_gpu_bench"
    fi
  fi
fi
# ---- fallback: nvcc directly (no CMake, or CMake failed) ----------------------------------------
if [[ $built_ok -eq 0 ]]; then
  echo "gpu_check: building with nvcc directly"
  D="$BUILD/direct"; mkdir -p "$D"
  FLAGS="-std=c++20 -O2 -arch=sm_90 --expt-relaxed-constexpr -DSLUICE_WITH_CUDA=1 -I'$ROOT/include' -I'$ROOT/tests/cuda/device'"
  cat >"$D/build.sh" <<EOS
set -u
'$NVCC' $FLAGS '$ROOT/tests/cuda/device/transfer_device_test.cpp' -o '$D/sluice_gpu_test_transfer' -lpthread & p1=\$!
'$NVCC' $FLAGS '$ROOT/tests/cuda/device/batch_ops_device_test.cu' -o '$D/sluice_gpu_test_batch_ops' -lpthread & p2=\$!
'$NVCC' $FLAGS '$ROOT/bench/gpu/gpu_bench.cu' -o '$D/sluice_gpu_bench' -lpthread & p3=\$!
'$NVCC' $FLAGS '$ROOT/tests/cuda/device/resident_device_test.cu' -o '$D/sluice_gpu_test_resident' -lpthread & p4=\$!
'$NVCC' $FLAGS '$ROOT/tests/cuda/device/fused_resample_device_test.cu' -o '$D/sluice_gpu_test_fused_resample' -lpthread & p5=\$!
rc=0
wait \$p1 || rc=1
wait \$p2 || rc=1
wait \$p3 || rc=1
wait \$p4 || rc=1
wait \$p5 || rc=1
exit \$rc
EOS
  run_step build_direct 300 bash "$D/build.sh"
  if [[ ${STEP_RC[build_direct]} -eq 0 ]]; then
    built_ok=1; BUILD_MODE="nvcc-direct"
    TEST_BINS=("$D/sluice_gpu_test_transfer" "$D/sluice_gpu_test_batch_ops" "$D/sluice_gpu_test_resident"
               "$D/sluice_gpu_test_fused_resample")
    BENCH_BIN="$D/sluice_gpu_bench"
  fi
fi

# ---- run ----------------------------------------------------------------------------------------
if [[ $built_ok -eq 1 ]]; then
  for bin in "${TEST_BINS[@]}"; do
    run_step "test_$(basename "$bin" | sed 's/^sluice_gpu_test_//')" 150 "$bin"
  done
  rm -f "$DEST/gpu_bench.json"
  run_step bench 180 "$BENCH_BIN" "$DEST/gpu_bench.json"
  cp "$LOGS/bench.log" "$DEST/gpu_bench.txt" 2>/dev/null || true
  # Last and optional: the kernels under compute-sanitizer memcheck (out-of-bounds and misaligned
  # accesses). A timeout here is reported, not counted as a failure; errors found are.
  SAN="$(command -v compute-sanitizer || true)"
  [[ -n "$SAN" ]] || { [[ -x "$(dirname "$NVCC")/compute-sanitizer" ]] && SAN="$(dirname "$NVCC")/compute-sanitizer"; } || true
  if [[ -n "$SAN" && "${GPU_CHECK_SANITIZER:-1}" == 1 && ${STEP_RC[test_batch_ops]:-1} -eq 0 ]]; then
    run_step memcheck_batch_ops 120 "$SAN" --tool memcheck --error-exitcode 99 "${TEST_BINS[1]}"
  fi
fi
write_summary
