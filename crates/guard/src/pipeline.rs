//! The guard pipeline: between the user and the model. It routes a request
//! (which guards apply), runs the tools that compute facts before the answer
//! is written (the calculator's and the solver's programs, which the model
//! writes under a grammar and we evaluate), asks for the answer with those
//! facts, then runs the passes that check and repair it (clean, persona,
//! calculator claims, solver answer, qualifiers, constraints). Every step
//! goes into a [`Trace`]: what fired, what changed, the extra model calls
//! and tokens, the time.
//!
//! A guard that cannot do its work (a program that does not evaluate, a
//! model call that fails, input past a bound) records "could not verify"
//! and leaves the answer as it was: a guard never loses the answer.

use crate::claims::{self, CALC_GRAMMAR, CALC_INSTRUCTION};
use crate::{calc, clean, ground, logic, persona, qualifiers, route, verify};
use engine::{ChatMessage, ChatModel, EngineError, FinishReason, Grammar, ModelCall, ModelReply};
use num_rational::BigRational;
use serde::Serialize;
use std::fmt;
use std::time::Instant;

/// One guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GuardKind {
    /// Arithmetic: a calculator program before the answer, claims after.
    Calc,
    /// Logic puzzles: a constraint program solved before the answer.
    Logic,
    /// Stated constraints (word counts, formats…), checked and refined.
    Verify,
    /// Role-play: identity leaks regenerated away.
    Persona,
    /// Self-correction drafts stripped.
    Clean,
    /// Quantifiers and restrictions in the question.
    Qualifiers,
}

impl GuardKind {
    /// Every guard, in the order the passes run.
    pub const ALL: [GuardKind; 6] = [
        GuardKind::Calc,
        GuardKind::Logic,
        GuardKind::Clean,
        GuardKind::Persona,
        GuardKind::Qualifiers,
        GuardKind::Verify,
    ];

    /// The guard's name, as `--guard` spells it.
    pub fn name(self) -> &'static str {
        match self {
            GuardKind::Calc => "calc",
            GuardKind::Logic => "logic",
            GuardKind::Verify => "verify",
            GuardKind::Persona => "persona",
            GuardKind::Clean => "clean",
            GuardKind::Qualifiers => "qualifiers",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for GuardKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of guards: `all`, `none`, or a comma-separated list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GuardSet(u8);

impl GuardSet {
    /// Every guard.
    pub fn all() -> Self {
        Self(GuardKind::ALL.iter().fold(0, |b, g| b | g.bit()))
    }

    /// No guard (the model's answer as it is).
    pub fn none() -> Self {
        Self(0)
    }

    /// Whether `g` is in the set.
    pub fn contains(self, g: GuardKind) -> bool {
        self.0 & g.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Read `all`, `none` or `calc,logic,…`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let spec = spec.trim();
        match spec {
            "all" => return Ok(Self::all()),
            "none" | "" => return Ok(Self::none()),
            _ => {}
        }
        let mut set = 0;
        for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let g = GuardKind::ALL
                .iter()
                .find(|g| g.name() == name)
                .ok_or_else(|| {
                    format!(
                        "unknown guard `{name}`: use all, none or a list of calc, logic, verify, persona, clean, qualifiers"
                    )
                })?;
            set |= g.bit();
        }
        Ok(Self(set))
    }
}

impl fmt::Display for GuardSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::all() {
            return f.write_str("all");
        }
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = GuardKind::ALL
            .iter()
            .filter(|g| self.contains(**g))
            .map(|g| g.name())
            .collect();
        f.write_str(&names.join(","))
    }
}

impl std::str::FromStr for GuardSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

/// How the pipeline runs.
#[derive(Debug, Clone)]
pub struct GuardConfig {
    /// Which guards may run.
    pub guards: GuardSet,
    /// Most tokens of an answer (the draft and each regeneration).
    pub max_tokens: usize,
    /// Most tokens of a program (calculator or solver).
    pub program_tokens: usize,
    /// Most refinement rounds for broken constraints.
    pub refine_rounds: usize,
    /// Limits of the logic solver.
    pub solver: logic::Limits,
    /// Temperature of the answer and its regenerations (None: the
    /// model's); programs and yes/no questions are always greedy.
    pub temperature: Option<f32>,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            guards: GuardSet::all(),
            max_tokens: 512,
            program_tokens: 320,
            refine_rounds: 2,
            solver: logic::Limits::default(),
            temperature: None,
        }
    }
}

/// What a step of the pipeline came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The guard applies and computed a fact the answer was written with.
    Computed,
    /// Checked: nothing to change.
    Passed,
    /// The answer was changed.
    Repaired,
    /// A problem was found and could not be fixed; the answer says so in
    /// the trace only.
    Flagged,
    /// The guard could not check (a program that failed, a bound reached,
    /// nothing to check against).
    CouldNotVerify,
}

/// Why a guard runs (or not) on this request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Routed {
    /// The guard.
    pub guard: GuardKind,
    /// Whether it runs.
    pub applies: bool,
    /// `rule: …` or `model: yes|no`.
    pub reason: String,
}

