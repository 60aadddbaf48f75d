#!/bin/sh
# Build Hearth's container image (a static musl binary, FROM scratch) and,
# where podman can run containers, check it: image size, container start to
# /health 200 and to the first token (median of N runs), the image's
# HEALTHCHECK, and --idle-exit followed by a restart.
#
#   sh scripts/container.sh [--bake MODEL.gguf] [--model MODEL.gguf]
#                           [--runs N] [--cold] [--no-checks]
#
#   --bake FILE   put FILE in the image as /models/model.gguf (else the model
#                 is mounted at run time).
#   --model FILE  the model the checks mount (default: the cached
#                 gemma-3-270m-q4_k_m.gguf; scripts/fetch-model.sh fetches it).
#   --runs N      runs per timing (default 5; the median is reported).
#   --cold        drop the page cache before each timed start (root only;
#                 pages another process keeps mapped stay cached).
#   --no-checks   build the image and stop.
#
# Environment: IMAGE (localhost/hearth:latest), PORT (18080, the host port
# the checks use), CARGO_TARGET_DIR, and PODMAN_FLAGS / PODMAN_RUN_FLAGS to
# force the global and `run` flags instead of the ones found to work.
#
# Idempotent: the build context is staged afresh under the target folder,
# podman's layer cache does the rest, and every container it starts is
# removed. Without podman or buildah, or where podman cannot run containers,
# it says so and exits 0 after what it could do (CI runs it where podman is).
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)

IMAGE=${IMAGE:-localhost/hearth:latest}
PORT=${PORT:-18080}
RUNS=5
BAKE=""
MODEL=""
CHECKS=1
COLD=0
while [ $# -gt 0 ]; do
    case "$1" in
        --bake) BAKE=${2:?--bake needs a file}; shift 2 ;;
        --model) MODEL=${2:?--model needs a file}; shift 2 ;;
        --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
        --cold) COLD=1; shift ;;
        --no-checks) CHECKS=0; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "container.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$RUNS" in ''|*[!0-9]*|0) echo "container.sh: --runs must be a positive number" >&2; exit 2 ;; esac
if [ -n "$BAKE" ] && [ ! -f "$BAKE" ]; then
    echo "container.sh: --bake $BAKE: no such file" >&2
    exit 2
fi

say() { printf 'container.sh: %s\n' "$*" >&2; }

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR=$ROOT/$TARGET_DIR ;; esac
ARCH=$(uname -m)
TRIPLE=$ARCH-unknown-linux-musl
CTX=$TARGET_DIR/container
BIN=""
LINKAGE=""

# --- 1. The binary ---------------------------------------------------------

# ring (rustls, under hf-hub for `hearth pull`) compiles a little C and
# assembly, so the musl target needs a C compiler for musl: Debian's
# musl-tools gives musl-gcc.
build_static() {
    if command -v rustup >/dev/null 2>&1 &&
        ! rustup target list --installed 2>/dev/null | grep -qx "$TRIPLE"; then
        rustup target add "$TRIPLE" >&2 || return 1
    fi
    cc_var=CC_$(printf '%s' "$TRIPLE" | tr '-' '_')
    eval "cc_now=\${$cc_var:-}"
    if [ -z "$cc_now" ]; then
        if command -v "$ARCH-linux-musl-gcc" >/dev/null 2>&1; then
            eval "export $cc_var=$ARCH-linux-musl-gcc"
        elif command -v musl-gcc >/dev/null 2>&1; then
            eval "export $cc_var=musl-gcc"
        else
            say "no C compiler for $TRIPLE (ring needs one): install musl-tools (apt-get install musl-tools)"
            return 1
        fi
    fi
    # pumpkin-solver's build script compiles its own test checkers (C and
    # C++) unless NO_CHECKERS=true; hearth never uses them, and there is no
    # musl C++ compiler to build them with.
    NO_CHECKERS=true cargo build --release --target "$TRIPLE" -p hearth-cli >&2
}

if build_static; then
    BIN=$TARGET_DIR/$TRIPLE/release/hearth
    LINKAGE=static
else
    say "the static musl build failed (above); falling back to a glibc binary plus the shared libraries it needs"
    cargo build --release -p hearth-cli >&2
    BIN=$TARGET_DIR/release/hearth
    LINKAGE=dynamic
fi

# --- 2. The build context --------------------------------------------------

rm -rf "$CTX"
mkdir -p "$CTX/rootfs/usr/local/bin" "$CTX/models-empty" "$CTX/models-baked" "$CTX/data-empty"
# Strip the debug info the release profile keeps (debug = 1) from the copy.
if ! strip -o "$CTX/rootfs/usr/local/bin/hearth" "$BIN" 2>/dev/null; then
    cp "$BIN" "$CTX/rootfs/usr/local/bin/hearth"
