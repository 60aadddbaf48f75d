#!/usr/bin/env python3
"""Two builds of hearth, the same bits: every logit and embedding the old
binary prints, the new one prints identically, on every kernel tier this CPU
runs (`HEARTH_CPU`), for every tiny architecture in tests/fixtures/tiny (each
GGUF quant, decode, small-batch and prefill paths, exact precision, images
and audio through their towers, embeddings) and the real 270M.

    python3 scripts/same-as-before.py --old OLD/hearth --new NEW/hearth \
        [--model gemma-3-270m-q4_k_m.gguf] [--tiers scalar,avx2]

Outputs are compared by SHA-256 of stdout (JSON floats print in their
shortest round-trip form, so equal text is equal bits). Exits 1 on any
difference, naming the cell. A refactor that must not change a number
(issue 91) is held to this before it lands.
"""

import argparse
import hashlib
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "tests/fixtures/tiny"
AUDIO = ROOT / "tests/fixtures/audio/speech.wav"
IDS = "2,17,300,45,9,120,77,8,250,33,61,500,12,99,140,7,220,310,5,88"
REAL_IDS = "2,818,5279,529,7001,563,9079,236761,669,5279"


def tiers(binary):
    """The tiers this CPU runs, from the error that names them."""
    out = subprocess.run(
        [binary, "bench", "-m", str(TINY / "gemma3/model-q8_0.gguf"), "-p", "1", "-n", "0",
         "--cpu", "no-such-tier"],
        capture_output=True, text=True)
    listed = out.stderr.split("this CPU runs: ")[1].split(")")[0]
    return listed.split(", ")


def cases(real):
    """(name, args) for every output compared."""
    for d in sorted(p for p in TINY.iterdir() if p.is_dir()):
        models = sorted(d.glob("model*.gguf"))
        if d.name == "embeddinggemma":
            # model-nodense-f32.gguf is a file Hearth refuses on purpose.
            for m in [d / "model-f32.gguf", d]:
                yield f"{d.name}/{m.name} embed", ["embed", "-m", str(m), "-t", "2", "hello world",
                                                   "a second, longer text to embed"]
            continue
        for m in models:
            for batch in ["1", "8", "64"]:
                yield f"{d.name}/{m.name} batch {batch}", [
                    "logits", "-m", str(m), "-t", "2", "--batch", batch, "--ids", IDS, "--full"]
            yield f"{d.name}/{m.name} precise", [
                "logits", "-m", str(m), "-t", "2", "--precise", "--ids", IDS, "--full"]
        for proj in sorted(d.glob("mmproj*.gguf")):
            model = str(d / "model-f32.gguf")
            if (d / "img_a.png").exists():
                media = ["--image", str(d / "img_a.png")]
                prompt = "<start_of_image> what is this?"
            else:
                media = ["--audio", str(AUDIO)]
                prompt = "<audio_soft_token> what is said?"
            yield f"{d.name}/{proj.name} embeddings", [
                "logits", "-m", model, "--mmproj", str(proj), "-t", "2", *media, "--embeddings"]
            yield f"{d.name}/{proj.name} prompt", [
                "logits", "-m", model, "--mmproj", str(proj), "-t", "2", *media, "-p", prompt,
                "--full"]
        if not models and (d / "model.safetensors").exists():
            # Checkpoint directories whose towers load with them.
            media = (["--image", str(d / "img_a.png")] if (d / "img_a.png").exists()
                     else ["--audio", str(AUDIO)])
            yield f"{d.name} (checkpoint) embeddings", [
                "logits", "-m", str(d), "-t", "2", *media, "--embeddings"]
    if real:
        for batch in ["1", "64"]:
            yield f"270M batch {batch}", [
                "logits", "-m", real, "-t", "2", "--batch", batch, "--ids", REAL_IDS, "--full"]


def digest(binary, tier, args):
    out = subprocess.run([binary, *args], capture_output=True,
                         env={"HEARTH_CPU": tier, "PATH": "/usr/bin:/bin"})
    if out.returncode != 0:
        return "error: " + out.stderr.decode(errors="replace").strip().splitlines()[-1]
    return hashlib.sha256(out.stdout).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--model", help="the real 270M GGUF")
    ap.add_argument("--tiers", help="comma-separated (default: every tier this CPU runs)")
    a = ap.parse_args()
    run_tiers = a.tiers.split(",") if a.tiers else tiers(a.new)
    same = differ = failed = 0
    for name, args in cases(a.model):
        for tier in run_tiers:
            old, new = digest(a.old, tier, args), digest(a.new, tier, args)
            if old.startswith("error") or new.startswith("error"):
                failed += 1
                print(f"FAILED {name} [{tier}]: old {old} / new {new}")
            elif old == new:
                same += 1
            else:
                differ += 1
                print(f"DIFFER {name} [{tier}]")
    print(f"tiers {','.join(run_tiers)}: {same} outputs identical, {differ} differ, "
          f"{failed} failed to run")
    sys.exit(1 if differ or failed else 0)


if __name__ == "__main__":
    main()