/// One step of the pipeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuardStep {
    /// The guard.
    pub guard: GuardKind,
    /// What it came to.
    pub outcome: Outcome,
    /// What it found and what it changed, for a person.
    pub detail: String,
    /// Model calls the step made.
    pub calls: usize,
    /// Prompt tokens of those calls.
    pub prompt_tokens: usize,
    /// Tokens they generated.
    pub completion_tokens: usize,
    /// Time the step took.
    pub ms: u64,
}

/// Everything the pipeline did for one answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    /// The guards asked for.
    pub guards: String,
    /// The routing decisions.
    pub routed: Vec<Routed>,
    /// The steps, in order.
    pub steps: Vec<GuardStep>,
    /// Model calls beyond the answer itself.
    pub extra_calls: usize,
    /// Prompt tokens of those calls.
    pub extra_prompt_tokens: usize,
    /// Tokens generated by those calls.
    pub extra_completion_tokens: usize,
    /// Whether the returned answer differs from the model's first answer.
    pub changed: bool,
    /// Wall time of the whole pipeline, the answer included.
    pub ms: u64,
}

impl Trace {
    /// A short human-readable summary, one line per step.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "guards: {} · {} extra call(s), {}+{} tokens · {} ms",
            self.guards,
            self.extra_calls,
            self.extra_prompt_tokens,
            self.extra_completion_tokens,
            self.ms
        );
        for r in self.routed.iter().filter(|r| r.applies) {
            s.push_str(&format!("\n  route {}: {}", r.guard, r.reason));
        }
        for st in &self.steps {
            s.push_str(&format!(
                "\n  {} {:?}: {} ({} call(s), {} ms)",
                st.guard, st.outcome, st.detail, st.calls, st.ms
            ));
        }
        s
    }
}

/// An answer and how it was guarded.
#[derive(Debug, Clone)]
pub struct Guarded {
    /// The answer to return.
    pub text: String,
    /// The model's first answer, before any pass.
    pub draft: String,
    /// Why the answer ended (of the call that produced the returned text).
    pub finish: FinishReason,
    /// Tokens of the answer call.
    pub answer_prompt_tokens: usize,
    /// Tokens the answer call generated.
    pub answer_completion_tokens: usize,
    /// What the guards did.
    pub trace: Trace,
}

/// Counts the calls a step makes.
struct Meter<'m> {
    model: &'m mut dyn ChatModel,
    calls: usize,
    prompt: usize,
    completion: usize,
}

impl Meter<'_> {
    fn call(&mut self, call: &ModelCall) -> Result<ModelReply, EngineError> {
        let r = self.model.reply(call)?;
        self.calls += 1;
        self.prompt += r.prompt_tokens;
        self.completion += r.completion_tokens;
        Ok(r)
    }
}

/// State the passes share.
struct Run<'m> {
    meter: Meter<'m>,
    cfg: GuardConfig,
    messages: Vec<ChatMessage>,
    question: String,
    trace: Trace,
}

/// A step's start: its meter reading and time.
#[derive(Clone, Copy)]
struct Mark {
    calls: usize,
    prompt: usize,
    completion: usize,
    at: Instant,
}

impl Run<'_> {
    fn mark(&self) -> Mark {
        Mark {
            calls: self.meter.calls,
            prompt: self.meter.prompt,
            completion: self.meter.completion,
            at: Instant::now(),
        }
    }

    fn record(&mut self, m: Mark, guard: GuardKind, outcome: Outcome, detail: impl Into<String>) {
        self.trace.steps.push(GuardStep {
            guard,
            outcome,
            detail: detail.into(),
            calls: self.meter.calls - m.calls,
            prompt_tokens: self.meter.prompt - m.prompt,
            completion_tokens: self.meter.completion - m.completion,
            ms: m.at.elapsed().as_millis() as u64,
        });
    }

    /// The conversation plus one more user turn.
    fn with_user(&self, extra: &[ChatMessage], text: &str) -> Vec<ChatMessage> {
        let mut m = self.messages.clone();
        m.extend_from_slice(extra);
        m.push(ChatMessage::user(text));
        m
    }

    /// Ask the model a yes/no question about the conversation.
    fn ask(&mut self, question: &str) -> Result<bool, EngineError> {
        let call = ModelCall::new(self.with_user(&[], question), 2)
            .constrained(Grammar::Regex("(yes|no)".into()));
        Ok(self.meter.call(&call)?.text.trim() == "yes")
    }
}

/// Answer `messages` (the last one the user's) through the guards in
/// `cfg`. Fails only when the model cannot give an answer at all.
pub fn answer(
    model: &mut dyn ChatModel,
    messages: &[ChatMessage],
    cfg: &GuardConfig,
) -> Result<Guarded, EngineError> {
    let start = Instant::now();
    let mut run = Run::new(model, messages, cfg);
    let routes = route_all(&mut run);
    let applies = |g: GuardKind| routes.contains(&g);
    let facts = compute_facts(&mut run, applies);
    let draft = draft_answer(&mut run, &facts.notes)?;
    let mut text = draft.text.clone();
    if !facts.notes.is_empty() {
        text = scrub_instructions(&mut run, text, &facts.notes);
    }
    let (text, finish) = check_answer(&mut run, applies, &facts, text, draft.finish);
    Ok(run.into_guarded(text, draft, finish, start))
}

