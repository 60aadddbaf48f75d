"""llama-bench-style pp/tg timings through llama-cpp-python (libllama).

Prints JSON lines shaped like `hearth bench --json`, so scripts/bench-vs-llamacpp.sh
can pair the rows. pp N: N random tokens decoded in one batch from an empty
cache; tg N: N tokens decoded one at a time; each after one untimed warm-up.
"""

import argparse
import json
import random
import statistics
import time

import llama_cpp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5)
    args = ap.parse_args()

    n_ctx = max(args.n_prompt, args.n_gen) + 16
    llm = llama_cpp.Llama(
        model_path=args.model,
        n_ctx=n_ctx,
        n_batch=max(args.n_prompt, 1),
        n_ubatch=max(args.n_prompt, 1),
        n_threads=args.threads,
        n_threads_batch=args.threads,
        logits_all=False,
        verbose=False,
    )
    vocab = llm.n_vocab()
    rng = random.Random(2)

    def clear() -> None:
        # The KV-clearing call moved between llama-cpp-python releases.
        llm.reset()
        for name in ("kv_cache_clear", "memory_clear"):
            f = getattr(llm._ctx, name, None)
            if f is None:
                continue
            try:
                f()
            except TypeError:
                f(True)
            return

    def run(test: str, n: int) -> float:
        toks = [rng.randrange(vocab) for _ in range(n)]
        clear()
        start = time.perf_counter()
        if test == "pp":
            llm.eval(toks)
        else:
            for t in toks:
                llm.eval([t])
        return n / (time.perf_counter() - start)

    for test, n in (("pp", args.n_prompt), ("tg", args.n_gen)):
        if n <= 0:
            continue
        run(test, n)
        samples = [run(test, n) for _ in range(args.reps)]
        print(
            json.dumps(
                {
                    "engine": "llama.cpp",
                    "test": f"{test}{n}",
                    "threads": args.threads,
                    "avg_ts": statistics.mean(samples),
                    "stddev_ts": statistics.stdev(samples) if len(samples) > 1 else 0.0,
                    "samples_ts": samples,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
