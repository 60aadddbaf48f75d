#!/bin/bash
# Serving on the many-core machine: `hearth serve` against llama.cpp's
# llama-server on the same synthetic model, threads and client load, at
# several parallel-sequence counts (scripts/serve-bench.sh). Run there after
# the kit's run.sh (which leaves its synthetic models in /tmp/w), with
# .probe/ holding the hearth binary, load-test.py and lcs.tgz
# (scripts/pack-llama-server.sh):
#
#   bash scripts/device-serve.sh [MODEL] [PARALLEL...]   # default: /tmp/w/m1b.gguf, 1 16
#
# THREADS (default: every core) and LOAD as in serve-bench.sh. Results go to
# $OUT/serve.log. llama-server is built natively there (~2 min on 16 cores);
# a build already in /tmp/w/lcs-build is reused.
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
MODEL=${1:-/tmp/w/m1b.gguf}
[ $# -gt 0 ] && shift
PAR=${*:-1 16}
W=/tmp/w; mkdir -p $W
LS=$W/lcs-build/bin/llama-server
if [ ! -x "$LS" ]; then
    T0=$(date +%s)
    mkdir -p $W/lcs && tar xzf .probe/lcs.tgz -C $W/lcs || exit 2
    # The tarball's mtimes may be in the future on the device's clock.
    find $W/lcs -exec touch {} +
    cmake -S $W/lcs -B $W/lcs-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF > $W/lcs.log 2>&1 &&
        cmake --build $W/lcs-build --target llama-server -j "$(nproc)" >> $W/lcs.log 2>&1
    echo "llama-server build rc=$? in $(( $(date +%s) - T0 )) s" | tee -a "$O/serve.log"
    [ -x "$LS" ] || { tail -20 $W/lcs.log; exit 2; }
fi
THREADS=${THREADS:-$(nproc)} HEARTH_BIN=${HEARTH_BIN:-.probe/hearth} LLAMA_SERVER=$LS \
    HEARTH_HOME=$W/hearth-home sh scripts/serve-bench.sh "$MODEL" $PAR 2>&1 | tee -a "$O/serve.log"