impl<'m> Run<'m> {
    /// The state of a run over `messages`, its question the last user turn.
    fn new(model: &'m mut dyn ChatModel, messages: &[ChatMessage], cfg: &GuardConfig) -> Self {
        let question = messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(|m| m.content.clone())
            .unwrap_or_default();
        Run {
            meter: Meter {
                model,
                calls: 0,
                prompt: 0,
                completion: 0,
            },
            cfg: cfg.clone(),
            messages: messages.to_vec(),
            question,
            trace: Trace {
                guards: cfg.guards.to_string(),
                routed: Vec::new(),
                steps: Vec::new(),
                extra_calls: 0,
                extra_prompt_tokens: 0,
                extra_completion_tokens: 0,
                changed: false,
                ms: 0,
            },
        }
    }

    /// The guarded answer `text` (from `draft`), the trace's totals filled
    /// in.
    fn into_guarded(
        self,
        text: String,
        draft: ModelReply,
        finish: FinishReason,
        start: Instant,
    ) -> Guarded {
        let mut trace = self.trace;
        trace.extra_calls = self.meter.calls;
        trace.extra_prompt_tokens = self.meter.prompt;
        trace.extra_completion_tokens = self.meter.completion;
        trace.changed = text != draft.text;
        trace.ms = start.elapsed().as_millis() as u64;
        Guarded {
            text,
            draft: draft.text,
            finish,
            answer_prompt_tokens: draft.prompt_tokens,
            answer_completion_tokens: draft.completion_tokens,
            trace,
        }
    }
}

/// What the tools computed before the answer is written.
struct Facts {
    /// The facts as the answer prompt states them.
    notes: Vec<String>,
    /// The calculator's exact value.
    calc_value: Option<BigRational>,
    /// The solver's solution (unique or not).
    solved: Option<logic::Solution>,
}

/// Runs the calculator's and the solver's programs where they apply.
fn compute_facts(run: &mut Run<'_>, applies: impl Fn(GuardKind) -> bool) -> Facts {
    let mut facts = Facts {
        notes: Vec::new(),
        calc_value: None,
        solved: None,
    };
    if applies(GuardKind::Calc) {
        if let Some((name, v)) = calc_program(run) {
            facts.notes.push(format!(
                "A calculator computed exactly: {name} = {}.",
                claims::format_value(&v)
            ));
            facts.calc_value = Some(v);
        }
    }
    if applies(GuardKind::Logic) {
        if let Some(s) = logic_program(run) {
            if let Some(f) = logic_fact(&s) {
                facts.notes.push(f);
            }
            facts.solved = Some(s);
        }
    }
    facts
}

/// The answer itself, the facts (if any) added to the last user turn.
fn draft_answer(run: &mut Run<'_>, facts: &[String]) -> Result<ModelReply, EngineError> {
    let mut answer_messages = run.messages.clone();
    if !facts.is_empty() {
        if let Some(last) = answer_messages.iter_mut().rev().find(|m| m.role == "user") {
            last.content
                .push_str(&format!("\n\n({FACTS_NOTE}: {})", facts.join(" ")));
        }
    }
    run.meter.model.reply(
        &ModelCall::new(answer_messages, run.cfg.max_tokens).at_temperature(run.cfg.temperature),
    )
}

/// The passes that check and repair the answer, in their order.
fn check_answer(
    run: &mut Run<'_>,
    applies: impl Fn(GuardKind) -> bool,
    facts: &Facts,
    mut text: String,
    mut finish: FinishReason,
) -> (String, FinishReason) {
    if applies(GuardKind::Clean) {
        text = clean_pass(run, text);
    }
    if applies(GuardKind::Persona) {
        (text, finish) = persona_pass(run, text, finish);
    }
    if applies(GuardKind::Calc) {
        text = calc_pass(run, text, facts.calc_value.as_ref());
    }
    if let (true, Some(s)) = (applies(GuardKind::Logic), &facts.solved) {
        text = logic_pass(run, text, s);
    }
    if applies(GuardKind::Qualifiers) {
        text = qualifier_pass(run, text);
    }
    if applies(GuardKind::Verify) {
        text = verify_pass(run, text);
    }
    (text, finish)
}

/// What the answer prompt is told around the facts; a reply must never
/// carry it.
const FACTS_NOTE: &str = "Use these results; they are exact";

/// Removes from `text` any sentence of the guard's own instructions (the
/// note around the facts, the facts as phrased for the model) that the
/// model copied into its reply, recording it under the guard that wrote
/// them.
fn scrub_instructions(run: &mut Run<'_>, text: String, facts: &[String]) -> String {
    let m = run.mark();
    let mut phrases = vec![FACTS_NOTE.to_string(), "they are exact".to_string()];
    phrases.extend(facts.iter().map(|f| f.trim_end_matches('.').to_string()));
    let mut out = text.clone();
    for p in &phrases {
        let pattern = format!(r"(?i)[ \t]*\(?{}[.:;)]*", regex::escape(p));
        if let Ok(re) = regex::Regex::new(&pattern) {
            out = re.replace_all(&out, "").into_owned();
        }
    }
    if out == text {
        return text;
    }
    let out = out.trim().to_string();
    let guard = if facts.iter().any(|f| f.starts_with("A calculator")) {
        GuardKind::Calc
    } else {
        GuardKind::Logic
    };
    run.record(
        m,
        guard,
        Outcome::Repaired,
        "the reply repeated the guard's instructions to the model; removed",
    );
    out
}

