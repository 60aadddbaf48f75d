//! Single-answer grading, as FastChat's `gen_judgment.py --mode single`
//! does it, through any OpenAI-compatible endpoint (a local `hearth serve`
//! included): its prompts (`single-v1`; `single-math-v1` with GPT-4's
//! reference answer for math, reasoning and coding; their multi-turn forms
//! for turn 2), its rating parse (`[[n]]`, then `[n]`, else -1), retries
//! with backoff, several requests at once, and the judgment file itself as
//! the cache: a re-run asks only for what is missing.

use crate::fastchat::{self, AnswerRow, FormatError, JudgePrompt, JudgmentRow, Question};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// What FastChat writes as the judgment when the judge could not be asked.
pub const ERROR_JUDGMENT: &str = "$ERROR$";

/// Why judging could not run.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    /// An answer or judgment file is unreadable or malformed.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// Writing the judgment file failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// An answer row names a question that is not in MT-Bench.
    #[error("{file}: question {qid} is not an MT-Bench question")]
    UnknownQuestion {
        /// The answers file.
        file: String,
        /// The id.
        qid: u32,
    },
}

/// How to reach the judge.
#[derive(Debug, Clone)]
pub struct JudgeConfig {
    /// The API base, e.g. `http://127.0.0.1:8080/v1` (`/chat/completions`
    /// is appended).
    pub url: String,
    /// The judge model's name (sent as `model`, and the file's name).
    pub model: String,
    /// A bearer key, if the endpoint needs one.
    pub api_key: Option<String>,
    /// The output directory: `model_judgment/MODEL_single.jsonl` in it.
    pub out: PathBuf,
    /// Requests at once.
    pub parallel: usize,
    /// Attempts per judgment before it is written as an error.
    pub attempts: u32,
    /// Time one request may take.
    pub timeout: Duration,
    /// First wait before a retry (doubled each time).
    pub backoff: Duration,
    /// Most tokens of a judgment (FastChat: 2048). A small local judge
    /// that never stops on its own is worth a lower cap; the rating comes
    /// first in FastChat's prompt anyway only if the judge follows it.
    pub max_tokens: usize,
    /// Hold each judgment to [`rating_regex`] (the endpoint must accept a
    /// `regex` field, as `hearth serve` and llama.cpp's server do): a
    /// short explanation, then `Rating: [[n]]`. A small local judge that
    /// would otherwise never write a rating then always does; the number is
    /// still the model's choice.
    pub force_rating: bool,
}

/// The longest rating line `Rating: [[10]]`, in characters (so in tokens
/// at most: every token the constraint lets through writes one or more).
const RATING_CHARS: usize = 14;

/// The form [`JudgeConfig::force_rating`] holds a judgment to: an
/// explanation without a `[`, then FastChat's `Rating: [[n]]` with n in
/// 1..=10. The explanation is at most 200 characters, and fewer when
/// `max_tokens` would not leave room for the rating after it (a token writes
/// at least one character, so the whole form always fits): a judge cut off
/// mid-explanation would give no rating at all.
pub fn rating_regex(max_tokens: usize) -> String {
    let explanation = max_tokens.saturating_sub(RATING_CHARS).min(200);
    format!(r"[^\[]{{0,{explanation}}}Rating: \[\[([1-9]|10)\]\]")
}

/// What a judging run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JudgeSummary {
    /// Judgments already in the file, not asked again.
    pub cached: usize,
    /// Judgments asked for and written.
    pub judged: usize,
    /// Of those, judge replies without a rating (score -1).
    pub no_rating: usize,
    /// Judgments that failed after every attempt (score -1, `$ERROR$`; a
    /// re-run asks for them again).
    pub failed: usize,
    /// HTTP requests made (retries included).
    pub requests: usize,
    /// The last failure, to tell the user why.
    pub last_error: Option<String>,
    /// What an earlier run's crash left at the judgment file's end and how
    /// it was repaired ([`fastchat::describe_tail`] says it in words).
    pub tail: fastchat::Tail,
}

