//! `hearth eval grade`: a local web page for blind human grading of
//! MT-Bench answers, written as FastChat single-answer judgments.
//!
//! Every (question, turn, model) of the answer files is one item. Items are
//! shuffled by a seed and the page never learns which model wrote an answer:
//! it only sees an opaque item id that the server maps back. Each rating is
//! appended to the judgment file as one FastChat [`JudgmentRow`] (judge
//! `["human:NAME", "single-v1"]`, or `"single-v1-multi-turn"` for turn 2),
//! flushed and fsynced before the page moves on, so a crash loses nothing and
//! a restart skips what is already graded.
//!
//! The HTTP API (all JSON, on 127.0.0.1 only):
//! - `GET /` — the page ([`PAGE`]).
//! - `GET /api/next` — the next ungraded item ([`NextItem`]), or
//!   `{"done": true, "graded": N, "total": N}`.
//! - `POST /api/grade` with `{"item": ID, "score": 1..=10, "note": "..."}` —
//!   saves the rating and answers like `GET /api/next`. A score that is not
//!   an integer from 1 to 10, or a body that is not such JSON, is `400`; an
//!   unknown item is `404`; an item already graded (another tab, a double
//!   submit) is `409` and nothing is written, so the file never holds two
//!   ratings of one item by one grader.

use crate::fastchat::{self, AnswerRow, FormatError, JudgmentRow, Question};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

/// The page: one HTML file, inline CSS and JS, no external assets. Its
/// `{{NONCE}}` is replaced per response with a fresh CSP nonce.
pub const PAGE: &str = include_str!("grade/page.html");

/// The port `hearth eval grade` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 8788;

/// FastChat's prompt name for turn-1 single-answer grading.
pub const PROMPT_TURN1: &str = "single-v1";
/// FastChat's prompt name for turn-2 single-answer grading.
pub const PROMPT_TURN2: &str = "single-v1-multi-turn";

/// What to grade and where to write it.
#[derive(Debug, Clone)]
pub struct GradeConfig {
    /// FastChat `model_answer/*.jsonl` files, one per model. As in FastChat,
    /// a file's name without `.jsonl` is the model's name in the judgments.
    pub answers: Vec<PathBuf>,
    /// The judgment file rows are appended to (created, with its folder, if
    /// missing); the grades already in it are skipped.
    pub out: PathBuf,
    /// The grader's name; rows get judge `["human:NAME", prompt]`.
    pub grader: String,
    /// Orders the items; the same seed and files give the same order.
    pub seed: u64,
    /// The port on 127.0.0.1; 0 picks a free one (see [`Running::addr`]).
    pub port: u16,
}

impl GradeConfig {
    /// A config with the defaults the CLI uses: the judgment file from
    /// [`default_out`], the grader from [`default_grader`], seed 0 and
    /// [`DEFAULT_PORT`].
    pub fn new(answers: Vec<PathBuf>) -> Self {
        let out = default_out(&answers);
        GradeConfig {
            answers,
            out,
            grader: default_grader(),
            seed: 0,
            port: DEFAULT_PORT,
        }
    }
}

/// Where judgments go when `--out` is not given: FastChat's layout
/// (`…/model_answer/X.jsonl` → `…/model_judgment/human_single.jsonl`) when
/// the first answer file sits in a `model_answer` folder, else
/// `human_single.jsonl` beside it.
pub fn default_out(answers: &[PathBuf]) -> PathBuf {
    let dir = answers
        .first()
        .and_then(|a| a.parent())
        .map(Path::to_path_buf)
        .unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "model_answer") {
        if let Some(root) = dir.parent() {
            return root.join("model_judgment").join("human_single.jsonl");
        }
    }
    dir.join("human_single.jsonl")
}

/// The grader's name when `--grader` is not given: `$USER`, else `anonymous`.
pub fn default_grader() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "anonymous".to_string())
}

/// Why grading could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum GradeError {
    /// An answer or judgment file is unreadable or has a bad line.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A file could not be opened or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The answers cannot be graded as given.
    #[error("{0}")]
    Input(String),
    /// The port could not be bound.
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for.
        port: u16,
        /// Why.
        source: std::io::Error,
    },
    /// The server's runtime failed.
    #[error("grading server: {0}")]
    Server(String),
}

/// One thing to grade: a model's answer to one turn of one question.
#[derive(Debug, Clone)]
struct Item {
    /// Opaque to the page: `"i"` and the item's place in the shuffled order,
    /// which says nothing about the model.
    id: String,
    question_id: u32,
    turn: u32,
    /// Never sent to the page.
    model: String,
}

