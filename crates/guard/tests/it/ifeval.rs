//! The constraint verifier on 200 IFEval rows (with GPT-4's responses and
//! the official checker's verdicts): agreement with the official strict and
//! loose verdicts, and recovery of the instructions from the prompts alone.
//! Run with `-- --nocapture` to see the per-type disagreements and misses.

use hearth_guard::verify::rows::{evaluate, parse_jsonl, InputRow, Mode, ResponseRow};
use hearth_guard::verify::{check, check_loose, extract, Instruction};
use serde_json::Value;
use std::collections::BTreeMap;

struct Row {
    key: i64,
    prompt: String,
    ids: Vec<String>,
    kwargs: Vec<Value>,
    response: String,
    strict: Vec<bool>,
    loose: Vec<bool>,
}

fn rows() -> Vec<Row> {
    let text = include_str!("../data/ifeval_visible.jsonl");
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            let strings = |k: &str| -> Vec<String> {
                v[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect()
            };
            let bools = |k: &str| -> Vec<bool> {
                v[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_bool().unwrap())
                    .collect()
            };
            Row {
                key: v["key"].as_i64().unwrap(),
                prompt: v["prompt"].as_str().unwrap().to_string(),
                ids: strings("instruction_id_list"),
                kwargs: v["kwargs"].as_array().unwrap().clone(),
                response: v["response"].as_str().unwrap().to_string(),
                strict: bools("follow_instruction_list_strict"),
                loose: bools("follow_instruction_list_loose"),
            }
        })
        .collect()
}

/// Agreement of one mode with the official verdicts: (agreeing, total,
/// disagreements by type).
fn agreement(
    checker: fn(&Instruction, &str) -> bool,
    official: fn(&Row) -> &Vec<bool>,
) -> (usize, usize, BTreeMap<String, Vec<String>>) {
    let mut agree = 0;
    let mut total = 0;
    let mut disagreements: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in rows() {
        for (i, id) in row.ids.iter().enumerate() {
            let instruction = Instruction::from_id_kwargs(id, &row.kwargs[i]).unwrap();
            let ours = checker(&instruction, &row.response);
            total += 1;
            if ours == official(&row)[i] {
                agree += 1;
            } else {
                let detail = hearth_guard::verify::verdict(&instruction, &row.response).detail;
                disagreements
                    .entry(id.clone())
                    .or_default()
                    .push(format!("key {} ours={ours}: {detail}", row.key));
            }
        }
    }
    (agree, total, disagreements)
}

fn report(
    mode: &str,
    (agree, total, disagreements): &(usize, usize, BTreeMap<String, Vec<String>>),
) {
    println!(
        "{mode}: {agree}/{total} agree ({:.2}%)",
        100.0 * *agree as f64 / *total as f64
    );
    for (id, list) in disagreements {
        println!("  {id}: {} disagreement(s)", list.len());
        for d in list {
            println!("    {d}");
        }
    }
}

#[test]
fn strict_verdicts_agree_with_the_official_checker() {
    let result = agreement(check, |r| &r.strict);
    report("strict", &result);
    let (agree, total, _) = result;
    assert_eq!(total, 305);
    assert!(agree * 100 >= total * 99, "{agree}/{total}");
}

#[test]
fn loose_verdicts_agree_with_the_official_checker() {
    let result = agreement(check_loose, |r| &r.loose);
    report("loose", &result);
    let (agree, total, _) = result;
    assert!(agree * 100 >= total * 99, "{agree}/{total}");
}

