#!/bin/sh
# DRY, XTC and top-nσ against llama.cpp's own sampler chain, the model's
# numbers taken out: a small program linked to libllama generates the cases
# of scripts/samplers-vs-llama.py on the real 270M with llama.cpp's model
# and sampler, recording every step's full logits and choice; Hearth's
# sampler then replays each step on the same logits and history and must
# choose the same token (the ignored test `replay_llama_cpp_sampler_choices`).
#
# Usage: scripts/samplers-replay.sh LLAMA_CPP_SOURCE LLAMA_CPP_LIB_DIR
# (the source as the llama-cpp-python sdist ships it in vendor/llama.cpp;
# the folder holding libllama.so of a build of it). Needs g++ and about
# 2 GB free in $TMPDIR for the logits.
set -eu
cd "$(dirname "$0")/.."
src=$1
lib=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/hearth-replay.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" -I"$src/vendor" \
    scripts/samplers-replay/gen.cpp -L"$lib" -lllama -lggml -lggml-base \
    -Wl,-rpath,"$lib" -o "$work/gen"
model=$(sh scripts/fetch-model.sh)
python3 scripts/samplers-vs-llama.py --cases > "$work/in.json"
"$work/gen" "$model" "$work/in.json" "$work" 2>/dev/null
HEARTH_SAMPLER_REPLAY=$work HEARTH_MODEL=$model cargo test --profile ci -p hearth-engine \
    --lib replay_llama_cpp_sampler_choices -- --ignored --nocapture