/// A model's answers, by question id.
type Answers = HashMap<u32, Vec<String>>;

/// Everything the handlers share, behind one lock: grading is one person at
/// human speed, so a lock held across the fsync costs nothing.
struct Grading {
    items: Vec<Item>,
    by_id: HashMap<String, usize>,
    graded: HashSet<usize>,
    questions: HashMap<u32, Question>,
    references: HashMap<u32, Vec<String>>,
    answers: HashMap<String, Answers>,
    judge: String,
    out: PathBuf,
}

/// The next item as the page receives it: no model name, no answer id.
#[derive(Debug, Serialize)]
pub struct NextItem {
    /// Always false (`{"done": true, …}` is sent when nothing is left).
    pub done: bool,
    /// The opaque id to send back with the grade.
    pub item: String,
    /// Items graded so far (by this grader, this file included).
    pub graded: usize,
    /// All items.
    pub total: usize,
    /// The MT-Bench question id.
    pub question_id: u32,
    /// Its category.
    pub category: String,
    /// 1 or 2.
    pub turn: u32,
    /// The user's message of this turn.
    pub question: String,
    /// For turn 2: the turn-1 question and this model's turn-1 answer.
    pub context: Option<Context>,
    /// The answer to grade.
    pub answer: String,
    /// The reference answer for this turn (math, reasoning, coding).
    pub reference: Option<String>,
}

/// The conversation before a turn-2 answer.
#[derive(Debug, Serialize)]
pub struct Context {
    /// The turn-1 question.
    pub question: String,
    /// The same model's turn-1 answer.
    pub answer: String,
}

/// Reads the answer files and the judgment file and lays out the items.
fn load(cfg: &GradeConfig) -> Result<Grading, GradeError> {
    let grader = cfg.grader.trim();
    if grader.is_empty() {
        return Err(GradeError::Input("the grader's name is empty".into()));
    }
    if cfg.answers.is_empty() {
        return Err(GradeError::Input("no answer files given".into()));
    }
    let questions: HashMap<u32, Question> = fastchat::questions()
        .into_iter()
        .map(|q| (q.question_id, q))
        .collect();
    let references = reference_turns(&questions);
    let answers = read_answers(&cfg.answers, &questions)?;
    let (items, by_id) = lay_out_items(&answers, &questions, cfg.seed);
    let judge = format!("human:{grader}");
    let graded = already_graded(&cfg.out, &judge, &items)?;
    Ok(Grading {
        items,
        by_id,
        graded,
        questions,
        references,
        answers: answers.into_iter().collect(),
        judge,
        out: cfg.out.clone(),
    })
}

/// Question id → the reference answer's turns: FastChat's reference file
/// first, then the references the question file carries itself.
fn reference_turns(questions: &HashMap<u32, Question>) -> HashMap<u32, Vec<String>> {
    let mut references: HashMap<u32, Vec<String>> = HashMap::new();
    for r in fastchat::reference_answers() {
        if let Some(c) = r.choices.into_iter().next() {
            references.insert(r.question_id, c.turns);
        }
    }
    for q in questions.values() {
        if let Some(r) = &q.reference {
            references.entry(q.question_id).or_insert_with(|| r.clone());
        }
    }
    references
}

/// Model name → its answers, one file per model; a second file for a model
/// or a question that is not MT-Bench's is an input error.
fn read_answers(
    paths: &[PathBuf],
    questions: &HashMap<u32, Question>,
) -> Result<BTreeMap<String, Answers>, GradeError> {
    // Ordered by model name so the shuffle depends only on the seed and the
    // files' contents, not on the order they were named on the command line.
    let mut answers: BTreeMap<String, Answers> = BTreeMap::new();
    for path in paths {
        let model = model_name(path)?;
        let (rows, _torn) = fastchat::read_jsonl::<AnswerRow>(path)?;
        if answers.contains_key(&model) {
            return Err(GradeError::Input(format!(
                "{}: a second answer file for model {model}",
                path.display()
            )));
        }
        let mut by_q = Answers::new();
        for row in rows {
            if !questions.contains_key(&row.question_id) {
                return Err(GradeError::Input(format!(
                    "{}: question_id {} is not an MT-Bench question",
                    path.display(),
                    row.question_id
                )));
            }
            let turns = row.choices.into_iter().next().map(|c| c.turns);
            // A later row for the same question replaces the earlier one,
            // as FastChat's loader does.
            by_q.insert(row.question_id, turns.unwrap_or_default());
        }
        answers.insert(model, by_q);
    }
    Ok(answers)
}

