#!/usr/bin/env bash
# Compile time of a minimal pipeline program and of the umbrella header alone, this tree's
# include/ against another revision's, side by side: rounds interleave the two trees, and the
# figure is each tree's median and the ratio of medians.
#   bash bench/compile/compile_time.sh BASE_REV [ROUNDS=5] [CXX=g++] [FLAGS="-std=c++20 -O2"]
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:?usage: compile_time.sh BASE_REV [ROUNDS] [CXX] [FLAGS]}
rounds=${2:-5}
cxx=${3:-g++}
flags=${4:-"-std=c++20 -O2"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base"
git archive "$base" include | tar -x -C "$work/base"
echo "compiler: $($cxx --version | head -1); flags: $flags; base: $(git rev-parse --short "$base"); new: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- include || echo ' + uncommitted include/ changes'); rounds: $rounds"
declare -A t
for prog in minimal_pipeline umbrella_only; do
  for tree in base new; do t[$prog,$tree]=""; done
done
for ((r = 1; r <= rounds; ++r)); do
  for prog in minimal_pipeline umbrella_only; do
    for tree in base new; do
      inc=include
      [ "$tree" = base ] && inc="$work/base/include"
      s=$(date +%s.%N)
      # shellcheck disable=SC2086
      $cxx $flags -I"$inc" -c "bench/compile/$prog.cpp" -o "$work/$prog-$tree.o"
      e=$(date +%s.%N)
      t[$prog,$tree]+="$(awk -v a="$s" -v b="$e" 'BEGIN {printf "%.3f", b - a}') "
    done
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
printf '%-18s %10s %10s %8s\n' program base_s new_s new/base
for prog in minimal_pipeline umbrella_only; do
  b=$(echo "${t[$prog,base]}" | median)
  n=$(echo "${t[$prog,new]}" | median)
  printf '%-18s %10.2f %10.2f %8.2f\n' "$prog" "$b" "$n" "$(awk -v a="$n" -v b="$b" 'BEGIN {print a / b}')"
  echo "  base: ${t[$prog,base]}"
  echo "  new:  ${t[$prog,new]}"
done