/// Whether two kwargs say the same: numbers equal, strings equal after
/// trimming and ignoring case, lists equal as such sets of strings.
fn same_args(a: &Value, b: &Value) -> bool {
    fn norm(v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(s.trim().to_lowercase()),
            Value::Array(items) => {
                let mut set: Vec<String> = items
                    .iter()
                    .filter_map(|i| i.as_str().map(|s| s.trim().to_lowercase()))
                    .collect();
                set.sort();
                set.dedup();
                Value::from(set)
            }
            Value::Number(n) => Value::from(n.as_f64().unwrap_or(f64::NAN)),
            other => other.clone(),
        }
    }
    let empty = serde_json::Map::new();
    let a = a.as_object().unwrap_or(&empty);
    let b = b.as_object().unwrap_or(&empty);
    let keys: std::collections::BTreeSet<&String> = a
        .iter()
        .chain(b.iter())
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k)
        .collect();
    let same = keys
        .into_iter()
        .all(|k| norm(a.get(k).unwrap_or(&Value::Null)) == norm(b.get(k).unwrap_or(&Value::Null)));
    same
}

/// A prompt and the instructions IFEval lists for it.
struct Gold<'a> {
    key: i64,
    prompt: &'a str,
    ids: &'a [String],
    kwargs: &'a [Value],
}

/// What extraction recovered of a set of prompts.
#[derive(Default)]
struct Recovery {
    gold: usize,
    recovered: usize,
    extracted: usize,
    spurious: usize,
    extras: usize,
    misses: BTreeMap<String, Vec<String>>,
    spurious_by_type: BTreeMap<String, Vec<String>>,
}

impl Recovery {
    fn recall(&self) -> f64 {
        self.recovered as f64 / self.gold.max(1) as f64
    }
    fn spurious_rate(&self) -> f64 {
        self.spurious as f64 / self.extracted.max(1) as f64
    }
    fn print(&self, name: &str) {
        println!(
            "extraction on {name}: recovered {}/{} ({:.1}%), spurious {}/{} ({:.1}%), hearth extras {}",
            self.recovered,
            self.gold,
            100.0 * self.recall(),
            self.spurious,
            self.extracted,
            100.0 * self.spurious_rate(),
            self.extras
        );
        for (id, list) in &self.misses {
            println!("  missed {id}: {}", list.len());
            for m in list {
                println!("    {m}");
            }
        }
        for (id, list) in &self.spurious_by_type {
            println!("  spurious {id}: {}", list.len());
            for m in list {
                println!("    {m}");
            }
        }
    }
}

/// Extraction against the listed instructions: an extracted instruction
/// counts when its id and arguments match a listed one not yet matched.
fn recovery<'a>(rows: impl IntoIterator<Item = Gold<'a>>) -> Recovery {
    let mut r = Recovery::default();
    for row in rows {
        let mut pairs: Vec<(String, Value)> = extract(row.prompt)
            .iter()
            .map(|i| (i.id().to_string(), i.kwargs()))
            .collect();
        let ours = |id: &String| id.starts_with("hearth:");
        r.extracted += pairs.iter().filter(|(id, _)| !ours(id)).count();
        r.extras += pairs.iter().filter(|(id, _)| ours(id)).count();
        for (id, kwargs) in row.ids.iter().zip(row.kwargs) {
            r.gold += 1;
            match pairs
                .iter()
                .position(|(eid, ek)| eid == id && same_args(ek, kwargs))
            {
                Some(p) => {
                    r.recovered += 1;
                    pairs.remove(p);
                }
                None => {
                    let near: Vec<String> = pairs
                        .iter()
                        .filter(|(eid, _)| eid == id)
                        .map(|(_, k)| k.to_string())
                        .collect();
                    r.misses.entry(id.clone()).or_default().push(format!(
                        "key {} gold {} extracted {:?}",
                        row.key, kwargs, near
                    ));
                }
            }
        }
        for (id, kwargs) in pairs.into_iter().filter(|(id, _)| !ours(id)) {
            r.spurious += 1;
            r.spurious_by_type
                .entry(id)
                .or_default()
                .push(format!("key {} {}", row.key, kwargs));
        }
    }
    r
}

fn gold_of(row: &Row) -> Gold<'_> {
    Gold {
        key: row.key,
        prompt: &row.prompt,
        ids: &row.ids,
        kwargs: &row.kwargs,
    }
}

