#!/bin/sh
# Aggregate serving throughput: scripts/load-test.py against `hearth serve`
# at several --parallel values, then against llama.cpp's server (from
# llama-cpp-python, in the venv scripts/bench-vs-llamacpp.sh builds) on the
# same file, context, threads and load. Prints each run's summary.
#
#   sh scripts/serve-bench.sh [MODEL] [PARALLEL...]
#   LLAMA_SERVER=/path/to/llama-server sh scripts/serve-bench.sh [MODEL] [PARALLEL...]
#
# With LLAMA_SERVER (llama.cpp's own server binary, which batches parallel
# slots), the two servers take turns at each --parallel value, llama-server
# with -np P and P times the context (its -c is shared out among the
# slots), in place of llama-cpp-python's one-request-at-a-time server.
#
# LOAD overrides the client load (default: 16 clients x 4 requests of 64
# tokens, no hang-ups, so every generated token is delivered and both
# servers are counted the same way). STREAMS=1 makes it P streamed chats at
# once at --parallel P (each client 4 requests in turn; TTFT p50/p99
# printed), PROMPT_TOKENS=N gives each chat earlier turns of about N
# tokens (set CTX to hold them and the reply), and GROW=1 makes each
# client's chat go on, its replies joining its turns.
set -eu
cd "$(dirname "$0")/.."
HOME_DIR=${HEARTH_HOME:-${HOME}/.cache/hearth}
MODEL=${1:-$(sh scripts/fetch-model.sh)}
[ $# -gt 0 ] && shift
PARALLEL=${*:-1 4 8}
CTX=${CTX:-512}
THREADS=${THREADS:-2}
PROMPT_TOKENS=${PROMPT_TOKENS:-0}
# The load at --parallel P.
load() {
    if [ -n "${LOAD:-}" ]; then
        echo "$LOAD"
    elif [ "${STREAMS:-0}" = 1 ]; then
        echo "--clients $1 --requests ${REQUESTS:-4} --max-tokens 64 --hang-up-every 0 --stream-only --prompt-tokens $PROMPT_TOKENS${GROW:+ --grow}"
    else
        echo "--clients 16 --requests 4 --max-tokens 64 --hang-up-every 0"
    fi
}
VENV="$HOME_DIR/bench-venv"
PORT=${PORT:-8011}

# HEARTH_BIN: a hearth binary built already (else this checkout's, built now).
if [ -n "${HEARTH_BIN:-}" ]; then
    BIN=$HEARTH_BIN
else
    cargo build --release -q -p hearth-cli
    BIN=target/release/hearth
fi
echo "load before: $(uptime)"
hearth_run() {
    echo "== hearth --parallel $1"
    # shellcheck disable=SC2046 # the load is a list of flags
    python3 scripts/load-test.py --binary "$BIN" --model "$MODEL" --parallel "$1" --ctx "$CTX" --threads "$THREADS" $(load "$1") || true
}

if [ -n "${LLAMA_SERVER:-}" ]; then
    for p in $PARALLEL; do
        hearth_run "$p"
        echo "== llama.cpp llama-server -np $p"
        "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -tb "$THREADS" -c $((CTX * p)) -np "$p" \
            --host 127.0.0.1 --port "$PORT" >/dev/null 2>&1 &
        LLAMA=$!
        # It answers /health with 503 until the model is loaded.
        i=0
        until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" \
            >/dev/null 2>&1 || [ $i -ge 240 ]; do
            sleep 0.5
            i=$((i + 1))
        done
        # shellcheck disable=SC2046 # the load is a list of flags
        python3 scripts/load-test.py --url "http://127.0.0.1:$PORT" --pid "$LLAMA" $(load "$p") || true
        # A server that does not exit on TERM within 10 s is killed: one
        # left behind holds the port and answers the next run's load.
        kill "$LLAMA" 2>/dev/null || true
        i=0
        while kill -0 "$LLAMA" 2>/dev/null && [ $i -lt 20 ]; do
            sleep 0.5
            i=$((i + 1))
        done
        kill -9 "$LLAMA" 2>/dev/null || true
        wait "$LLAMA" 2>/dev/null || true
    done
    echo "load after: $(uptime)"
    exit 0
fi
for p in $PARALLEL; do
    hearth_run "$p"
done
if ! "$VENV/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
    echo "no llama-cpp-python server in $VENV (pip install 'llama-cpp-python[server]' there)" >&2
    exit 0
fi
# llama-cpp-python's server runs one request at a time (it has no parallel
# sequences); interrupt_requests=False queues the others instead of cutting
# the running stream short. Its OpenMP threads spin between the calls it
# makes from different worker threads, which makes it several times slower
# unless they are told to sleep (OMP_WAIT_POLICY=PASSIVE).
echo "== llama.cpp (llama-cpp-python server)"
OMP_WAIT_POLICY=PASSIVE "$VENV/bin/python" -m llama_cpp.server --model "$MODEL" \
    --n_ctx "$CTX" --n_threads "$THREADS" --n_threads_batch "$THREADS" \
    --logits_all False --interrupt_requests False --verbose False \
    --host 127.0.0.1 --port "$PORT" >/dev/null 2>&1 &
LLAMA=$!
trap 'kill $LLAMA 2>/dev/null || true' EXIT INT TERM
# shellcheck disable=SC2046
python3 scripts/load-test.py --url "http://127.0.0.1:$PORT" --pid "$LLAMA" $(load 16) || true
kill "$LLAMA" 2>/dev/null || true
echo "load after: $(uptime)"