fi
HEARTH=$CTX/rootfs/usr/local/bin/hearth
if [ "$LINKAGE" = dynamic ]; then
    # Exactly what the dynamic linker loads: each library at its own path,
    # and the loader itself.
    ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
        while read -r lib; do
            mkdir -p "$CTX/rootfs$(dirname "$lib")"
            cp -L "$lib" "$CTX/rootfs$lib"
        done
fi
BUILD_ARGS=""
if [ -n "$BAKE" ]; then
    ln "$BAKE" "$CTX/models-baked/model.gguf" 2>/dev/null || cp "$BAKE" "$CTX/models-baked/model.gguf"
    BUILD_ARGS="--build-arg MODEL_SRC=models-baked"
fi

echo "binary: $HEARTH"
echo "binary size: $(wc -c < "$HEARTH") bytes stripped ($(wc -c < "$BIN") with debug info)"
if command -v file >/dev/null 2>&1; then
    echo "file: $(file -b "$HEARTH")"
fi
if command -v ldd >/dev/null 2>&1; then
    echo "ldd: $(ldd "$HEARTH" 2>&1 | tr '\n' ' ')"
fi

# --- 3. The image ----------------------------------------------------------

if command -v podman >/dev/null 2>&1; then
    BUILDER="podman build"
elif command -v buildah >/dev/null 2>&1; then
    BUILDER="buildah bud"
else
    echo "SKIP: neither podman nor buildah is installed; the binary and build context are in $CTX"
    echo "      (build by hand: podman build --format docker -f Containerfile -t $IMAGE $CTX)"
    exit 0
fi
# shellcheck disable=SC2086 # BUILD_ARGS is a flag list or empty.
$BUILDER --format docker -f "$ROOT/Containerfile" -t "$IMAGE" $BUILD_ARGS "$CTX" >&2
if command -v podman >/dev/null 2>&1; then
    echo "image: $IMAGE, $(podman image inspect --format '{{.Size}}' "$IMAGE") bytes"
else
    echo "image: $IMAGE, $(buildah images --format '{{.Size}}' "$IMAGE" | head -n 1)"
fi

if [ "$CHECKS" = 0 ]; then
    exit 0
fi
if ! command -v podman >/dev/null 2>&1; then
    echo "SKIP: podman is not installed (buildah built the image); no run checks"
    exit 0
fi

# --- 4. Can podman run it here? --------------------------------------------

if [ -z "$MODEL" ]; then
    MODEL=${HEARTH_HOME:-${HOME:-.}/.cache/hearth}/models/gemma-3-270m-q4_k_m.gguf
fi
if [ -z "$BAKE" ] && [ ! -f "$MODEL" ]; then
    echo "SKIP: no model at $MODEL for the run checks (sh scripts/fetch-model.sh, or --model FILE)"
    exit 0
fi

# Some hosts refuse podman's defaults: without CAP_SYS_RESOURCE the OCI
# runtime may not raise RLIMIT_NOFILE/NPROC, and crun refuses cgroups in
# hybrid v1/v2 mode where runc does not. Try the defaults first.
# Lower limits than the host's need no privilege to set; 4096 files and
# tasks are plenty for one server.
LIMITS="--ulimit nofile=4096:4096 --ulimit nproc=4096:4096"
PODMAN_FLAGS=${PODMAN_FLAGS-}
RUN_FLAGS=${PODMAN_RUN_FLAGS-}
ran=""
if [ -n "${PODMAN_FLAGS}${PODMAN_RUN_FLAGS-}" ]; then
    # shellcheck disable=SC2086
    podman $PODMAN_FLAGS run --rm $RUN_FLAGS --entrypoint hearth "$IMAGE" --version >/dev/null 2>"$CTX/run.err" && ran=1
else
    for try in "|" "|$LIMITS" "--runtime runc|$LIMITS"; do
        PODMAN_FLAGS=${try%%|*}
        RUN_FLAGS=${try#*|}
        # shellcheck disable=SC2086
        if podman $PODMAN_FLAGS run --rm $RUN_FLAGS --entrypoint hearth "$IMAGE" --version >/dev/null 2>"$CTX/run.err"; then
            ran=1
            break
        fi
    done
fi
if [ -z "$ran" ]; then
    echo "SKIP: podman cannot run containers here: $(tr '\n' ' ' < "$CTX/run.err")"
    exit 0
fi
[ -n "$PODMAN_FLAGS$RUN_FLAGS" ] && say "podman runs containers here with: podman $PODMAN_FLAGS run $RUN_FLAGS"

pm() {
    # shellcheck disable=SC2086
    podman $PODMAN_FLAGS "$@"
}

# Milliseconds since the epoch (GNU date; python3 where %N is missing).
now_ms() {
    t=$(date +%s%N)
    case "$t" in
        *N) python3 -c 'import time; print(int(time.time() * 1000))' ;;
        *) echo $((t / 1000000)) ;;
    esac
}

