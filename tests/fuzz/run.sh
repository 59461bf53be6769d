#!/usr/bin/env bash
# Builds sluice's libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) and runs each
# for a bounded time on a scratch copy of its seed corpus (tests/data/fuzz/<target>/).
#
#   tests/fuzz/run.sh [seconds-per-target=10] [target...]      targets: tfrecord tf_example tar npy shard mds coco jpeg png video
#
# Exit status 0 when every target ran its time without a crash; crash inputs are left in
# $SLUICE_FUZZ_OUT (default build/fuzz/) as crash-* files. Needs clang++ with the libFuzzer
# runtime (Debian: clang-14, libclang-rt-14-dev / libfuzzer-14-dev); jpeg needs libturbojpeg, png libpng,
# video FFmpeg's libraries.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds="${1:-10}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(tfrecord tf_example tar npy shard mds coco jpeg png video)
out="${SLUICE_FUZZ_OUT:-$root/build/fuzz}"
cxx="${CLANGXX:-$(command -v clang++ || command -v clang++-14 || true)}"
if [ -z "$cxx" ]; then echo "fuzz: clang++ not found; skipping" >&2; exit 0; fi
mkdir -p "$out"
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I"$root/include")
status=0
for t in "${targets[@]}"; do
  src="$here/fuzz_$t.cpp"
  bin="$out/fuzz_$t"
  libs=()
  [ "$t" = jpeg ] && libs=($(pkg-config --libs libturbojpeg libjpeg 2>/dev/null || echo -lturbojpeg -ljpeg))
  [ "$t" = png ] && libs=($(pkg-config --cflags --libs libpng 2>/dev/null || echo -lpng16))
  if [ "$t" = video ]; then
    if ! pkg-config --exists libavformat libavcodec libavutil libswscale; then echo "fuzz: FFmpeg's libraries not found; skipping video"; continue; fi
    libs=($(pkg-config --cflags --libs libavformat libavcodec libavutil libswscale))
  fi
  if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ] || [ -n "$(find "$root/include" -newer "$bin" -name '*.hpp' -print -quit)" ]; then
    echo "fuzz: building $t"
    "$cxx" "${flags[@]}" "$src" -o "$bin" "${libs[@]}"
  fi
  corpus="$out/corpus_$t"
  rm -rf "$corpus"; mkdir -p "$corpus"
  cp "$root/tests/data/fuzz/$t/"* "$corpus/" 2>/dev/null || true
  echo "fuzz: running $t for ${seconds}s"
  if ! (cd "$out" && "$bin" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
          -print_final_stats=1 "$corpus" 2>"$out/$t.log"); then
    echo "fuzz: $t FAILED (see $out/$t.log)"; tail -30 "$out/$t.log"; status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/$t.log" | sed "s/^/fuzz: $t /"
  fi
done
exit $status