/// Decide which guards run, recording why.
fn route_all(run: &mut Run<'_>) -> Vec<GuardKind> {
    let mut out = Vec::new();
    for g in GuardKind::ALL {
        if !run.cfg.guards.contains(g) {
            continue;
        }
        let q = run.question.clone();
        let verdict = match g {
            GuardKind::Calc => route::calc(&q),
            GuardKind::Logic => route::logic(&q),
            GuardKind::Clean => route::Verdict::Yes("always: drafts are cheap to find".into()),
            GuardKind::Persona => match persona::role(&run.messages) {
                Some(r) => route::Verdict::Yes(format!("role-play as {r}")),
                None => route::Verdict::No,
            },
            GuardKind::Qualifiers => {
                let n = qualifiers::qualifiers(&q).len();
                if n > 0 {
                    route::Verdict::Yes(format!("{n} qualifier(s) in the question"))
                } else {
                    route::Verdict::No
                }
            }
            GuardKind::Verify => {
                let n = verify::extract(&q).len();
                if n > 0 {
                    route::Verdict::Yes(format!("{n} checkable requirement(s)"))
                } else {
                    route::Verdict::No
                }
            }
        };
        let (applies, reason) = match verdict {
            route::Verdict::Yes(why) => (true, format!("rule: {why}")),
            route::Verdict::No => (false, "rule: no sign of it".to_string()),
            route::Verdict::Ask(question) => match run.ask(&question) {
                Ok(yes) => (yes, format!("model: {}", if yes { "yes" } else { "no" })),
                Err(e) => (false, format!("model could not tell: {e}")),
            },
        };
        run.trace.routed.push(Routed {
            guard: g,
            applies,
            reason,
        });
        if applies {
            out.push(g);
        }
    }
    out
}

/// The calculator's program for the question: written by the model under
/// the calculator's grammar, evaluated exactly. The last binding's name and
/// value.
fn calc_program(run: &mut Run<'_>) -> Option<(String, BigRational)> {
    let m = run.mark();
    let call = ModelCall::new(run.with_user(&[], CALC_INSTRUCTION), run.cfg.program_tokens)
        .constrained(Grammar::Lark(CALC_GRAMMAR.into()));
    let program = match run.meter.call(&call) {
        Ok(r) => r.text,
        Err(e) => {
            run.record(
                m,
                GuardKind::Calc,
                Outcome::CouldNotVerify,
                format!("no program: {e}"),
            );
            return None;
        }
    };
    if !grounded(run, m, GuardKind::Calc, &program) {
        return None;
    }
    match calc::eval(&program) {
        Ok(v) if v.is_exact => {
            let name = program
                .lines()
                .rev()
                .find_map(|l| l.split_once(" = ").map(|(n, _)| n.trim().to_string()))
                .unwrap_or_else(|| "result".into());
            let shown = claims::format_value(&v.exact);
            run.record(
                m,
                GuardKind::Calc,
                Outcome::Computed,
                format!("program `{}` gives {name} = {shown}", one_line(&program)),
            );
            Some((name, v.exact))
        }
        Ok(v) => {
            run.record(
                m,
                GuardKind::Calc,
                Outcome::Computed,
                format!(
                    "program `{}` gives {v} (inexact; not used)",
                    one_line(&program)
                ),
            );
            None
        }
        Err(e) => {
            run.record(
                m,
                GuardKind::Calc,
                Outcome::CouldNotVerify,
                format!("program `{}` failed: {e}", one_line(&program)),
            );
            None
        }
    }
}

/// Whether `program` is about the question (see [`ground`]); when it is
/// not, the step records `could_not_verify` and why. A puzzle's program may
/// number positions.
fn grounded(run: &mut Run<'_>, m: Mark, guard: GuardKind, program: &str) -> bool {
    let positions = guard == GuardKind::Logic;
    match ground::check(program, &run.question, positions) {
        Ok(()) => true,
        Err(why) => {
            run.record(
                m,
                guard,
                Outcome::CouldNotVerify,
                format!("program `{}` not used: {why}", one_line(program)),
            );
            false
        }
    }
}

fn one_line(s: &str) -> String {
    let joined = s.trim().lines().collect::<Vec<_>>().join("; ");
    if joined.chars().count() > 200 {
        let cut: String = joined.chars().take(200).collect();
        format!("{cut}…")
    } else {
        joined
    }
}

/// Check the answer's arithmetic: repair wrong claims in place, then hold
/// the stated final number to the calculator's value.
fn calc_pass(run: &mut Run<'_>, text: String, value: Option<&BigRational>) -> String {
    let m = run.mark();
    let found = claims::find_claims(&text);
    let ClaimRepairs {
        mut out,
        notes,
        last_wrong,
    } = repair_claims(&text, &found);
    // The stated final: against the program's value, or (without one)
    // against the correction of the last wrong claim it repeats.
    let target = value
        .cloned()
        .or_else(|| last_wrong.as_ref().map(|(_, right)| right.clone()));
    let mut final_note = None;
    if let Some(target) = &target {
        match hold_final(&mut out, target, value.is_some(), last_wrong.as_ref()) {
            FinalCheck::Replaced(note) => final_note = Some(note),
            FinalCheck::NoNumber if value.is_some() => {
                run.record(
                    m,
                    GuardKind::Calc,
                    if notes.is_empty() {
                        Outcome::Flagged
                    } else {
                        Outcome::Repaired
                    },
                    format!(
                        "{}the answer states no number; the calculator's is {}",
                        prefix(&notes),
                        claims::format_value(target)
                    ),
                );
                return out;
            }
            FinalCheck::Kept | FinalCheck::NoNumber => {}
        }
    }
    let (outcome, detail) = calc_summary(&notes, final_note, found.len(), value, out != text);
    run.record(m, GuardKind::Calc, outcome, detail.trim_end_matches("; "));
    out
}

