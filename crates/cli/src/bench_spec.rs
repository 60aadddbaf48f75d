//! `hearth bench --spec`: decode speed without and with speculation on
//! three copy-heavy tasks (rewrite a paragraph, fix a function, answer with
//! quotes), the acceptance rate, and whether the outputs matched.

use crate::bench::BenchArgs;
use anyhow::Result;

const PARAGRAPH: &str =
    "The old mill stood at the edge of the vilage for nearly two hundred years. \
Every spring the river rose and turned its wheel faster, and the miller's familly ground flour \
for the farms across the valley. When the railway came, the mill fell silent, but the people \
of the vilage still walked past it on Sundays and told their children how the wheel had sung.";

const FUNCTION: &str = "def moving_average(values, window):\n    \
\"\"\"Return the average of each run of `window` consecutive values.\"\"\"\n    \
averages = []\n    \
for start in range(len(values) - window):\n        \
chunk = values[start:start + window]\n        \
averages.append(sum(chunk) / window)\n    \
return averages\n";

const TEXT: &str = "The committee met on the third of March. It agreed that the bridge would \
close for repairs from the first of June to the end of August. During the closure, a ferry \
will run every twenty minutes between the two landings, and it will be free for residents. \
The committee also asked the council to publish the repair schedule on its website.";

/// The three tasks: (name, prompt).
pub fn tasks() -> [(&'static str, String); 3] {
    [
        (
            "rewrite a paragraph",
            format!(
                "Rewrite the paragraph below with its spelling mistakes corrected.\n\n\
                 Paragraph:\n{PARAGRAPH}\n\nCorrected paragraph:\n"
            ),
        ),
        (
            "fix a function",
            format!(
                "The function below skips the last window. Fix the bug.\n\n```python\n{FUNCTION}```\n\n\
                 Fixed function:\n```python\n"
            ),
        ),
        (
            "answer with quotes",
            format!(
                "{TEXT}\n\nQuestion: When will the bridge close, and how will people cross it? \
                 Answer by quoting the text.\nAnswer: \""
            ),
        ),
    ]
}

/// A row per task for `engine` (loaded at `threads`).
pub fn rows(
    engine: &engine::Engine,
    name: &str,
    speculation: &engine::Speculation,
    args: &BenchArgs,
) -> Result<()> {
    let n_gen = args.n_gen.iter().copied().find(|&n| n > 0).unwrap_or(128);
    let threads = engine.model().threads();
    for (task, prompt) in tasks() {
        let ids = engine.tokenizer().encode(&prompt, true, false);
        let b = engine.bench_speculation(&ids, n_gen, speculation, args.reps)?;
        let (plain, spec) = (
            engine::bench::spec_mean(&b.plain),
            engine::bench::spec_mean(&b.speculative),
        );
        if args.json {
            let v = serde_json::json!({
                "model": name, "threads": threads, "task": task, "tokens": b.tokens,
                "plain_tps": plain, "spec_tps": spec, "speedup": b.speedup(),
                "drafted": b.stats.drafted, "accepted": b.stats.accepted,
                "acceptance": b.stats.acceptance(), "same_output": b.same,
            });
            println!("{v}");
        } else {
            println!(
                "| {name} | {threads} | {task} | {} | {plain:.1} | {spec:.1} | {:.2}x | {:.0}% ({} of {}) | {} |",
                b.tokens,
                b.speedup(),
                100.0 * b.stats.acceptance(),
                b.stats.accepted,
                b.stats.drafted,
                if b.same { "yes" } else { "NO" }
            );
        }
    }
    Ok(())
}

/// The table's header.
pub fn header() {
    println!("| model | threads | task | tokens | t/s plain | t/s speculative | speedup | drafts kept | same output |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |");
}
