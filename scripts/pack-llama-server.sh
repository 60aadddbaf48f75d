#!/bin/sh
# Packs the llama.cpp sources its server needs into .probe/lcs.tgz, for
# scripts/device-serve.sh to build llama-server natively on the many-core
# machine (which has a compiler but no network; see
# ../shared/bench/many-core/README.md). Nothing of it is committed.
#
#   LLAMA_SRC=/path/to/llama.cpp sh scripts/pack-llama-server.sh
#
# LLAMA_SRC: a llama.cpp checkout, e.g. the copy vendored in the
# llama-cpp-python sdist (`pip download --no-deps --no-binary
# llama-cpp-python llama-cpp-python==0.3.36`, then vendor/llama.cpp).
set -eu
cd "$(dirname "$0")/.."
SRC=${LLAMA_SRC:-/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}
[ -f "$SRC/tools/server/server.cpp" ] || { echo "no llama.cpp server sources in $SRC (set LLAMA_SRC)" >&2; exit 2; }
mkdir -p .probe
tar czf .probe/lcs.tgz -C "$SRC" --exclude='./build*' --exclude='*/build*' \
    --exclude='tools/server/tests' --exclude='tools/server/webui' \
    CMakeLists.txt cmake ggml src include common vendor tools/CMakeLists.txt tools/server tools/mtmd LICENSE licenses
ls -la .probe/lcs.tgz