/// The visible prompts, in two halves by key (even, odd). The rules were
/// written from all 200 in earlier work, so neither half is held out: these
/// figures bound what the rules do on prompts they were fitted to.
#[test]
fn extraction_recovers_the_instructions_from_the_prompts() {
    let rows = rows();
    for (name, parity) in [
        ("visible half A (even keys)", 0),
        ("visible half B (odd keys)", 1),
    ] {
        let r = recovery(
            rows.iter()
                .filter(|r| r.key.rem_euclid(2) == parity)
                .map(gold_of),
        );
        r.print(name);
        assert!(r.recall() >= 0.90, "{name}: recall {:.3}", r.recall());
        assert!(
            r.spurious_rate() <= 0.05,
            "{name}: spurious {:.3}",
            r.spurious_rate()
        );
    }
}

/// Rows of a labelled prompt set in IFEval's shape.
fn labelled(text: &str) -> Vec<(i64, String, Vec<String>, Vec<Value>)> {
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            let ids = v["instruction_id_list"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect();
            let kwargs = v["kwargs"].as_array().unwrap().clone();
            (
                v["key"].as_i64().unwrap(),
                v["prompt"].as_str().unwrap().to_string(),
                ids,
                kwargs,
            )
        })
        .collect()
}

/// 120 prompts written, for this test, by someone who saw neither the
/// rules nor IFEval's prompts (`data/ifeval_paraphrases`), in two halves by
/// key. The rules were mended from each half apart and measured on the
/// other (docs/guard-extraction.md has those held-out figures); since both
/// halves now shaped the rules, this test only keeps what they reach.
#[test]
fn extraction_recovers_paraphrased_instructions() {
    let rows = labelled(include_str!("../data/ifeval_paraphrases/paraphrases.jsonl"));
    for (name, parity) in [("paraphrases, odd keys", 1), ("paraphrases, even keys", 0)] {
        let r = recovery(rows.iter().filter(|r| r.0.rem_euclid(2) == parity).map(
            |(key, prompt, ids, kwargs)| Gold {
                key: *key,
                prompt,
                ids,
                kwargs,
            },
        ));
        r.print(name);
        assert!(r.recall() >= 0.95, "{name}: recall {:.3}", r.recall());
        assert!(
            r.spurious_rate() <= 0.03,
            "{name}: spurious {:.3}",
            r.spurious_rate()
        );
    }
}

/// IFEval's 25 instruction types as its checker describes them, filled in
/// and set after tasks of our own (`data/ifeval_descriptions/make.py`):
/// phrasings no rule was fitted to row by row.
#[test]
fn extraction_recovers_the_checkers_own_descriptions() {
    let rows = labelled(include_str!(
        "../data/ifeval_descriptions/descriptions.jsonl"
    ));
    let r = recovery(rows.iter().map(|(key, prompt, ids, kwargs)| Gold {
        key: *key,
        prompt,
        ids,
        kwargs,
    }));
    r.print("the checker's descriptions");
    assert!(r.recall() >= 0.90, "recall {:.3}", r.recall());
    assert!(
        r.spurious_rate() <= 0.05,
        "spurious {:.3}",
        r.spurious_rate()
    );
}

fn build(id: &str, kwargs: Value) -> Instruction {
    Instruction::from_id_kwargs(id, &kwargs).unwrap()
}

/// An instruction, a response that follows it and one that does not.
type Case = (Instruction, &'static str, &'static str);

/// Hand-made (instruction, passing response, failing response) for every type.
fn cases() -> Vec<Case> {
    [
        keyword_and_language_cases(),
        length_cases(),
        format_cases(),
        whole_response_cases(),
        hearth_cases(),
    ]
    .concat()
}