/// An answer with its wrong claims corrected.
struct ClaimRepairs {
    /// The answer, each wrong claim's result replaced by the right one.
    out: String,
    /// One note per wrong claim, in the answer's order.
    notes: Vec<String>,
    /// The last wrong claim's stated and right values.
    last_wrong: Option<(BigRational, BigRational)>,
}

/// Replaces the result of every wrong claim in `found` (claims of `text`).
fn repair_claims(text: &str, found: &[claims::FoundClaim]) -> ClaimRepairs {
    let mut out = text.to_string();
    let mut notes = Vec::new();
    let mut last_wrong: Option<(BigRational, BigRational)> = None;
    // From the end, so earlier byte ranges stay valid.
    for c in found.iter().rev() {
        if let Some(v) = &c.wrong {
            notes.push(format!(
                "{} = {} is wrong: {}",
                c.expr.trim(),
                c.stated,
                claims::format_value(&v.exact)
            ));
            if last_wrong.is_none() {
                if let Ok(old) = calc::eval(c.stated.trim_start_matches('$')) {
                    last_wrong = Some((old.exact, v.exact.clone()));
                }
            }
            out = claims::replace_number(&out, c.result_at.clone(), &v.exact);
        }
    }
    notes.reverse();
    ClaimRepairs {
        out,
        notes,
        last_wrong,
    }
}

/// What holding an answer's stated final number to a target came to.
enum FinalCheck {
    /// Left as it is: it states the target, or it is not held to it.
    Kept,
    /// Replaced by the target; the note says what by what.
    Replaced(String),
    /// The answer states no number.
    NoNumber,
}

/// Holds the final number of `out` to `target`: a different final is
/// replaced when the target is the program's value (`from_program`) or
/// when the final repeats the last wrong claim's value.
fn hold_final(
    out: &mut String,
    target: &BigRational,
    from_program: bool,
    last_wrong: Option<&(BigRational, BigRational)>,
) -> FinalCheck {
    let Some(f) = stated_final(out) else {
        return FinalCheck::NoNumber;
    };
    if claims::same_number(&f.value, target) {
        return FinalCheck::Kept;
    }
    let repeats_wrong = last_wrong.is_some_and(|(old, _)| claims::same_number(old, &f.value));
    if !(from_program || repeats_wrong) {
        return FinalCheck::Kept;
    }
    let note = format!(
        "final {} replaced by {}",
        &out[f.at.clone()],
        claims::format_value(target)
    );
    *out = claims::replace_number(out, f.at, target);
    FinalCheck::Replaced(note)
}

/// The calculator step's outcome and detail: the repairs' notes, else how
/// many claims were checked.
fn calc_summary(
    notes: &[String],
    final_note: Option<String>,
    claims_found: usize,
    value: Option<&BigRational>,
    changed: bool,
) -> (Outcome, String) {
    let mut detail = prefix(notes);
    if let Some(n) = final_note {
        detail.push_str(&n);
    }
    if detail.is_empty() {
        detail = format!("{claims_found} claim(s) checked, all right");
        if let Some(v) = value {
            // The answer was handed this value, so a final that states it
            // shows it was used, not that it was checked independently.
            detail.push_str(&format!(
                "; the final states the calculator's {} (given to the answer)",
                claims::format_value(v)
            ));
        }
    }
    let outcome = if changed {
        Outcome::Repaired
    } else if claims_found == 0 && value.is_none() {
        // Neither a program nor a worked step: nothing was checked.
        detail = "no worked arithmetic in the answer and no program to hold it to".into();
        Outcome::CouldNotVerify
    } else {
        Outcome::Passed
    };
    (outcome, detail)
}

/// The number an answer states as its result, passing over a worked step's
/// own result (`3 × 7 = $21, so you get $31 back` states 31): a step is
/// checked as a claim, not held to the final value.
fn stated_final(text: &str) -> Option<claims::NumberAt> {
    let pick = claims::final_number(text, false)?;
    let steps = claims::find_claims(text);
    let is_step = |n: &claims::NumberAt| steps.iter().any(|c| c.result_at.contains(&n.at.start));
    if !is_step(&pick) {
        return Some(pick);
    }
    claims::numbers(text)
        .into_iter()
        .rev()
        .find(|n| !n.word && n.at.start > pick.at.start && !is_step(n))
        .or(Some(pick))
}

fn prefix(notes: &[String]) -> String {
    if notes.is_empty() {
        String::new()
    } else {
        format!("{}; ", notes.join("; "))
    }
}