/// The judgment file for `cfg`.
pub fn judgment_path(cfg: &JudgeConfig) -> PathBuf {
    cfg.out
        .join("model_judgment")
        .join(format!("{}_single.jsonl", cfg.model.replace('/', "_")))
}

/// FastChat's rating parse: `[[n]]`, else `[n]`, else -1.
pub fn parse_rating(judgment: &str) -> f64 {
    fn find(text: &str, open: &str, close: &str) -> Option<f64> {
        let mut from = 0;
        while let Some(i) = text[from..].find(open) {
            let start = from + i + open.len();
            let rest = &text[start..];
            let digits: usize = rest
                .char_indices()
                .take_while(|(_, c)| c.is_ascii_digit())
                .map(|(i, c)| i + c.len_utf8())
                .last()
                .unwrap_or(0);
            if digits > 0 {
                let mut end = digits;
                // `\d+\.?\d*`
                if rest[end..].starts_with('.') {
                    end += 1;
                    end += rest[end..].chars().take_while(char::is_ascii_digit).count();
                }
                if rest[end..].starts_with(close) {
                    if let Ok(v) = rest[..end].parse::<f64>() {
                        return Some(v);
                    }
                }
            }
            from = start;
        }
        None
    }
    find(judgment, "[[", "]]")
        .or_else(|| find(judgment, "[", "]"))
        .unwrap_or(-1.0)
}

/// Python's `str.format` over named fields, in one pass (an answer that
/// contains `{question}` is not substituted again); `{{` and `}}` are
/// braces.
fn format_template(template: &str, fields: &BTreeMap<&str, &str>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        if let Some(end) = tail.find('}').filter(|_| tail.starts_with('{')) {
            if let Some(v) = fields.get(&tail[1..end]) {
                out.push_str(v);
                rest = &tail[end + 1..];
                continue;
            }
        }
        out.push_str(&tail[..1]);
        rest = &tail[1..];
    }
    out.push_str(rest);
    out
}

/// One judgment to make.
#[derive(Debug, Clone)]
struct Task {
    question_id: u32,
    model: String,
    turn: u32,
    prompt: String,
    system: String,
    user: String,
}

/// The judgments `answers` need, with FastChat's prompts.
fn tasks(
    answers: &[(String, Vec<AnswerRow>)],
    questions: &[Question],
    prompts: &[JudgePrompt],
    references: &[AnswerRow],
) -> Result<Vec<Task>, JudgeError> {
    let prompt = |name: &str| prompts.iter().find(|p| p.name == name);
    let mut out = Vec::new();
    for (file, rows) in answers {
        for row in rows {
            let q = questions
                .iter()
                .find(|q| q.question_id == row.question_id)
                .ok_or_else(|| JudgeError::UnknownQuestion {
                    file: file.clone(),
                    qid: row.question_id,
                })?;
            let needs_ref = fastchat::NEED_REF_CATS.contains(&q.category.as_str());
            let reference = references
                .iter()
                .find(|r| r.question_id == q.question_id)
                .and_then(|r| r.choices.first())
                .map(|c| c.turns.clone())
                .or_else(|| q.reference.clone());
            let turns = row
                .choices
                .first()
                .map(|c| c.turns.clone())
                .unwrap_or_default();
            for turn in 1..=q.turns.len().min(turns.len()).min(2) as u32 {
                let (name, fields): (&str, BTreeMap<&str, &str>) = {
                    let r = |i: usize| {
                        reference
                            .as_ref()
                            .and_then(|r| r.get(i))
                            .map_or("", String::as_str)
                    };
                    let mut f = BTreeMap::new();
                    if turn == 1 {
                        f.insert("question", q.turns[0].as_str());
                        f.insert("answer", turns[0].as_str());
                    } else {
                        f.insert("question_1", q.turns[0].as_str());
                        f.insert("question_2", q.turns[1].as_str());
                        f.insert("answer_1", turns[0].as_str());
                        f.insert("answer_2", turns[1].as_str());
                    }
                    if needs_ref {
                        f.insert("ref_answer_1", r(0));
                        f.insert("ref_answer_2", r(1));
                    }
                    let name = match (needs_ref, turn) {
                        (true, 1) => "single-math-v1",
                        (true, _) => "single-math-v1-multi-turn",
                        (false, 1) => "single-v1",
                        (false, _) => "single-v1-multi-turn",
                    };
                    (name, f)
                };
                let Some(p) = prompt(name) else { continue };
                out.push(Task {
                    question_id: q.question_id,
                    model: row.model_id.clone(),
                    turn,
                    prompt: name.to_string(),
                    system: p.system_prompt.clone(),
                    user: format_template(&p.prompt_template, &fields),
                });
            }
        }
    }
    Ok(out)
}