/// Keywords, letters and the response's language.
fn keyword_and_language_cases() -> Vec<Case> {
    use serde_json::json;
    vec![
        (
            build("keywords:existence", json!({"keywords": ["cat", "dog"]})),
            "A Cat and a DOG.",
            "A cat only.",
        ),
        (
            build(
                "keywords:frequency",
                json!({"keyword": "sun", "frequency": 2, "relation": "at least"}),
            ),
            "sun, sun",
            "sun once",
        ),
        (
            build(
                "keywords:frequency",
                json!({"keyword": "sun", "frequency": 2, "relation": "less than"}),
            ),
            "sun once",
            "sun, Sun",
        ),
        (
            build(
                "keywords:forbidden_words",
                json!({"forbidden_words": ["key"]}),
            ),
            "The monkey sat.",
            "The Key sat.",
        ),
        (
            build(
                "keywords:letter_frequency",
                json!({"letter": "q", "let_frequency": 2, "let_relation": "at least"}),
            ),
            "Quiet queen",
            "quiet",
        ),
        (
            build("language:response_language", json!({"language": "de"})),
            "Das ist ein ganz normaler deutscher Satz über das Wetter und die Stadt.",
            "This is a perfectly ordinary English sentence about the weather in town.",
        ),
    ]
}

/// Sentence, paragraph and word counts, and a paragraph's first word.
fn length_cases() -> Vec<Case> {
    use serde_json::json;
    vec![
        (
            build(
                "length_constraints:number_sentences",
                json!({"num_sentences": 3, "relation": "less than"}),
            ),
            "One. Two.",
            "One. Two. Three.",
        ),
        (
            build(
                "length_constraints:number_paragraphs",
                json!({"num_paragraphs": 2}),
            ),
            "First.\n***\nSecond.",
            "First.\n***\n***\nSecond.",
        ),
        (
            build(
                "length_constraints:number_words",
                json!({"num_words": 3, "relation": "at least"}),
            ),
            "one two three",
            "one two",
        ),
        (
            build(
                "length_constraints:nth_paragraph_first_word",
                json!({"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "Elm"}),
            ),
            "Intro here.\n\n\"Elm, trees grow.",
            "Intro here.\n\nOak trees grow.",
        ),
    ]
}

/// Placeholders, postscripts and markdown formats.
fn format_cases() -> Vec<Case> {
    use serde_json::json;
    vec![
        (
            build(
                "detectable_content:number_placeholders",
                json!({"num_placeholders": 2}),
            ),
            "[name] at [address]",
            "[name] only",
        ),
        (
            build(
                "detectable_content:postscript",
                json!({"postscript_marker": "P.S."}),
            ),
            "Hi.\n\nP.S. bye",
            "Hi. PS bye",
        ),
        (
            build(
                "detectable_content:postscript",
                json!({"postscript_marker": "P.P.S"}),
            ),
            "Hi.\np.p.s bye",
            "Hi.\nP.S. bye",
        ),
        (
            build(
                "detectable_format:number_bullet_lists",
                json!({"num_bullets": 2}),
            ),
            "* a\n- b",
            "* a\n* b\n* c",
        ),
        (
            build("detectable_format:constrained_response", json!({})),
            "My answer is no.",
            "No.",
        ),
        (
            build(
                "detectable_format:number_highlighted_sections",
                json!({"num_highlights": 2}),
            ),
            "*a* and **b**",
            "*a* and * *",
        ),
        (
            build(
                "detectable_format:multiple_sections",
                json!({"section_spliter": "Section", "num_sections": 2}),
            ),
            "Section 1\na\nSection 2\nb",
            "Section 1\na",
        ),
        (
            build("detectable_format:json_format", json!({})),
            "```json\n{\"a\": 1}\n```",
            "{a: 1}",
        ),
        (
            build("detectable_format:title", json!({})),
            "<<Joy>>\ntext",
            "<< >> text",
        ),
    ]
}

/// The response as a whole: two responses, repetition, its end, case, commas, quotes.
fn whole_response_cases() -> Vec<Case> {
    use serde_json::json;
    vec![
        (
            build("combination:two_responses", json!({})),
            "one\n******\ntwo",
            "same\n******\nsame",
        ),
        (
            build(
                "combination:repeat_prompt",
                json!({"prompt_to_repeat": "Say hi."}),
            ),
            "say hi. Hi!",
            "Hi! Say hi.",
        ),
        (
            build(
                "startend:end_checker",
                json!({"end_phrase": "Any other questions?"}),
            ),
            "Text. Any other questions?\"",
            "Any other questions? Text.",
        ),
        (
            build(
                "change_case:capital_word_frequency",
                json!({"capital_frequency": 2, "capital_relation": "at least"}),
            ),
            "NASA and ESA",
            "Nasa and esa",
        ),
        (
            build("change_case:english_capital", json!({})),
            "THIS IS AN ENGLISH SENTENCE ABOUT THE WEATHER TODAY.",
            "This is an English sentence about the weather today.",
        ),
        (
            build("change_case:english_lowercase", json!({})),
            "this is an english sentence about the weather today.",
            "This is an English sentence about the weather today.",
        ),
        (
            build("punctuation:no_comma", json!({})),
            "No commas here.",
            "One, two.",
        ),
        (
            build("startend:quotation", json!({})),
            " \"quoted\" ",
            "\"unbalanced",
        ),
    ]
}

/// Our extras: words per sentence, lines, stanzas, rhyme, starts.
fn hearth_cases() -> Vec<Case> {
    use serde_json::json;
    vec![
        (
            build(
                "hearth:words_per_sentence",
                json!({"num_words": 4, "relation": "exactly"}),
            ),
            "I like green tea. It is very good.",
            "I like tea. It is very good.",
        ),
        (
            build(
                "hearth:number_lines",
                json!({"num_lines": 3, "relation": "less than"}),
            ),
            "a\n\nb",
            "a\nb\nc",
        ),
        (
            build(
                "hearth:number_stanzas",
                json!({"num_stanzas": 2, "relation": "exactly"}),
            ),
            "a\nb\n\nc\nd",
            "a\nb\nc",
        ),
        (
            build("hearth:rhyme", json!({})),
            "The cat sat\nupon a mat\n\nI saw the light\nall through the night",
            "The cat sat\nupon the rug",
        ),
        (
            build("hearth:start_phrase", json!({"phrase": "Dear John"})),
            "**Dear John**, hello.",
            "Hello, dear John.",
        ),
        (
            build("hearth:sentence_start", json!({"prefix": "a"})),
            "Apples are red. All is well.",
            "Apples are red. Bananas are not.",
        ),
    ]
}

#[test]
fn every_type_passes_and_fails_hand_made_cases() {
    let cases = cases();
    let ids: std::collections::BTreeSet<&str> = cases.iter().map(|(i, _, _)| i.id()).collect();
    assert_eq!(ids.len(), hearth_guard::verify::INSTRUCTION_IDS.len());
    for (instruction, pass, fail) in &cases {
        assert!(
            check(instruction, pass),
            "{instruction:?} should pass {pass:?}"
        );
        assert!(
            !check(instruction, fail),
            "{instruction:?} should fail {fail:?}"
        );
        // The kwargs round-trip.
        let again = Instruction::from_id_kwargs(instruction.id(), &instruction.kwargs()).unwrap();
        assert_eq!(&again, instruction);
    }
}

#[test]
fn loose_mode_forgives_a_first_line_and_asterisks() {
    let quotation = build("startend:quotation", serde_json::json!({}));
    let response = "Sure, here it is:\n\"quoted text\"";
    assert!(!check(&quotation, response));
    assert!(check_loose(&quotation, response));
    let ending = build(
        "startend:end_checker",
        serde_json::json!({"end_phrase": "The end."}),
    );
    assert!(check_loose(&ending, "Story. **The end.**"));
}

#[test]
fn bad_instructions_are_errors_naming_them() {
    use serde_json::json;
    let unknown = Instruction::from_id_kwargs("keywords:nonsense", &json!({})).unwrap_err();
    assert!(unknown.to_string().contains("keywords:nonsense"));
    for (id, kwargs) in [
        (
            "length_constraints:number_words",
            json!({"num_words": "many", "relation": "at least"}),
        ),
        (
            "length_constraints:number_words",
            json!({"num_words": 5, "relation": "about"}),
        ),
        (
            "length_constraints:number_words",
            json!({"num_words": -5, "relation": "at least"}),
        ),
        (
            "keywords:letter_frequency",
            json!({"letter": "ab", "let_frequency": 1, "let_relation": "at least"}),
        ),
        ("keywords:existence", json!({"keywords": []})),
        ("punctuation:no_comma", json!({"extra": 1})),
        ("detectable_format:title", json!([1, 2])),
        (
            "length_constraints:nth_paragraph_first_word",
            json!({"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"}),
        ),
    ] {
        let err = Instruction::from_id_kwargs(id, &kwargs).unwrap_err();
        assert!(err.to_string().contains(id), "{err}");
    }
    // Nulls for unused arguments, as some exports write them, are fine.
    let ok = Instruction::from_id_kwargs(
        "punctuation:no_comma",
        &json!({"num_words": null, "keywords": null}),
    );
    assert_eq!(ok, Ok(Instruction::NoComma));
}

#[test]
fn rows_come_out_in_the_official_shape() {
    let inputs: Vec<InputRow> = parse_jsonl(
        r#"{"key": 1, "prompt": "Say hi without commas.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
{"key": 2, "prompt": "Answer in all lowercase letters.", "instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]}"#,
    )
    .unwrap();
    let responses: Vec<ResponseRow> = parse_jsonl(
        r#"{"prompt": "Say hi without commas.", "response": "Hi, there."}
{"prompt": "Answer in all lowercase letters.", "response": "Sure:\nthis is an english answer about the weather."}"#,
    )
    .unwrap();
    let strict = evaluate(&inputs, &responses, Mode::Strict, false).unwrap();
    assert_eq!(strict[0].follow_instruction_list, vec![false]);
    assert!(!strict[1].follow_all_instructions);
    let loose = evaluate(&inputs, &responses, Mode::Loose, false).unwrap();
    assert!(loose[1].follow_all_instructions);
    let line = hearth_guard::verify::rows::to_jsonl(&strict);
    let first: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    for key in [
        "prompt",
        "instruction_id_list",
        "follow_instruction_list",
        "follow_all_instructions",
        "response",
    ] {
        assert!(first.get(key).is_some(), "{key}");
    }
    assert!(first.get("extracted_kwargs").is_none());
    let extracted = evaluate(&inputs, &responses, Mode::Strict, true).unwrap();
    assert_eq!(
        extracted[0].extracted_instruction_id_list.as_deref(),
        Some(&["punctuation:no_comma".to_string()][..])
    );
    assert_eq!(
        extracted[1].extracted_kwargs.as_ref().map(Vec::len),
        Some(1)
    );
    let missing = evaluate(&inputs, &responses[..1], Mode::Strict, false).unwrap_err();
    assert!(missing.to_string().contains("Answer in all lowercase"));
}

#[test]
fn the_official_rows_evaluate_end_to_end() {
    let text = include_str!("../data/ifeval_visible.jsonl");
    let inputs: Vec<InputRow> = parse_jsonl(text).unwrap();
    let responses: Vec<ResponseRow> = parse_jsonl(text).unwrap();
    let strict = evaluate(&inputs, &responses, Mode::Strict, false).unwrap();
    let expected: Vec<Vec<bool>> = rows().into_iter().map(|r| r.strict).collect();
    let agreeing_rows = strict
        .iter()
        .zip(&expected)
        .filter(|(o, e)| &o.follow_instruction_list == *e)
        .count();
    assert!(agreeing_rows >= 198, "{agreeing_rows}/200 rows agree");
}

#[test]
fn mt_bench_phrasings_are_extracted() {
    let found = extract("Now, do the same task again but only use four-word sentences.");
    assert_eq!(
        found,
        vec![build(
            "hearth:words_per_sentence",
            serde_json::json!({"num_words": 4, "relation": "exactly"})
        )]
    );
    let found = extract("Rewrite your previous answer as a poem in fewer than 10 lines.");
    assert!(found.contains(&build(
        "hearth:number_lines",
        serde_json::json!({"num_lines": 10, "relation": "less than"})
    )));
    let found = extract("Write a poem with 3 stanzas about the sea.");
    assert!(found.contains(&build(
        "hearth:number_stanzas",
        serde_json::json!({"num_stanzas": 3, "relation": "exactly"})
    )));
    let found = extract("Rewrite your previous response. Start every sentence with the letter A.");
    assert!(found.contains(&build(
        "hearth:sentence_start",
        serde_json::json!({"prefix": "A"})
    )));
    let found = extract("Each sentence must start with \"Today\".");
    assert!(found.contains(&build(
        "hearth:sentence_start",
        serde_json::json!({"prefix": "Today"})
    )));
    let found = extract("Write it in rhyming couplets.");
    assert!(found.contains(&Instruction::Rhyme));
    let found = extract("Begin your reply with \"Dear committee\" and keep it short.");
    assert!(found.contains(&build(
        "hearth:start_phrase",
        serde_json::json!({"phrase": "Dear committee"})
    )));
    let verdict = hearth_guard::verify::verdict(
        &build(
            "hearth:words_per_sentence",
            serde_json::json!({"num_words": 4, "relation": "exactly"}),
        ),
        "I love green tea. It tastes rather nice today.",
    );
    assert!(!verdict.ok);
    assert!(
        verdict.detail.contains("sentence 2 has 5 words"),
        "{}",
        verdict.detail
    );
}

#[test]
fn hostile_inputs_end_in_bounded_time_without_panics() {
    use std::time::{Duration, Instant};
    let start = Instant::now();
    // 500 constraints in one prompt.
    let mut prompt = String::new();
    for i in 0..500 {
        prompt.push_str(&format!("Do not use the word \"w{i}\". "));
        prompt.push_str(&format!("Include the keyword \"k{i}\". "));
        prompt.push_str(&format!(
            "The letter {} should appear at least {i} times. ",
            (b'a' + (i % 26) as u8) as char
        ));
        prompt.push_str(&format!("Answer with at least {i} words. "));
    }
    let found = extract(&prompt);
    assert!(found.len() <= hearth_guard::verify::extract::MAX_INSTRUCTIONS);
    for instruction in &found {
        if let Instruction::ForbiddenWords { forbidden_words } = instruction {
            assert!(forbidden_words.len() <= hearth_guard::verify::extract::MAX_KEYWORDS);
        }
    }
    // Empty, huge (1 MB) and odd Unicode responses against everything.
    let huge: String = "Word, word. *x* [y] <<t>> ******\n".repeat(1 << 15);
    assert!(huge.len() >= 1 << 20);
    let weird = "\u{0}\u{200b}\u{202e}🙂👍🏽 ﷽ é\u{301} İstanbul ß ǅ \u{FEFF}\r\n\r\n***\n\"";
    let responses = [
        "",
        "   \n\t",
        huge.as_str(),
        weird,
        "\"",
        "*",
        "**",
        "<<>>",
        "P.",
        "...",
        "1.",
    ];
    let mut instructions: Vec<Instruction> = cases().into_iter().map(|(i, _, _)| i).collect();
    instructions.extend(found);
    for instruction in &instructions {
        for response in responses {
            let strict = check(instruction, response);
            let _ = check_loose(instruction, response);
            let _ = hearth_guard::verify::repair(instruction, response);
            if response.trim().is_empty() {
                assert!(!strict, "{instruction:?} on a blank response");
            }
        }
    }
    for prompt in ["", weird, &huge[..1000]] {
        let _ = extract(prompt);
    }
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
}
