#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan in
# build-fuzz/ (only the fuzzers and the libraries they link), then runs them.
#   scripts/fuzz.sh                 every target for 20 s
#   scripts/fuzz.sh all 15          every target for 15 s
#   FUZZ_FLAGS=-seed=1 scripts/fuzz.sh snapshot 50000r   what CI runs, per target (.ci/run)
#   scripts/fuzz.sh TARGET 600      one target for 600 seconds
#   scripts/fuzz.sh TARGET 10000000r  one target for 10,000,000 executions
#   scripts/fuzz.sh all 60          every target for 60 s each
#   scripts/fuzz.sh build           builds every target, runs none (.ci/run)
#   scripts/fuzz.sh build-deps      installs clang and libFuzzer when missing, only
# Targets: journal_record snapshot gateway_rpc dataset_definition flags.
# Each run starts from the checked-in seeds (tests/fuzz/corpus/TARGET) and
# the crash inputs (tests/fuzz/regressions/TARGET), and grows a working
# corpus in build-fuzz/corpus/TARGET (not checked in). A crash leaves its
# input in build-fuzz/crashes/TARGET/ and fails the script: fix the code,
# then copy the input into tests/fuzz/regressions/TARGET/ so ctest replays it.
# Extra libFuzzer flags go in FUZZ_FLAGS (e.g. FUZZ_FLAGS=-jobs=2).
# Installs clang and its libFuzzer runtime (Debian: clang, libclang-rt-14-dev)
# when missing. BUILD_DIR overrides build-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(journal_record snapshot gateway_rpc dataset_definition flags journal_group)
target=${1:-all}
budget=${2:-20}
build=${BUILD_DIR:-build-fuzz}

missing=()
command -v clang++ >/dev/null 2>&1 || missing+=(clang)
if ! dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null | grep -q "install ok installed"; then
  missing+=(libclang-rt-14-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "$target" = build-deps ] && exit 0

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# -O1 with line tables only: the sanitizers' usual setting, and a quicker build.
CC=clang CXX=clang++ cmake -S . -B "$build" -DDISPATCH_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" "${launcher[@]}" >/dev/null
if [ "$target" = all ] || [ "$target" = build ]; then
  targets=("${all_targets[@]}")
  cmake --build "$build" -j"$(nproc)" --target dispatch_fuzzers
  [ "$target" = build ] && exit 0
else
  targets=("$target")
  cmake --build "$build" -j"$(nproc)" --target "${target}_fuzzer"
fi

if [[ "$budget" == *r ]]; then
  limit=(-runs="${budget%r}")
else
  limit=(-max_total_time="$budget")
fi
status=0
for t in "${targets[@]}"; do
  seeds=(tests/fuzz/corpus/"$t")
  [ -d tests/fuzz/regressions/"$t" ] && seeds+=(tests/fuzz/regressions/"$t")
  mkdir -p "$build/corpus/$t" "$build/crashes/$t"
  extra=()
  # The gateway target keeps one dispatcher (and its growing state) across
  # inputs, so every input looks like a leak to libFuzzer's per-input check,
  # which then scans the whole heap each time (most of its time went there).
  [ "$t" = gateway_rpc ] && extra+=(-detect_leaks=0)
  # ASan's quarantine (256 MiB by default) keeps freed memory away from reuse,
  # and each gateway input frees a connection's worth (an RPC system, its
  # buffers), so every input ran on freshly faulted pages; 16 MiB is still
  # many inputs' worth of use-after-free window. The 0xbe fill of each new
  # block finds nothing ASan reports. Together they cut its time per input
  # by ~40% of CPU per input. Later ASAN_OPTIONS entries win.
  asan_options=${ASAN_OPTIONS:-}
  if [ "$t" = gateway_rpc ]; then
    asan_options="quarantine_size_mb=16:max_malloc_fill_size=0${asan_options:+:$asan_options}"
  fi
  echo "fuzz: $t (${limit[*]})" >&2
  # -timeout: an input that runs 10 s is a hang (the gateway target bounds
  # each of its inputs at 2 s). -rss_limit_mb: the default of libFuzzer.
  if ! ASAN_OPTIONS="$asan_options" "$build/tests/fuzz/${t}_fuzzer" "${limit[@]}" -timeout=10 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$build/crashes/$t/" "${extra[@]}" ${FUZZ_FLAGS:-} \
      "$build/corpus/$t" "${seeds[@]}"; then
    echo "fuzz: $t FAILED; inputs in $build/crashes/$t/" >&2
    status=1
  fi
done
exit $status