/// One item per answered turn (at most two per question), shuffled by
/// `seed`, with ids `i0`, `i1`… in the shuffled order, and the index of
/// each id.
fn lay_out_items(
    answers: &BTreeMap<String, Answers>,
    questions: &HashMap<u32, Question>,
    seed: u64,
) -> (Vec<Item>, HashMap<String, usize>) {
    let mut items = Vec::new();
    for (model, by_q) in answers {
        let mut qids: Vec<&u32> = by_q.keys().collect();
        qids.sort();
        for qid in qids {
            let n_answer = by_q.get(qid).map_or(0, Vec::len);
            let n_question = questions.get(qid).map_or(0, |q| q.turns.len());
            for turn in 1..=n_answer.min(n_question).min(2) {
                items.push(Item {
                    id: String::new(),
                    question_id: *qid,
                    turn: turn as u32,
                    model: model.clone(),
                });
            }
        }
    }
    shuffle(&mut items, seed);
    let mut by_id = HashMap::new();
    for (i, item) in items.iter_mut().enumerate() {
        item.id = format!("i{i}");
        by_id.insert(item.id.clone(), i);
    }
    (items, by_id)
}

/// The items this judge already graded in the judgment file `out`, when
/// there is one: what a restarted session skips.
fn already_graded(out: &Path, judge: &str, items: &[Item]) -> Result<HashSet<usize>, GradeError> {
    let mut graded = HashSet::new();
    if out.exists() {
        let (rows, _torn) = fastchat::read_jsonl::<JudgmentRow>(out)?;
        let done: HashSet<(u32, u32, String)> = rows
            .into_iter()
            .filter(|r| r.judge.first().map(String::as_str) == Some(judge))
            .map(|r| (r.question_id, r.turn, r.model))
            .collect();
        for (i, item) in items.iter().enumerate() {
            if done.contains(&(item.question_id, item.turn, item.model.clone())) {
                graded.insert(i);
            }
        }
    }
    Ok(graded)
}

/// FastChat names a model by its answer file: `gpt-4.jsonl` is `gpt-4`.
fn model_name(path: &Path) -> Result<String, GradeError> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.strip_suffix(".jsonl").unwrap_or(n))
        .unwrap_or_default();
    if name.is_empty() {
        return Err(GradeError::Input(format!(
            "{}: cannot name a model after this file",
            path.display()
        )));
    }
    Ok(name.to_string())
}

/// Fisher–Yates with splitmix64: deterministic across platforms and
/// releases, which a seeded order that must survive restarts needs.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..v.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// The entry of 1-based `turn` in `v`, if any.
fn of_turn(v: &[String], turn: u32) -> Option<&String> {
    v.get((turn as usize).checked_sub(1)?)
}

impl Grading {
    fn answer(&self, item: &Item, turn: u32) -> String {
        self.answers
            .get(&item.model)
            .and_then(|a| a.get(&item.question_id))
            .and_then(|t| of_turn(t, turn))
            .cloned()
            .unwrap_or_default()
    }

    fn view(&self, i: usize) -> Option<NextItem> {
        let item = self.items.get(i)?;
        let q = self.questions.get(&item.question_id)?;
        let turn_text = |t: u32| of_turn(&q.turns, t).cloned().unwrap_or_default();
        let context = (item.turn == 2).then(|| Context {
            question: turn_text(1),
            answer: self.answer(item, 1),
        });
        let reference = if fastchat::NEED_REF_CATS.contains(&q.category.as_str()) {
            self.references
                .get(&item.question_id)
                .and_then(|r| of_turn(r, item.turn))
                .cloned()
        } else {
            None
        };
        Some(NextItem {
            done: false,
            item: item.id.clone(),
            graded: self.graded.len(),
            total: self.items.len(),
            question_id: item.question_id,
            category: q.category.clone(),
            turn: item.turn,
            question: turn_text(item.turn),
            context,
            answer: self.answer(item, item.turn),
            reference,
        })
    }

    fn next(&self) -> serde_json::Value {
        let first = (0..self.items.len()).find(|i| !self.graded.contains(i));
        match first.and_then(|i| self.view(i)) {
            Some(v) => serde_json::to_value(v).unwrap_or_default(),
            None => serde_json::json!({
                "done": true,
                "graded": self.graded.len(),
                "total": self.items.len(),
            }),
        }
    }

    /// What the grader saw besides the answer, as the row's `user_prompt`.
    fn user_prompt(v: &NextItem) -> String {
        let mut s = String::new();
        if let Some(c) = &v.context {
            s.push_str(&format!(
                "### User:\n{}\n\n### Assistant:\n{}\n\n",
                c.question, c.answer
            ));
        }
        s.push_str(&format!("### User:\n{}", v.question));
        if let Some(r) = &v.reference {
            s.push_str(&format!("\n\n### Reference answer:\n{r}"));
        }
        s
    }