fn clean_pass(run: &mut Run<'_>, text: String) -> String {
    let m = run.mark();
    let numeric = route::wants_number(&run.question);
    match clean::clean(&text, numeric) {
        clean::Cleaned::Nothing => {
            run.record(m, GuardKind::Clean, Outcome::Passed, "no self-correction");
            text
        }
        clean::Cleaned::Kept(tail) => {
            run.record(
                m,
                GuardKind::Clean,
                Outcome::Repaired,
                format!(
                    "dropped a self-corrected draft ({} of {} bytes kept)",
                    tail.len(),
                    text.len()
                ),
            );
            tail
        }
        clean::Cleaned::Incomplete { marker } => {
            run.record(
                m,
                GuardKind::Clean,
                Outcome::Flagged,
                format!(
                    "self-correction \"{marker}\" with no complete answer after it; kept as is"
                ),
            );
            text
        }
    }
}

fn persona_pass(run: &mut Run<'_>, text: String, finish: FinishReason) -> (String, FinishReason) {
    let m = run.mark();
    let Some(role) = persona::role(&run.messages) else {
        return (text, finish);
    };
    let found = persona::leaks(&text);
    if found.is_empty() {
        run.record(
            m,
            GuardKind::Persona,
            Outcome::Passed,
            format!("stayed in role ({role})"),
        );
        return (text, finish);
    }
    // Regenerate once, the role re-anchored in a system turn.
    let mut msgs = vec![ChatMessage::system(persona::anchor(&role))];
    msgs.extend(run.messages.iter().filter(|m| m.role != "system").cloned());
    let retry = run
        .meter
        .call(&ModelCall::new(msgs, run.cfg.max_tokens).at_temperature(run.cfg.temperature));
    match retry {
        Ok(r) if persona::leaks(&r.text).is_empty() && !r.text.trim().is_empty() => {
            run.record(
                m,
                GuardKind::Persona,
                Outcome::Repaired,
                format!(
                    "\"{}\" broke the role ({role}); regenerated in role",
                    found[0]
                ),
            );
            (r.text, r.finish)
        }
        other => {
            let why = match &other {
                Ok(_) => "the regeneration leaked too".to_string(),
                Err(e) => format!("the regeneration failed: {e}"),
            };
            match persona::drop_leaks(&text) {
                Some(kept) => {
                    run.record(
                        m,
                        GuardKind::Persona,
                        Outcome::Repaired,
                        format!(
                            "\"{}\" broke the role ({role}); {why}; dropped the leaking sentences",
                            found[0]
                        ),
                    );
                    (kept, finish)
                }
                None => {
                    run.record(
                        m,
                        GuardKind::Persona,
                        Outcome::Flagged,
                        format!("\"{}\" broke the role ({role}); {why}", found[0]),
                    );
                    (text, finish)
                }
            }
        }
    }
}

/// Check the qualifiers; ask once for an answer that respects the broken
/// ones, kept only if it breaks fewer.
fn qualifier_pass(run: &mut Run<'_>, text: String) -> String {
    let m = run.mark();
    let qs = qualifiers::qualifiers(&run.question);
    let broken = |t: &str| -> Vec<String> {
        qs.iter()
            .filter_map(|q| match qualifiers::check(q, t) {
                qualifiers::Check::Broken(why) => Some(why),
                _ => None,
            })
            .collect()
    };
    let checked = qs
        .iter()
        .filter(|q| qualifiers::check(q, &text) != qualifiers::Check::Unchecked)
        .count();
    let first = broken(&text);
    if first.is_empty() {
        let (outcome, detail) = if checked == 0 {
            (
                Outcome::CouldNotVerify,
                format!("{} qualifier(s), none checkable in the answer", qs.len()),
            )
        } else {
            (Outcome::Passed, format!("{checked} qualifier(s) respected"))
        };
        run.record(m, GuardKind::Qualifiers, outcome, detail);
        return text;
    }
    let ask = format!(
        "Your answer does not respect the wording of the question: {}. Answer the question again, respecting it exactly.",
        first.join("; ")
    );
    let call = ModelCall::new(
        run.with_user(&[ChatMessage::assistant(text.clone())], &ask),
        run.cfg.max_tokens,
    )
    .at_temperature(run.cfg.temperature);
    match run.meter.call(&call) {
        Ok(r) if broken(&r.text).len() < first.len() && !r.text.trim().is_empty() => {
            run.record(
                m,
                GuardKind::Qualifiers,
                Outcome::Repaired,
                format!("{}; answered again", first.join("; ")),
            );
            r.text
        }
        Ok(_) => {
            run.record(
                m,
                GuardKind::Qualifiers,
                Outcome::Flagged,
                format!("{}; the new answer was no better", first.join("; ")),
            );
            text
        }
        Err(e) => {
            run.record(
                m,
                GuardKind::Qualifiers,
                Outcome::Flagged,
                format!("{}; could not ask again: {e}", first.join("; ")),
            );
            text
        }
    }
}

/// The instruction that asks for a constraint program.
const LOGIC_INSTRUCTION: &str = "Write the last question as a constraint program in z3's Python API: declare the unknowns with Int/Ints/Bool/Bools, create `s = Solver()`, add every fact with `s.add(...)` (Distinct, And, Or, Not, Implies, If, Sum and comparisons), then `print(s.model())`. Write only the program.";