/// Ask the judge once: its text, or why not (and whether a retry may help).
fn ask(agent: &ureq::Agent, cfg: &JudgeConfig, task: &Task) -> Result<String, (String, bool)> {
    let url = format!("{}/chat/completions", cfg.url.trim_end_matches('/'));
    let body = json!({
        "model": cfg.model,
        "messages": [
            {"role": "system", "content": task.system},
            {"role": "user", "content": task.user},
        ],
        "temperature": 0,
        "max_tokens": cfg.max_tokens,
    });
    let mut body = body;
    if cfg.force_rating {
        body["regex"] = json!(rating_regex(cfg.max_tokens));
    }
    let mut req = agent.post(&url).set("Content-Type", "application/json");
    if let Some(key) = &cfg.api_key {
        req = req.set("Authorization", &format!("Bearer {key}"));
    }
    match req.send_string(&body.to_string()) {
        Ok(resp) => {
            let text = resp
                .into_string()
                .map_err(|e| (format!("cannot read the reply: {e}"), true))?;
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| (format!("the reply is not JSON: {e}"), true))?;
            v["choices"][0]["message"]["content"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| {
                    (
                        "the reply has no choices[0].message.content".to_string(),
                        true,
                    )
                })
        }
        Err(ureq::Error::Status(code, resp)) => {
            let detail = resp.into_string().unwrap_or_default();
            let detail: String = detail.chars().take(200).collect();
            // Rate limits and server errors pass; other client errors won't.
            let retry = code == 429 || code >= 500 || code == 408;
            Err((format!("HTTP {code}: {detail}"), retry))
        }
        Err(ureq::Error::Transport(t)) => Err((format!("{url}: {t}"), true)),
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A judgment's identity in the judgment file: question, model, turn and
/// prompt name.
type JudgmentKey = (u32, String, u32, String);

/// The judgments already in the file at `path` (error rows excepted: those
/// are asked for again).
fn judged_already(path: &Path) -> Result<HashSet<JudgmentKey>, JudgeError> {
    if !path.exists() {
        return Ok(HashSet::new());
    }
    Ok(fastchat::read_jsonl::<JudgmentRow>(path)?
        .0
        .into_iter()
        .filter(|r| r.judgment != ERROR_JUDGMENT)
        .map(|r| {
            let prompt = r.judge.get(1).cloned().unwrap_or_default();
            (r.question_id, r.model, r.turn, prompt)
        })
        .collect())
}

/// Asks the judge about `task` up to `cfg.attempts` times, backing off
/// between retryable failures: the judgment or the last failure, and the
/// requests made.
fn ask_with_retries(
    agent: &ureq::Agent,
    cfg: &JudgeConfig,
    task: &Task,
) -> (Result<String, String>, usize) {
    let mut wait = cfg.backoff;
    let mut outcome = Err(String::new());
    let mut requests = 0;
    for attempt in 0..cfg.attempts.max(1) {
        requests += 1;
        match ask(agent, cfg, task) {
            Ok(text) => {
                outcome = Ok(text);
                break;
            }
            Err((why, retry)) => {
                outcome = Err(why);
                if !retry || attempt + 1 == cfg.attempts.max(1) {
                    break;
                }
                std::thread::sleep(wait);
                wait = wait.saturating_mul(2);
            }
        }
    }
    (outcome, requests)
}

/// The row written for `task`: the judge's text and its rating, or
/// [`ERROR_JUDGMENT`] and -1 when every attempt failed.
fn judgment_row(cfg: &JudgeConfig, task: &Task, outcome: &Result<String, String>) -> JudgmentRow {
    let (judgment, score) = match outcome {
        Ok(text) => (text.clone(), parse_rating(text)),
        Err(_) => (ERROR_JUDGMENT.to_string(), -1.0),
    };
    JudgmentRow {
        question_id: task.question_id,
        model: task.model.clone(),
        judge: vec![cfg.model.clone(), task.prompt.clone()],
        user_prompt: task.user.clone(),
        judgment,
        score,
        turn: task.turn,
        tstamp: now(),
    }
}

impl JudgeSummary {
    /// Counts one written judgment (`score` is its row's) and the requests
    /// it took; the judgments done so far.
    fn count(&mut self, requests: usize, outcome: Result<String, String>, score: f64) -> usize {
        self.requests += requests;
        match outcome {
            Ok(_) => {
                self.judged += 1;
                if score < 0.0 {
                    self.no_rating += 1;
                }
            }
            Err(why) => {
                self.failed += 1;
                self.last_error = Some(why);
            }
        }
        self.judged + self.failed
    }
}

/// What the judging threads share: the tasks left, the judgment file, the
/// summary so far and the first write failure, which ends its thread.
struct Judging<'a> {
    cfg: &'a JudgeConfig,
    agent: ureq::Agent,
    queue: Mutex<std::slice::Iter<'a, Task>>,
    total: usize,
    file: Mutex<File>,
    summary: Mutex<JudgeSummary>,
    write_error: Mutex<Option<std::io::Error>>,
    progress: &'a (dyn Fn(usize, usize) + Sync),
}