    /// Appends one row and fsyncs it: once this returns, the grade
    /// survives a crash. ([`start`] repaired a torn last line left by an
    /// earlier crash, so the row starts a line of its own.)
    fn append(&self, row: &JudgmentRow) -> Result<(), std::io::Error> {
        if let Some(dir) = self.out.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let f = durable::open_append(&self.out)?;
        let mut line = serde_json::to_string(row).map_err(std::io::Error::other)?;
        line.push('\n');
        durable::append_line(&f, line.as_bytes())
    }
}

type Shared = Arc<Mutex<Grading>>;

/// A poisoned lock only means another handler panicked mid-way; the state
/// is still consistent (a grade is recorded only after its write), so go on.
fn lock(s: &Shared) -> MutexGuard<'_, Grading> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn router(state: Shared) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/next", get(next))
        .route("/api/grade", post(grade))
        .with_state(state)
}

/// A fresh nonce per page load: the CSP then allows only the page's own
/// script and style, so even markup that somehow reached the DOM could run
/// nothing. `RandomState` is seeded from the OS per process and varies per
/// call, which is all a nonce needs.
fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut parts = [0u64; 2];
    for p in &mut parts {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(t);
        *p = h.finish();
    }
    format!("{:016x}{:016x}", parts[0], parts[1])
}

async fn page() -> Response {
    let n = nonce();
    let csp = format!(
        "default-src 'none'; script-src 'nonce-{n}'; style-src 'nonce-{n}'; \
         connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    );
    let mut r = PAGE.replace("{{NONCE}}", &n).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    r
}

async fn next(State(s): State<Shared>) -> Response {
    no_store(Json(lock(&s).next()).into_response())
}

fn no_store(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": msg.into() }))).into_response()
}

/// The body is taken as bytes and parsed here so every malformed request is
/// a plain 400 with a reason, whatever its content type.
async fn grade(State(s): State<Shared>, body: axum::body::Bytes) -> Response {
    let v: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad JSON: {e}")),
    };
    let Some(item) = v.get("item").and_then(|i| i.as_str()) else {
        return error(StatusCode::BAD_REQUEST, "missing \"item\"");
    };
    let score = match v.get("score").and_then(|s| s.as_u64()) {
        Some(s @ 1..=10) => s,
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "\"score\" must be an integer from 1 to 10",
            )
        }
    };
    let note = match v.get("note") {
        None | Some(serde_json::Value::Null) => "",
        Some(serde_json::Value::String(n)) => n.trim(),
        Some(_) => return error(StatusCode::BAD_REQUEST, "\"note\" must be a string"),
    };

    let mut g = lock(&s);
    let Some(&i) = g.by_id.get(item) else {
        return error(StatusCode::NOT_FOUND, "no such item");
    };
    if g.graded.contains(&i) {
        return error(StatusCode::CONFLICT, "this item is already graded");
    }
    let (Some(view), Some(it)) = (g.view(i), g.items.get(i)) else {
        return error(StatusCode::NOT_FOUND, "no such item");
    };
    let prompt = if it.turn == 2 {
        PROMPT_TURN2
    } else {
        PROMPT_TURN1
    };
    let row = JudgmentRow {
        question_id: it.question_id,
        model: it.model.clone(),
        judge: vec![g.judge.clone(), prompt.to_string()],
        user_prompt: Grading::user_prompt(&view),
        judgment: if note.is_empty() {
            "human rating".to_string()
        } else {
            note.to_string()
        },
        score: score as f64,
        turn: it.turn,
        tstamp: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default(),
    };
    if let Err(e) = g.append(&row) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot write {}: {e}", g.out.display()),
        );
    }
    g.graded.insert(i);
    no_store(Json(g.next()).into_response())
}

/// A server started by [`start`]; dropping it stops the server too.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    at_start: (usize, usize),
    tail: fastchat::Tail,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<JoinHandle<Result<(), GradeError>>>,
}

impl Running {
    /// The address it listens on (127.0.0.1 and the bound port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `(graded, total)` when the server started: the grades already in
    /// the judgment file by this grader, and all items.
    pub fn progress_at_start(&self) -> (usize, usize) {
        self.at_start
    }

    /// What an earlier crash left at the judgment file's end and how
    /// [`start`] repaired it ([`fastchat::describe_tail`] says it in words).
    pub fn tail(&self) -> fastchat::Tail {
        self.tail
    }

