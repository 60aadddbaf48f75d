#!/usr/bin/env python3
"""Hearth on every kernel tier beside llama.cpp builds, in one run.

    python3 scripts/bench-tiers.py --model 270m=PATH --model 1b=PATH \
        --tier avx2 --tier scalar \
        --engine llama.cpp=/path/llama-bench --engine 'ik_llama.cpp=/path/llama-bench' \
        --engine 'ik_llama.cpp -rtr 1=/path/llama-bench -rtr 1' \
        --threads 1,2 --reps 3 [--json OUT.jsonl] \
        [--hearth old=/old/hearth --hearth new=./target/release/hearth --rounds 2]

For each model and thread count it runs pp512 and tg128 through `hearth bench`
on each tier (forced with `--cpu`) and through each llama-bench, one after the
other, so every figure of a row comes from the same minutes on the same
machine; with --rounds N the whole row is run N times over, alternating the
engines (two Hearth builds compared before and after a change), and each
cell gives the mean and the range. Prints a markdown table of `pp512 / tg128` tokens per second and,
with --json, every raw row. The llama-bench binaries are built elsewhere (see
docs/perf/speed.md for the cmake switches per tier); nothing here
downloads or builds them.
"""

import argparse
import json
import shlex
import subprocess
import sys

def hearth_rows(binary, model, tier, threads, reps):
    cmd = [binary, "bench", "-m", model, "-p", "512", "-n", "128", "-t", str(threads),
           "-r", str(reps), "--cpu", tier, "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["test"]: (r["avg_ts"], r["stddev_ts"]) for r in rows}


def llama_rows(command, model, threads, reps):
    argv = shlex.split(command)
    cmd = argv + ["-m", model, "-p", "512", "-n", "128", "-t", str(threads), "-r", str(reps),
                  "-o", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    result = {}
    for r in rows:
        test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        result[test] = (r["avg_ts"], r["stddev_ts"])
    return result


def cell(rounds):
    """`pp / tg` means over the rounds, with their ranges when there are several."""
    def stat(test):
        v = [r[test][0] for r in rounds]
        mean = sum(v) / len(v)
        return f"{mean:.1f}" if len(v) == 1 else f"{mean:.1f} ({min(v):.1f}–{max(v):.1f})"
    return f"{stat('pp512')} / {stat('tg128')}"


def pair(label_value):
    label, _, value = label_value.partition("=")
    if not value:
        sys.exit(f"expected LABEL=VALUE, got {label_value!r}")
    return label, value


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", type=pair, required=True, help="LABEL=PATH")
    ap.add_argument("--tier", action="append", default=[], help="a Hearth tier (HEARTH_CPU)")
    ap.add_argument("--engine", action="append", type=pair, default=[],
                    help="LABEL=llama-bench command line")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="append raw rows here as JSON lines")
    ap.add_argument("--hearth", action="append", type=pair, default=[],
                    help="LABEL=PATH of a hearth binary (default: Hearth=./target/release/hearth)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every engine this many times, alternating")
    args = ap.parse_args()

    threads = [int(t) for t in args.threads.split(",")]
    builds = args.hearth or [("Hearth", "./target/release/hearth")]
    engines = [(f"{b} {t}", lambda m, n, t=t, p=p: hearth_rows(p, m, t, n, args.reps))
               for t in args.tier for b, p in builds]
    engines += [(label, lambda m, n, c=cmd: llama_rows(c, m, n, args.reps))
                for label, cmd in args.engine]
    table = {}
    for model_label, path in args.model:
        for n in threads:
            for _ in range(args.rounds):
                for label, run in engines:
                    print(f"running {label} on {model_label}, {n} thread(s)", file=sys.stderr)
                    rows = run(path, n)
                    table.setdefault((model_label, label, n), []).append(rows)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps({"model": model_label, "engine": label,
                                            "threads": n, "rows": rows}) + "\n")

    head = " | ".join(f"{n} thread{'s' if n > 1 else ''}" for n in threads)
    for model_label, _ in args.model:
        print(f"\n{model_label}, pp512 / tg128 t/s\n")
        print(f"| engine | {head} |")
        print("|---|" + "---|" * len(threads))
        for label, _ in engines:
            cells = []
            for n in threads:
                cells.append(cell(table[(model_label, label, n)]))
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