impl Judging<'_> {
    /// One thread: judges tasks until none is left or a write fails.
    fn work(&self) {
        loop {
            let task = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                q.next()
            };
            let Some(task) = task else { return };
            let (outcome, requests) = ask_with_retries(&self.agent, self.cfg, task);
            let row = judgment_row(self.cfg, task, &outcome);
            if let Err(e) = append(&self.file, &row) {
                *self.write_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                return;
            }
            let done = self
                .summary
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .count(requests, outcome, row.score);
            (self.progress)(done, self.total);
        }
    }
}

/// Grade every turn of every answer in `answer_files`, skipping what the
/// judgment file already holds; `progress(done, total)` after each.
pub fn judge(
    answer_files: &[PathBuf],
    cfg: &JudgeConfig,
    progress: impl Fn(usize, usize) + Sync,
) -> Result<JudgeSummary, JudgeError> {
    let mut answers = Vec::new();
    for f in answer_files {
        let (rows, _torn) = fastchat::read_jsonl::<AnswerRow>(f)?;
        answers.push((f.display().to_string(), rows));
    }
    let questions = fastchat::questions();
    let all = tasks(
        &answers,
        &questions,
        &fastchat::judge_prompts(),
        &fastchat::reference_answers(),
    )?;
    let path = judgment_path(cfg);
    let io = |source| JudgeError::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    // A torn last line (a crash mid-write) is cut off before anything is
    // appended after it; its judgment is asked for again.
    let tail = fastchat::repair_jsonl::<JudgmentRow>(&path)?;
    let done = judged_already(&path)?;
    let (cached, todo): (Vec<Task>, Vec<Task>) = all
        .into_iter()
        .partition(|t| done.contains(&(t.question_id, t.model.clone(), t.turn, t.prompt.clone())));
    let file = durable::open_append(&path).map_err(io)?;
    let judging = Judging {
        cfg,
        agent: ureq::AgentBuilder::new().timeout(cfg.timeout).build(),
        queue: Mutex::new(todo.iter()),
        total: todo.len(),
        file: Mutex::new(file),
        summary: Mutex::new(JudgeSummary {
            cached: cached.len(),
            tail,
            ..JudgeSummary::default()
        }),
        write_error: Mutex::new(None),
        progress: &progress,
    };
    std::thread::scope(|scope| {
        for _ in 0..cfg.parallel.max(1) {
            let judging = &judging;
            scope.spawn(move || judging.work());
        }
    });
    let Judging {
        summary,
        write_error,
        ..
    } = judging;
    if let Some(e) = write_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(io(e));
    }
    Ok(summary.into_inner().unwrap_or_else(|e| e.into_inner()))
}