    /// The page's URL.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Stops the server and waits for it. Every grade is on disk already.
    pub fn shutdown(mut self) -> Result<(), GradeError> {
        self.stop_and_join()
    }

    /// Waits until the server ends by itself (for [`serve`]: never, unless
    /// it fails).
    pub fn wait(mut self) -> Result<(), GradeError> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(GradeError::Server("the server thread panicked".into())),
            None => Ok(()),
        }
    }

    fn stop_and_join(&mut self) -> Result<(), GradeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(GradeError::Server("the server thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Loads the answers and the judgment file, binds 127.0.0.1:`cfg.port` and
/// serves the page on a background thread. Errors in the files or the port
/// are returned here, before anything is served.
pub fn start(cfg: GradeConfig) -> Result<Running, GradeError> {
    // Rows are appended after whatever the file ends with: a torn last line
    // (a crash mid-write, never a grade the page was told was saved) is cut
    // off first, and that item is asked again.
    let tail = fastchat::repair_jsonl::<JudgmentRow>(&cfg.out)?;
    let grading = load(&cfg)?;
    let at_start = (grading.graded.len(), grading.items.len());
    let state = Arc::new(Mutex::new(grading));
    // Bound synchronously so a busy port is an error now and port 0's pick
    // is known to the caller.
    let bind = |e| GradeError::Bind {
        port: cfg.port,
        source: e,
    };
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, cfg.port)).map_err(bind)?;
    listener.set_nonblocking(true).map_err(bind)?;
    let addr = listener.local_addr().map_err(bind)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| GradeError::Server(e.to_string()))?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let thread = std::thread::Builder::new()
        .name("hearth-grade".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)
                    .map_err(|e| GradeError::Server(e.to_string()))?;
                // A dropped sender counts as a stop too.
                let stop_requested = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
                    let _ = rx.wait_for(|stop| *stop).await;
                };
                let server = axum::serve(listener, router(state))
                    .with_graceful_shutdown(stop_requested(stopped.clone()));
                // Graceful shutdown waits for open connections; a browser
                // may hold one, so give them a moment, then stop anyway
                // (every grade is on disk before its answer is sent).
                tokio::select! {
                    r = server => r.map_err(|e| GradeError::Server(e.to_string())),
                    _ = async {
                        stop_requested(stopped).await;
                        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                    } => Ok(()),
                }
            })
        })
        .map_err(|e| GradeError::Server(e.to_string()))?;
    Ok(Running {
        addr,
        at_start,
        tail,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// Serves the grading page until the process is stopped (Ctrl-C is safe:
/// every grade is fsynced when it is saved). Prints the URL and progress.
pub fn serve(cfg: GradeConfig) -> Result<(), GradeError> {
    let out = cfg.out.clone();
    // Said before start() repairs it: a crash in between says it again.
    let tail = fastchat::inspect_jsonl::<JudgmentRow>(&out)?;
    if let Some(line) =
        fastchat::describe_tail(&out, tail, "that grade was never saved; grade it again")
    {
        eprintln!("{line}");
    }
    let running = start(cfg)?;
    let (graded, total) = running.progress_at_start();
    eprintln!(
        "grading page: {}  ({graded}/{total} graded; judgments go to {})",
        running.url(),
        out.display()
    );
    running.wait()
}

/// How far a grader is: `(graded, total)` for `cfg`, read from the files
/// without serving (for the CLI's summary).
pub fn progress(cfg: &GradeConfig) -> Result<(usize, usize), GradeError> {
    let g = load(cfg)?;
    Ok((g.graded.len(), g.items.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_deterministic_and_seeded() {
        let mut a: Vec<u32> = (0..50).collect();
        let mut b = a.clone();
        let mut c = a.clone();
        shuffle(&mut a, 7);
        shuffle(&mut b, 7);
        shuffle(&mut c, 8);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn default_out_follows_fastchat_layout() {
        let a = vec![PathBuf::from("data/mt_bench/model_answer/x.jsonl")];
        assert_eq!(
            default_out(&a),
            PathBuf::from("data/mt_bench/model_judgment/human_single.jsonl")
        );
        let b = vec![PathBuf::from("runs/x.jsonl")];
        assert_eq!(default_out(&b), PathBuf::from("runs/human_single.jsonl"));
    }

    #[test]
    fn model_is_the_file_stem() {
        assert_eq!(model_name(Path::new("a/gpt-4.jsonl")).unwrap(), "gpt-4");
        assert!(model_name(Path::new("/")).is_err());
    }
}
