#!/bin/sh
# Side-by-side throughput of Hearth and llama.cpp on the same file and threads.
#
#   sh scripts/bench-vs-llamacpp.sh [MODEL] [THREADS...]
#
# llama.cpp comes from PyPI's llama-cpp-python, compiled once (about ten
# minutes on two cores) into a venv cached under $HEARTH_HOME/bench-venv, with
# the host's SIMD (GGML_NATIVE) and without AMX, whose path crashes on some VMs.
# The engines run alternately, each test repeated, and the ratios printed.
set -eu
cd "$(dirname "$0")/.."
HOME_DIR=${HEARTH_HOME:-${HOME}/.cache/hearth}
MODEL=${1:-$(sh scripts/fetch-model.sh)}
[ $# -gt 0 ] && shift
THREADS=${*:-1 2}
REPS=${REPS:-5}
VENV="$HOME_DIR/bench-venv"

if ! "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
    python3 -m venv "$VENV"
    CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_CURL=OFF" \
    CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    CXXFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
        "$VENV/bin/pip" install --no-binary llama-cpp-python llama-cpp-python >&2
fi

cargo build --release -q -p hearth-cli
OUT=$(mktemp "${TMPDIR:-/tmp}/hearth-vs.XXXXXX")
trap 'rm -f "$OUT"' EXIT INT TERM
for t in $THREADS; do
    ./target/release/hearth bench -m "$MODEL" -p 512 -n 128 -t "$t" -r "$REPS" --json \
        | sed 's/^{/{"engine":"hearth",/' >> "$OUT"
    "$VENV/bin/python" scripts/bench_llamacpp.py -m "$MODEL" -p 512 -n 128 -t "$t" -r "$REPS" >> "$OUT"
done

python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["test"], r["threads"]), {})[r["engine"]] = r
print(f"| test | threads | hearth t/s | llama.cpp t/s | ratio |")
print(f"| --- | ---: | ---: | ---: | ---: |")
for (test, threads), e in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    h, l = e.get("hearth"), e.get("llama.cpp")
    if not (h and l):
        continue
    print(f"| {test} | {threads} | {h['avg_ts']:.2f} ± {h['stddev_ts']:.2f} | "
          f"{l['avg_ts']:.2f} ± {l['stddev_ts']:.2f} | {h['avg_ts'] / l['avg_ts']:.2f}x |")
PY
