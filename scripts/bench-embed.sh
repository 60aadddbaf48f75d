#!/bin/sh
# EmbeddingGemma side by side: `hearth embed` and llama.cpp's `llama-embedding`
# on the same GGUF, threads and texts, run alternately.
#
#   sh scripts/bench-embed.sh LLAMA_BIN_DIR [THREADS] [REPS]
#
# LLAMA_BIN_DIR holds llama.cpp's llama-embedding (built from PyPI's
# llama-cpp-python sdist, vendor/llama.cpp, with -DGGML_NATIVE=ON). The models
# are `hearth synth --preset embeddinggemma-300m` at q8_0 and f16, written once
# under $HEARTH_HOME/synth. The workloads: 1,000 sentences of 10 to 60 tokens
# (made from a word list, the same every run) and one document of 2,048 tokens
# (markers included). Each tool's own embedding time is read from its output
# (hearth's "in X s" line; for llama.cpp, from its first batch_decode log line
# to the process's end, which slightly favours hearth by the printout and
# exit), and wall time and peak RSS of the whole process from /usr/bin/time.
set -eu
cd "$(dirname "$0")/.."
LLAMA=${1:?usage: bench-embed.sh LLAMA_BIN_DIR [THREADS] [REPS]}
THREADS=${2:-2}
REPS=${3:-3}
HOME_DIR=${HEARTH_HOME:-${HOME}/.cache/hearth}
SYNTH="$HOME_DIR/synth"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hearth-embed.XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
mkdir -p "$SYNTH"
cargo build --release -q -p hearth-cli
HEARTH=./target/release/hearth
for q in q8_0 f16; do
    f="$SYNTH/embeddinggemma-300m-$q.gguf"
    [ -f "$f" ] || "$HEARTH" synth --preset embeddinggemma-300m --quant "$q" -o "$f" >&2
done

# The texts: sentences of 10-60 tokens, and a 2,048-token document.
M="$SYNTH/embeddinggemma-300m-q8_0.gguf"
python3 - "$WORK" "$HEARTH" "$M" <<'PY'
import json, random, subprocess, sys
work, hearth, model = sys.argv[1:4]
words = ("the a of to in and is for on with as by at from that this it be are was notes search local model "
         "private laptop server memory token window river mountain garden kitchen recipe travel budget tax "
         "invoice meeting project deadline weather forecast music guitar library history science language "
         "between under over quickly slowly tomorrow yesterday because although however therefore").split()
rng = random.Random(54)
def count(text):
    out = subprocess.run([hearth, "tokenize", "-m", model, "--no-bos", text], capture_output=True, text=True, check=True)
    return len(json.loads(out.stdout))
lines = []
while len(lines) < 1000:
    target = rng.randint(10, 60)
    n = max(1, int(target / 1.05))
    lines.append(" ".join(rng.choice(words) for _ in range(n)))
open(f"{work}/sentences.txt", "w").write("\n".join(lines) + "\n")
doc = []
while True:
    doc.append(" ".join(rng.choice(words) for _ in range(200)))
    if count(" ".join(doc)) + 2 >= 2048:
        break
text = " ".join(doc).split()
lo, hi = 0, len(text)
while lo < hi:  # the longest prefix of words within 2,046 tokens (<bos> and <eos> make 2,048)
    mid = (lo + hi + 1) // 2
    if count(" ".join(text[:mid])) <= 2046:
        lo = mid
    else:
        hi = mid - 1
open(f"{work}/document.txt", "w").write(" ".join(text[:lo]) + "\n")
PY

run_hearth() { # model file
    /usr/bin/time -f "%e %M" -o "$WORK/time" "$HEARTH" embed -m "$1" -f "$2" -t "$THREADS" --batch "$3" -o "$WORK/out" 2> "$WORK/err"
    secs=$(sed -n 's/.* tokens in \([0-9.]*\) s .*/\1/p' "$WORK/err")
    tokens=$(sed -n 's/.* texts, \([0-9]*\) tokens in .*/\1/p' "$WORK/err")
    echo "hearth batch=$3 $(basename "$1") $(basename "$2") embed_s=$secs tokens=$tokens wall_rss=$(cat "$WORK/time")"
}
run_llama() { # model file ctx [flags]
    model=$1 file=$2 ctx=$3
    shift 3
    /usr/bin/time -f "%e %M" -o "$WORK/time" "$LLAMA/llama-embedding" -m "$model" -f "$file" -t "$THREADS" -c "$ctx" \
        "$@" > "$WORK/out" 2> "$WORK/err"
    # Its log stamps each line with the time since start (M.SS.mmm.uuu); the
    # embedding runs from the first batch_decode to the end of the process,
    # less the short printout of the first values.
    first=$(grep -m1 'batch_decode' "$WORK/err" | cut -d' ' -f1)
    batches=$(grep -c 'batch_decode' "$WORK/err")
    set -- $(cat "$WORK/time")
    secs=$(python3 -c "m,s,ms,us=map(int,'$first'.split('.')); print(round($1-(m*60+s+ms/1e3+us/1e6),3))")
    echo "llama.cpp ctx=$ctx $(basename "$model") $(basename "$file") embed_s=$secs batches=$batches wall_rss=$1 $2"
}

# llama.cpp's settings: flash attention on (faster for both workloads here),
# and for the sentences batches of 1,024 tokens, the fastest of 256, 512,
# 1,024, 2,048 and 4,096 on this kind of machine (it attends over the
# whole batch, masked, so larger batches cost it more).
for q in q8_0 f16; do
    m="$SYNTH/embeddinggemma-300m-$q.gguf"
    for r in $(seq "$REPS"); do
        run_hearth "$m" "$WORK/sentences.txt" 512
        run_llama "$m" "$WORK/sentences.txt" 1024 -b 1024 -ub 1024 -fa on
        run_hearth "$m" "$WORK/document.txt" 512
        run_llama "$m" "$WORK/document.txt" 2048 -fa on
    done
done