median() {
    sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "?"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

drop_caches() {
    if [ "$COLD" = 1 ]; then
        sync
        echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || {
            say "cannot drop the page cache (needs root); these runs are warm"
            COLD=0
        }
    fi
}

NAME=hearth-check-$$
MOUNT=""
[ -z "$BAKE" ] && MOUNT="-v $MODEL:/models/model.gguf:ro"
NET="-p 127.0.0.1:$PORT:8080"
ARGS="-m /models/model.gguf --port 8080"
URL=http://127.0.0.1:$PORT
cleanup() { pm rm -f -t 0 "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM

# Start the container detached; extra `run` flags in $1.
start() {
    cleanup
    # shellcheck disable=SC2086
    pm run -d --name "$NAME" $RUN_FLAGS $NET $MOUNT $1 "$IMAGE" $ARGS >/dev/null
}

healthy() { "$HEARTH" health --quiet --url "$URL/health" --wait "$1" --timeout 1 2>/dev/null; }

first_token() {
    curl -sf --max-time 120 "$URL/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt":"Hi","max_tokens":1,"temperature":0}' >/dev/null
}

# Published ports need a working container network; fall back to the
# host's network namespace where there is none.
start ""
if ! healthy 60; then
    say "no answer through a published port; using --network host (logs: $(pm logs "$NAME" 2>&1 | tail -n 3 | tr '\n' ' '))"
    NET="--network host"
    ARGS="-m /models/model.gguf --port $PORT"
    start ""
    if ! healthy 60; then
        echo "SKIP: the container started but never answered on $URL/health: $(pm logs "$NAME" 2>&1 | tail -n 5 | tr '\n' ' ')"
        exit 0
    fi
fi
# The image's own HEALTHCHECK probes port 8080 inside the container.
if [ "$NET" = "--network host" ] && [ "$PORT" != 8080 ]; then
    say "HEALTHCHECK not run: on the host network the server listens on $PORT, not 8080"
elif pm healthcheck run "$NAME" >/dev/null 2>&1; then
    echo "healthcheck: healthy (hearth health inside the image)"
else
    echo "FAIL: the image's HEALTHCHECK failed: $(pm healthcheck run "$NAME" 2>&1 | tail -n 2)"
    exit 1
fi
cleanup

# --- 5. Timings --------------------------------------------------------------

HAVE_CURL=1
command -v curl >/dev/null 2>&1 || { HAVE_CURL=0; say "curl is missing: no first-token timings"; }
: > "$CTX/health.ms"
: > "$CTX/token.ms"
i=0
while [ "$i" -lt "$RUNS" ]; do
    i=$((i + 1))
    drop_caches
    t0=$(now_ms)
    start ""
    healthy 120 || { echo "FAIL: run $i never became healthy: $(pm logs "$NAME" 2>&1 | tail -n 5)"; exit 1; }
    t1=$(now_ms)
    echo $((t1 - t0)) >> "$CTX/health.ms"
    if [ "$HAVE_CURL" = 1 ]; then
        first_token || { echo "FAIL: run $i: the completion failed: $(pm logs "$NAME" 2>&1 | tail -n 5)"; exit 1; }
        t2=$(now_ms)
        echo $((t2 - t0)) >> "$CTX/token.ms"
    fi
    cleanup
done
state=warm
[ "$COLD" = 1 ] && state="cold page cache"
echo "container start -> /health 200: median $(median < "$CTX/health.ms") ms of $RUNS ($state; runs: $(tr '\n' ' ' < "$CTX/health.ms"))"
if [ "$HAVE_CURL" = 1 ]; then
    echo "container start -> first token: median $(median < "$CTX/token.ms") ms of $RUNS ($state; runs: $(tr '\n' ' ' < "$CTX/token.ms"))"
fi

# --- 6. Idle exit, then a restart ------------------------------------------

IDLE=3
start "-e HEARTH_IDLE_EXIT=$IDLE"
healthy 120 || { echo "FAIL: the idle-exit container never became healthy"; exit 1; }
[ "$HAVE_CURL" = 1 ] && first_token
t0=$(now_ms)
code=$(pm wait "$NAME")
t1=$(now_ms)
if [ "$code" != 0 ] || ! pm logs "$NAME" 2>&1 | grep -q "idle for"; then
    echo "FAIL: --idle-exit: exit code $code; logs: $(pm logs "$NAME" 2>&1 | tail -n 5)"
    exit 1
fi
echo "idle exit: exit code 0 after $((t1 - t0)) ms with --idle-exit $IDLE ($(pm logs "$NAME" 2>&1 | grep 'idle for' | head -n 1))"
t0=$(now_ms)
pm start "$NAME" >/dev/null
healthy 120 || { echo "FAIL: the restarted container never became healthy"; exit 1; }
t1=$(now_ms)
msg="restart: /health 200 after $((t1 - t0)) ms"
if [ "$HAVE_CURL" = 1 ]; then
    first_token
    t2=$(now_ms)
    msg="$msg, first token after $((t2 - t0)) ms"
fi
echo "$msg"
cleanup
echo "OK"