/// The solver's program for the puzzle: written by the model under the
/// solver's grammar, parsed (never run) and solved.
fn logic_program(run: &mut Run<'_>) -> Option<logic::Solution> {
    let m = run.mark();
    let call = ModelCall::new(
        run.with_user(&[], LOGIC_INSTRUCTION),
        run.cfg.program_tokens,
    )
    .constrained(Grammar::Lark(logic::GRAMMAR.into()));
    let program = match run.meter.call(&call) {
        Ok(r) => r.text,
        Err(e) => {
            run.record(
                m,
                GuardKind::Logic,
                Outcome::CouldNotVerify,
                format!("no program: {e}"),
            );
            return None;
        }
    };
    if !grounded(run, m, GuardKind::Logic, &program) {
        return None;
    }
    match logic::solve(&program, &run.cfg.solver) {
        Ok(s) => {
            let outcome = match (s.status, s.unique) {
                (logic::Status::Sat, true) => Outcome::Computed,
                _ => Outcome::CouldNotVerify,
            };
            let detail = format!(
                "program `{}`: {}",
                one_line(&program),
                describe_solution(&s)
            );
            run.record(m, GuardKind::Logic, outcome, detail);
            Some(s)
        }
        Err(e) => {
            run.record(
                m,
                GuardKind::Logic,
                Outcome::CouldNotVerify,
                format!("program `{}` not solved: {e}", one_line(&program)),
            );
            None
        }
    }
}

fn describe_solution(s: &logic::Solution) -> String {
    let values: Vec<String> = s
        .model
        .iter()
        .map(|(k, v)| format!("{k} = {}", show_val(v)))
        .collect();
    match s.status {
        logic::Status::Sat if s.unique => format!("the only solution: {}", values.join(", ")),
        logic::Status::Sat => format!("several solutions (one: {}); not used", values.join(", ")),
        logic::Status::Unsat => "no solution: the program contradicts itself; not used".into(),
        logic::Status::Unknown => "the solver ran out of time; not used".into(),
    }
}

fn show_val(v: &logic::Val) -> String {
    match v {
        logic::Val::Int(i) => i.to_string(),
        logic::Val::Bool(b) => b.to_string(),
    }
}

/// The fact a unique solution gives the answer.
fn logic_fact(s: &logic::Solution) -> Option<String> {
    if s.status != logic::Status::Sat || !s.unique || s.model.is_empty() {
        return None;
    }
    let values: Vec<String> = s
        .model
        .iter()
        .map(|(k, v)| format!("{k} = {}", show_val(v)))
        .collect();
    Some(format!(
        "A constraint solver proved the only solution: {}.",
        values.join(", ")
    ))
}

/// The single integer a puzzle asks for, when it asks for one.
fn asked_int(s: &logic::Solution) -> Option<i64> {
    let ints: Vec<i64> = s
        .model
        .values()
        .filter_map(|v| match v {
            logic::Val::Int(i) => Some(*i),
            logic::Val::Bool(_) => None,
        })
        .collect();
    (ints.len() == 1 && s.model.len() == 1).then(|| ints[0])
}

/// Hold the answer's stated number to the solver's unique value: ask once
/// more with the value, then replace the number if the model still misses.
fn logic_pass(run: &mut Run<'_>, text: String, s: &logic::Solution) -> String {
    let m = run.mark();
    let Some(want) = (s.status == logic::Status::Sat && s.unique)
        .then(|| asked_int(s))
        .flatten()
    else {
        run.record(
            m,
            GuardKind::Logic,
            Outcome::CouldNotVerify,
            "no single unique number to hold the answer to",
        );
        return text;
    };
    let want_r = BigRational::from_integer(want.into());
    let stated = match claims::final_number(&text, true) {
        Some(f) if claims::same_number(&f.value, &want_r) => {
            run.record(
                m,
                GuardKind::Logic,
                Outcome::Passed,
                format!("the answer states {want}, as proved"),
            );
            return text;
        }
        None => {
            run.record(
                m,
                GuardKind::Logic,
                Outcome::Flagged,
                format!("the answer states no number; the solver proved {want}"),
            );
            return text;
        }
        Some(f) => f,
    };
    let said = text[stated.at.clone()].to_string();
    if let Some(again) = ask_with_solution(run, &text, want, &said) {
        run.record(
            m,
            GuardKind::Logic,
            Outcome::Repaired,
            format!("the answer said {said}; the solver proved {want}; answered again"),
        );
        return again;
    }
    let out = replace_with_solution(&text, &stated, want);
    run.record(
        m,
        GuardKind::Logic,
        Outcome::Repaired,
        format!("the answer said {said}; the solver proved {want}; replaced"),
    );
    out
}

/// Asks the model once more, telling it the solver's value `want` (the
/// answer `text` said `said`); its new answer when that states `want`.
fn ask_with_solution(run: &mut Run<'_>, text: &str, want: i64, said: &str) -> Option<String> {
    let ask = format!(
        "A constraint solver proved that the answer is {want}, and that no other answer fits, but your answer says {said}. Write your answer again with the right result, {want}, and reasoning that supports it."
    );
    let call = ModelCall::new(
        run.with_user(&[ChatMessage::assistant(text.to_string())], &ask),
        run.cfg.max_tokens,
    )
    .at_temperature(run.cfg.temperature);
    let want_r = BigRational::from_integer(want.into());
    let r = run.meter.call(&call).ok()?;
    claims::final_number(&r.text, true)
        .is_some_and(|f| claims::same_number(&f.value, &want_r))
        .then_some(r.text)
}