fn append(file: &Mutex<File>, row: &JudgmentRow) -> std::io::Result<()> {
    let mut line = serde_json::to_string(row).map_err(std::io::Error::other)?;
    line.push('\n');
    let f = file.lock().unwrap_or_else(|e| e.into_inner());
    durable::append_line(&f, line.as_bytes())
}

/// Whether `path` can be read as answers (for early, clear errors).
pub fn check_answers(path: &Path) -> Result<usize, JudgeError> {
    Ok(fastchat::read_jsonl::<AnswerRow>(path)?.0.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratings_parse_as_fastchat_does() {
        assert_eq!(parse_rating("Good. Rating: [[7]]"), 7.0);
        // The forced form fits the token budget: a judge at 128 tokens may
        // explain in 114 characters, one with room in FastChat's 200.
        assert_eq!(rating_regex(128), r"[^\[]{0,114}Rating: \[\[([1-9]|10)\]\]");
        assert_eq!(
            rating_regex(2048),
            r"[^\[]{0,200}Rating: \[\[([1-9]|10)\]\]"
        );
        assert_eq!(rating_regex(4), r"[^\[]{0,0}Rating: \[\[([1-9]|10)\]\]");
        assert_eq!(parse_rating("Rating: [[8.5]]"), 8.5);
        assert_eq!(parse_rating("I give it [6] overall"), 6.0);
        assert_eq!(parse_rating("[[x]] then [[3]]"), 3.0);
        assert_eq!(parse_rating("no rating here"), -1.0);
        assert_eq!(parse_rating("[[]]"), -1.0);
        // `[[n]]` wins over an earlier `[n]`.
        assert_eq!(parse_rating("[2] ... [[9]]"), 9.0);
    }

    #[test]
    fn templates_fill_in_one_pass() {
        let mut f = BTreeMap::new();
        f.insert("question", "Q {answer}");
        f.insert("answer", "A");
        assert_eq!(
            format_template("[{question}] {answer} {{x}} {unknown}", &f),
            "[Q {answer}] A {x} {unknown}"
        );
    }

    #[test]
    fn prompts_follow_the_category() {
        let questions = fastchat::questions();
        let row = |qid: u32| AnswerRow {
            question_id: qid,
            answer_id: String::new(),
            model_id: "m".into(),
            choices: vec![fastchat::Choice {
                index: 0,
                turns: vec!["one".into(), "two".into()],
            }],
            tstamp: 0.0,
            extra: Default::default(),
        };
        // 81 is writing, 111 is math.
        let t = tasks(
            &[("f".into(), vec![row(81), row(111)])],
            &questions,
            &fastchat::judge_prompts(),
            &fastchat::reference_answers(),
        )
        .unwrap();
        let names: Vec<&str> = t.iter().map(|t| t.prompt.as_str()).collect();
        assert_eq!(
            names,
            [
                "single-v1",
                "single-v1-multi-turn",
                "single-math-v1",
                "single-math-v1-multi-turn"
            ]
        );
        assert!(t[2].user.contains("[The Start of Reference Answer]"));
        assert!(t[2].user.contains("To find the area of the triangle"));
        assert!(t[1].user.contains("two"));
    }
}
