#!/bin/sh
# The counts issue 58 tracks, each by the command that makes it: how many
# ways there are to multiply and to start a generation, long files, import
# cycles between files, block sizes written as literals, README length.
set -eu
cd "$(dirname "$0")/.."

echo "public product functions in quant (free functions of src/matmul):"
grep -rhE '^pub fn ' crates/quant/src/matmul* | sed 's/(.*//; s/^/  /'

echo "generation entry points in engine (Session methods that start one):"
grep -hE '^    pub fn (generate|begin|start)[a-z_]*\(' crates/engine/src/generate.rs \
    crates/engine/src/request.rs 2>/dev/null | sed 's/(.*//; s/^ */  /'

echo "files over 450 lines in model, engine and server:"
find crates/model/src crates/engine/src crates/server/src -name '*.rs' \
    -exec wc -l {} + | awk '$2 != "total" && $1 > 450 { print "  " $1 " " $2; n++ } END { print "  (" n + 0 " files)" }'

echo "file import cycles in media and server (a uses b and b uses a):"
python3 - <<'EOF'
import glob, os, re

def cycles(crate):
    root = f"crates/{crate}/src"
    files = glob.glob(root + "/**/*.rs", recursive=True)

    def module(f):
        r = os.path.relpath(f, root)[:-3]
        r = r[:-4] if r.endswith("/mod") else r
        return "crate" if r == "lib" else "crate::" + r.replace("/", "::")

    names = {module(f): f for f in files}
    uses = {}
    for m, f in names.items():
        text = open(f).read().split("#[cfg(test)]\nmod tests")[0]
        deps = set()
        for path in re.findall(r"(?:crate|super)::[A-Za-z_:]+", text):
            if path.startswith("super::"):
                path = m.rsplit("::", 1)[0] + path[len("super"):]
            parts = path.split("::")
            for k in range(len(parts), 0, -1):
                cand = "::".join(parts[:k])
                if cand in names and cand != m:
                    deps.add(cand)
                    break
        uses[m] = deps
    found = set()
    for a, deps in uses.items():
        for b in deps:
            nested = a.startswith(b + "::") or b.startswith(a + "::")
            if a in uses.get(b, ()) and not nested:
                found.add(tuple(sorted((a, b))))
    return sorted(found)

for crate in ("media", "server"):
    found = cycles(crate)
    for a, b in found:
        print(f"  {crate}: {a} <-> {b}")
    print(f"  {crate}: {len(found)} cycles")
EOF

echo "operations defined in media (functions named for an op, tests excluded; the shared ones live in model::ops and quant::activation):"
find crates/media/src -name '*.rs' | sort | while read -r f; do
    sed '/^#\[cfg(test)\]/,$d' "$f" |
        grep -oE 'fn ([a-z0-9_]*_)?(norm|softmax|exp|silu|softplus|sigmoid|gelu|geglu|tanh|attention|attend|sgemm|matmul|product|rope)(_[a-z0-9_]*)?\(' |
        sed "s|^fn |  $f: |; s|($||"
done
n=$(find crates/media/src -name '*.rs' -exec sed '/^#\[cfg(test)\]/,$d' {} \; |
    grep -cE 'fn ([a-z0-9_]*_)?(norm|softmax|exp|silu|softplus|sigmoid|gelu|geglu|tanh|attention|attend|sgemm|matmul|product|rope)(_[a-z0-9_]*)?\(' || true)
echo "  ($n)"

echo "block sizes written as byte-array literals in quant:"
n=$(grep -rhoE '\[u8; [0-9]+\]' crates/quant/src | wc -l)
echo "  $n"

echo "byte offsets into blocks written as numbers in the block-reading SIMD kernels (a number first; strides and offsets within a field not counted; comments excluded):"
for f in crates/quant/src/simd/x86.rs crates/quant/src/gemm/pack_x86.rs crates/quant/src/simd/neon.rs; do
    n=$(grep -vE '^\s*//' "$f" | grep -oE '\.add\([0-9]+( \+[^)]*)?\)|\[[0-9]+\.\.[0-9]*\]|, (18|22|34|144|176|210|292)[,)]' | wc -l)
    echo "  $f: $n"
done

echo "README lines:"
echo "  $(wc -l < README.md)"

# Issue 91's counts (the model layer): where ops are defined, how many
# `Linear` types, prompt builders, `Scratch` fields, long functions and
# kernel-table fields there are.
echo "crates defining ops (functions named for an op, tests excluded; quant's are the SIMD kernels behind nn):"
for c in nn model media quant engine; do
    n=$(find crates/$c/src -name '*.rs' -exec sed '/^#\[cfg(test)\]/,$d' {} \; |
        grep -cE '^\s*pub(\([a-z]+\))? fn ([a-z0-9_]*_)?(norm|softmax|silu|gelu|geglu|glu|softcap|softplus|rope|attention|attend)(_[a-z0-9_]*)?\(' || true)
    [ "$n" -gt 0 ] && echo "  $c: $n"
done
echo "Linear types:"
grep -rnE '^\s*pub(\([a-z]+\))? struct Linear\b' crates --include=*.rs | sed 's/^/  /'
echo "public prompt builders on Engine:"
grep -rhE '^    pub fn ([a-z_]*_)?prompt(_[a-z_]*)?\(' crates/engine/src --include=*.rs |
    grep -vE 'prompt_tokens' | sed 's/(.*//; s/^ */  /'
echo "Scratch fields (crates/model/src/scratch.rs):"
awk '/^pub struct Scratch \{/{f=1;next} f&&/^\}/{f=0} f&&/^    pub\(crate\) [a-z_]+:/{n++} END{print "  " n+0}' crates/model/src/scratch.rs
echo "functions over the length lint (marked expect(clippy::too_many_lines)):"
echo "  $(grep -rE 'clippy::too_many_lines' crates --include=*.rs | grep -vE '^[^:]*:\s*//' | wc -l)"
echo "kernel table fields (quant/src/simd/mod.rs Kernels):"
awk '/^pub\(crate\) struct Kernels \{/{f=1;next} f&&/^\}/{f=0} f&&/^    pub [a-z0-9_]+:/{n++} END{print "  " n+0}' crates/quant/src/simd/mod.rs