/// `text` with its stated number `stated` replaced by `want`, written as
/// the answer wrote it (a word or digits), a plural noun after it made
/// singular for one.
fn replace_with_solution(text: &str, stated: &claims::NumberAt, want: i64) -> String {
    let replacement = if stated.word {
        number_word(want)
    } else {
        want.to_string()
    };
    let mut rest = text[stated.at.end..].to_string();
    if want == 1 {
        // "two brothers" → "one brother".
        let word_end = rest
            .char_indices()
            .skip_while(|(_, c)| *c == ' ')
            .find(|(_, c)| !c.is_alphabetic())
            .map_or(rest.len(), |(i, _)| i);
        if rest[..word_end].trim_start().len() > 2 && rest[..word_end].ends_with('s') {
            rest.remove(word_end - 1);
        }
    }
    format!("{}{}{}", &text[..stated.at.start], replacement, rest)
}

fn number_word(n: i64) -> String {
    const WORDS: [&str; 13] = [
        "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    usize::try_from(n)
        .ok()
        .and_then(|i| WORDS.get(i))
        .map_or_else(|| n.to_string(), |w| w.to_string())
}

/// Check the question's stated requirements; repair what is safe to repair
/// deterministically, then refine the rest with the model (at most
/// `refine_rounds` rounds), keeping the draft that meets the most.
fn verify_pass(run: &mut Run<'_>, text: String) -> String {
    let m = run.mark();
    let wanted = verify::extract(&run.question);
    if wanted.is_empty() {
        return text;
    }
    // Deterministic repairs first: they change nothing else.
    let (best, repaired) = repair_requirements(&wanted, &text);
    let best_failures = failures(&wanted, &best);
    let first_failures = failures(&wanted, &text);
    let refined = refine(run, &wanted, best, best_failures);
    let n = wanted.len();
    let (outcome, detail) = if first_failures.is_empty() {
        (Outcome::Passed, format!("{n} requirement(s) met"))
    } else if refined.failures.is_empty() {
        (
            Outcome::Repaired,
            format!(
                "{} of {n} requirement(s) failed ({}); {}{} refinement round(s); all met now",
                first_failures.len(),
                first_failures.join("; "),
                if repaired.is_empty() {
                    String::new()
                } else {
                    format!("repaired {} in place; ", repaired.join(", "))
                },
                refined.rounds
            ),
        )
    } else {
        (
            if refined.text != text {
                Outcome::Repaired
            } else {
                Outcome::Flagged
            },
            format!(
                "{} of {n} requirement(s) failed; after {} round(s) still failing: {}",
                first_failures.len(),
                refined.rounds,
                refined.failures.join("; ")
            ),
        )
    };
    run.record(m, GuardKind::Verify, outcome, detail);
    refined.text
}

/// The requirements of `wanted` that `t` fails, each with why.
fn failures(wanted: &[verify::Instruction], t: &str) -> Vec<String> {
    wanted
        .iter()
        .filter_map(|i| {
            let v = verify::verdict(i, t);
            (!v.ok).then(|| format!("{}: {}", i.id(), v.detail))
        })
        .collect()
}

/// `text` with the deterministic repairs that fix a failing requirement
/// and fail fewer in all, and the ids of the requirements they fixed.
fn repair_requirements(wanted: &[verify::Instruction], text: &str) -> (String, Vec<String>) {
    let mut best = text.to_string();
    let mut repaired = Vec::new();
    for i in wanted {
        if !verify::verdict(i, &best).ok {
            if let Some(fixed) = verify::repair(i, &best) {
                if verify::verdict(i, &fixed).ok
                    && failures(wanted, &fixed).len() < failures(wanted, &best).len()
                {
                    best = fixed;
                    repaired.push(i.id().to_string());
                }
            }
        }
    }
    (best, repaired)
}

/// The best answer refinement found.
struct Refined {
    /// The answer that fails the fewest requirements.
    text: String,
    /// The requirements it still fails.
    failures: Vec<String>,
    /// The rounds asked.
    rounds: usize,
}

/// Asks the model to meet the failing requirements again, at most
/// `refine_rounds` times, keeping an answer only when it fails fewer.
fn refine(
    run: &mut Run<'_>,
    wanted: &[verify::Instruction],
    mut best: String,
    mut best_failures: Vec<String>,
) -> Refined {
    let mut rounds = 0;
    while !best_failures.is_empty() && rounds < run.cfg.refine_rounds {
        rounds += 1;
        let ask = format!(
            "Your answer does not yet meet these requirements of the question:\n- {}\nWrite the whole answer again so that it meets every requirement of the question, keeping what was good.",
            best_failures.join("\n- ")
        );
        let call = ModelCall::new(
            run.with_user(&[ChatMessage::assistant(best.clone())], &ask),
            run.cfg.max_tokens,
        )
        .at_temperature(run.cfg.temperature);
        let Ok(r) = run.meter.call(&call) else { break };
        let f = failures(wanted, &r.text);
        if f.len() < best_failures.len() && !r.text.trim().is_empty() {
            best = r.text;
            best_failures = f;
        }
    }
    Refined {
        text: best,
        failures: best_failures,
        rounds,
    }
}
