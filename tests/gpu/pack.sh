#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs on a GPU machine that has none of our Debian libraries:
#   bin/fabricscope-agent       the agent, stripped
#   lib/                        every shared object the agent needs (ldd), the loader and libc
#                               included: run.sh starts the agent through lib/ld-linux-x86-64.so.2,
#                               so the host's glibc version does not matter to it
#   gpu/                        libfabricscope-cupti.so and libnccl-profiler-fabricscope.so; they
#                               are loaded into the host's Python and use the host's libc, so they
#                               are NOT next to lib/ (run.sh never puts lib/ on the workload's path)
#   cupti/libcupti.so.13        fallback for hosts where libcupti is not found
#   MANIFEST                    git revision, sizes, glibc symbol versions the GPU libraries need
# The session's device tool carries at most 64 MiB of build outputs: this script fails above that.
#
# Usage: tests/gpu/pack.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, BUILD_DIR/gpu-pack)
# Build first: cmake --build BUILD_DIR --target fabricscope-agent fabricscope-cupti \
#                fabricscope_nccl_profiler     (not a sanitizer build)
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 2

build=${1:-build}
out=${2:-$build/gpu-pack}
limit_bytes=$((64 * 1024 * 1024))

agent=$build/agent/fabricscope-agent
cupti=$build/collectors/cupti/libfabricscope-cupti.so
nccl=$build/collectors/nccl/libnccl-profiler-fabricscope.so
for f in "$agent" "$cupti" "$nccl"; do
  [[ -f $f ]] || { echo "pack.sh: $f is missing; build it first" >&2; exit 1; }
done
if ldd "$agent" "$cupti" "$nccl" | grep -q 'libasan\|libubsan'; then
  echo "pack.sh: $build is a sanitizer build; pack a plain one" >&2
  exit 1
fi

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/gpu" "$out/cupti"

copy_stripped() {  # SRC DST_DIR
  local dst
  dst=$2/$(basename "$1")
  cp -L "$1" "$dst"
  chmod u+w "$dst"
  strip --strip-unneeded "$dst" 2>/dev/null || true
}

copy_stripped "$agent" "$out/bin"
# ldd lines: "libx.so.1 => /path/libx.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)".
ldd "$agent" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
  while read -r lib; do copy_stripped "$lib" "$out/lib"; done
[[ -f $out/lib/ld-linux-x86-64.so.2 ]] || { echo "pack.sh: no loader in ldd output" >&2; exit 1; }

copy_stripped "$cupti" "$out/gpu"
copy_stripped "$nccl" "$out/gpu"
libcupti=$(ldd "$cupti" | awk '$1 == "libcupti.so.13" && $3 ~ /^\// {print $3}')
[[ -n $libcupti ]] && cp -L "$libcupti" "$out/cupti/libcupti.so.13"

# Check: the packed agent runs with nothing but its own lib/ (--help exits 1 after the usage).
help=$("$out/lib/ld-linux-x86-64.so.2" --library-path "$out/lib" "$out/bin/fabricscope-agent" --help 2>&1 || true)
grep -q '^Usage: fabricscope-agent' <<<"$help" || {
  echo "pack.sh: the packed agent does not start: ${help:0:300}" >&2; exit 1; }

{
  echo "revision $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo +dirty)"
  echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) from $build"
  for so in "$out"/gpu/*.so; do
    echo "$(basename "$so") needs $(objdump -T "$so" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)," \
      "links: $(readelf -d "$so" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  done
  echo "bytes $(du -sb "$out" | cut -f1)"
} > "$out/MANIFEST"

size=$(du -sb "$out" | cut -f1)
cat "$out/MANIFEST"
if (( size > limit_bytes )); then
  echo "pack.sh: $out is $size bytes, over the 64 MiB the device tool carries" >&2
  exit 1
fi
echo "pack.sh: $out ready ($((size / 1024 / 1024)) MiB)"
