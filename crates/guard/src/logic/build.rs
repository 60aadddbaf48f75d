//! The solver side: a [`Program`] posted to pumpkin (a lazy-clause-generation
//! CP solver), solved under a time budget, and solved again with the first
//! answer forbidden to decide whether it is unique.
//!
//! Integer terms become linear sums over pumpkin views; every non-linear
//! piece (a product of variables, a division, an integer `If`) gets an
//! auxiliary variable defined at the root, so reification only ever wraps
//! linear (in)equalities and clauses. Pumpkin's integers are `i32` and an
//! affine view multiplies in `i32`, so every coefficient times its
//! variable's bound is kept under [`SOLVER_LIMIT`] (a larger product goes
//! through pumpkin's overflow-safe `times`), and every domain is clamped to
//! it.

use super::parse::CmpOp;
use super::resolve::{constant_value, Program, Sort, Term};
use super::{Limits, LogicError, Solution, Status, Val};
use pumpkin_solver::conflict_resolvers::resolvers::{AnalysisMode, ResolutionResolver};
use pumpkin_solver::core::predicates::{Predicate, PredicateConstructor};
use pumpkin_solver::core::proof::ConstraintTag;
use pumpkin_solver::core::results::{ProblemSolution, SatisfactionResult};
use pumpkin_solver::core::termination::TimeBudget;
use pumpkin_solver::core::variables::{AffineView, DomainId, Literal, TransformableVariable};
use pumpkin_solver::Solver;
use std::collections::{BTreeMap, HashMap};

type View = AffineView<DomainId>;

/// Largest magnitude of any value, bound or coefficient-times-bound given to
/// pumpkin: half of `i32`'s range, so sums of two never wrap.
pub const SOLVER_LIMIT: i64 = 1 << 30;

/// The domain `[-DEFAULT_BOUND, DEFAULT_BOUND]` of an `Int` whose constraints
/// state no bound (z3's integers are unbounded; a finite search is not).
pub const DEFAULT_BOUND: i64 = 1_000_000;

/// Why building stopped early.
enum Stop {
    /// The constraints are already contradictory at the root.
    Unsat,
    Fail(LogicError),
}

impl From<LogicError> for Stop {
    fn from(e: LogicError) -> Self {
        Stop::Fail(e)
    }
}

/// `sum(coef * view) + constant`, with each view once: merging like terms
/// keeps a sum of shared definitions (`a1 = a0 + a0`) from doubling in size.
#[derive(Clone, Default)]
struct Lin {
    terms: Vec<(i64, View)>,
    index: HashMap<View, usize>,
    constant: i64,
}

impl Lin {
    fn constant(value: i64) -> Self {
        Lin {
            constant: value,
            ..Lin::default()
        }
    }

    /// Whether no variable has a non-zero coefficient.
    fn is_constant(&self) -> bool {
        self.terms.iter().all(|(coef, _)| *coef == 0)
    }

    /// Adds `coef * view`; `None` on overflow.
    fn push(&mut self, coef: i64, view: View) -> Option<()> {
        match self.index.get(&view) {
            Some(&at) => {
                let slot = &mut self.terms.get_mut(at)?.0;
                *slot = slot.checked_add(coef)?;
            }
            None => {
                self.index.insert(view, self.terms.len());
                self.terms.push((coef, view));
            }
        }
        Some(())
    }
}

/// A normalised relation `lin REL 0`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rel {
    Le,
    Eq,
    Ne,
}

#[derive(Clone, Copy)]
enum Handle {
    Int(DomainId),
    Bool(Literal),
}

/// One declared variable's domain and whether each end is the default.
struct Domain {
    lower: i64,
    upper: i64,
    lower_is_default: bool,
    upper_is_default: bool,
}

struct Builder<'p> {
    solver: Solver,
    tag: ConstraintTag,
    program: &'p Program,
    handles: Vec<Handle>,
    alias_lin: Vec<Option<Lin>>,
    alias_lit: Vec<Option<Literal>>,
    work: usize,
    max_work: usize,
    line: usize,
}

/// Builds and solves a program.
pub(crate) fn solve_program(program: &Program, limits: &Limits) -> Result<Solution, LogicError> {
    let domains = match infer_domains(program) {
        Some(domains) => domains,
        None => return Ok(Solution::unsat()),
    };
    let mut solver = Solver::default();
    let tag = solver.new_constraint_tag();
    let mut handles = Vec::with_capacity(program.vars.len());
    for (var, domain) in program.vars.iter().zip(&domains) {
        handles.push(match var.sort {
            Sort::Int => Handle::Int(
                solver.new_bounded_integer(clamp_i32(domain.lower), clamp_i32(domain.upper)),
            ),
            Sort::Bool => Handle::Bool(solver.new_literal()),
        });
    }
    let mut builder = Builder {
        solver,
        tag,
        program,
        handles,
        alias_lin: vec![None; program.aliases.len()],
        alias_lit: vec![None; program.aliases.len()],
        work: 0,
        max_work: limits.max_constraints,
        line: 0,
    };
    for (term, line) in &program.asserts {
        builder.line = *line;
        match builder.assert(term, true) {
            Ok(()) => {}
            Err(Stop::Unsat) => return Ok(Solution::unsat()),
            Err(Stop::Fail(e)) => return Err(e),
        }
    }
    builder.search(&domains, limits)
}

fn clamp_i32(v: i64) -> i32 {
    // Domains are clamped to ±SOLVER_LIMIT before this, so nothing is lost.
    v.clamp(-SOLVER_LIMIT, SOLVER_LIMIT) as i32
}

/// Domains from the top-level bounds (`x >= 1`, `1 <= x <= 9`, `x == 3`);
/// `None` when they already contradict each other.
fn infer_domains(program: &Program) -> Option<Vec<Domain>> {
    let mut bounds: Vec<(Option<i64>, Option<i64>)> = vec![(None, None); program.vars.len()];
    let mut pending: Vec<&Term> = program.asserts.iter().map(|(t, _)| t).collect();
    while let Some(term) = pending.pop() {
        match term {
            Term::And(items) => pending.extend(items.iter()),
            Term::Compare(operands, ops) => {
                for (pair, op) in operands.windows(2).zip(ops) {
                    let constant = |t: &Term| constant_value(t, &program.aliases);
                    let (var, op, value) = match (&pair[0], &pair[1]) {
                        (Term::Var(v), other) => match constant(other) {
                            Some(c) => (*v, *op, c),
                            None => continue,
                        },
                        (other, Term::Var(v)) => match constant(other) {
                            Some(c) => (*v, flip(*op), c),
                            None => continue,
                        },
                        _ => continue,
                    };
                    let Some(entry) = bounds.get_mut(var) else {
                        continue;
                    };
                    let raise = |lower: &mut Option<i64>, v: i64| {
                        *lower = Some(lower.map_or(v, |l| l.max(v)));
                    };
                    let lower_to = |upper: &mut Option<i64>, v: i64| {
                        *upper = Some(upper.map_or(v, |u| u.min(v)));
                    };
                    match op {
                        CmpOp::Ge => raise(&mut entry.0, value),
                        CmpOp::Gt => raise(&mut entry.0, value.saturating_add(1)),
                        CmpOp::Le => lower_to(&mut entry.1, value),
                        CmpOp::Lt => lower_to(&mut entry.1, value.saturating_sub(1)),
                        CmpOp::Eq => {
                            raise(&mut entry.0, value);
                            lower_to(&mut entry.1, value);
                        }
                        CmpOp::Ne => {}
                    }
                }
            }
            _ => {}
        }
    }
    let mut domains = Vec::with_capacity(bounds.len());
    for (lower, upper) in bounds {
        let l = lower.unwrap_or_else(|| {
            (-DEFAULT_BOUND).min(upper.map_or(0, |u| u.saturating_sub(DEFAULT_BOUND)))
        });
        let u = upper.unwrap_or_else(|| DEFAULT_BOUND.max(l.saturating_add(DEFAULT_BOUND)));
        let (l, u) = (
            l.clamp(-SOLVER_LIMIT, SOLVER_LIMIT),
            u.clamp(-SOLVER_LIMIT, SOLVER_LIMIT),
        );
        if l > u {
            return None;
        }
        domains.push(Domain {
            lower: l,
            upper: u,
            lower_is_default: lower.is_none_or(|v| v < -SOLVER_LIMIT),
            upper_is_default: upper.is_none_or(|v| v > SOLVER_LIMIT),
        });
    }
    Some(domains)
}

fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        other => other,
    }
}

impl Builder<'_> {
    fn too_large(&self, what: impl Into<String>) -> Stop {
        Stop::Fail(LogicError::TooLarge {
            line: self.line,
            what: what.into(),
        })
    }

    fn step(&mut self, amount: usize) -> Result<(), Stop> {
        self.work = self.work.saturating_add(amount);
        if self.work > self.max_work {
            return Err(self.too_large(format!(
                "the program needs more than {} constraints",
                self.max_work
            )));
        }
        Ok(())
    }

    /// Pumpkin may not create variables once the root is contradictory, and
    /// then the answer is known anyway.
    fn consistent(&self) -> Result<(), Stop> {
        if self.solver.is_inconsistent() {
            Err(Stop::Unsat)
        } else {
            Ok(())
        }
    }

    fn fresh_int(&mut self, lower: i64, upper: i64) -> Result<DomainId, Stop> {
        self.consistent()?;
        self.step(1)?;
        let (l, u) = (
            lower.clamp(-SOLVER_LIMIT, SOLVER_LIMIT),
            upper.clamp(-SOLVER_LIMIT, SOLVER_LIMIT),
        );
        if l > u {
            return Err(Stop::Unsat);
        }
        Ok(self.solver.new_bounded_integer(l as i32, u as i32))
    }

    fn fresh_literal(&mut self) -> Result<Literal, Stop> {
        self.consistent()?;
        self.step(1)?;
        Ok(self.solver.new_literal())
    }

    fn clause(&mut self, literals: &[Literal]) -> Result<(), Stop> {
        self.consistent()?;
        self.step(1)?;
        let predicates: Vec<Predicate> = literals.iter().map(|l| l.get_true_predicate()).collect();
        self.solver.add_clause(predicates, self.tag);
        self.consistent()
    }

    fn overflow(&self) -> Stop {
        self.too_large(format!(
            "a number beyond the solver's range of ±{SOLVER_LIMIT}"
        ))
    }

    fn bounds(&self, lin: &Lin) -> (i128, i128) {
        let mut lo = i128::from(lin.constant);
        let mut hi = lo;
        for (coef, view) in &lin.terms {
            let l = i128::from(self.solver.lower_bound(view)) * i128::from(*coef);
            let u = i128::from(self.solver.upper_bound(view)) * i128::from(*coef);
            lo += l.min(u);
            hi += l.max(u);
        }
        (lo, hi)
    }

    fn scale(&self, mut lin: Lin, factor: i64) -> Result<Lin, Stop> {
        for (coef, _) in &mut lin.terms {
            *coef = coef.checked_mul(factor).ok_or_else(|| self.overflow())?;
        }
        lin.constant = lin
            .constant
            .checked_mul(factor)
            .ok_or_else(|| self.overflow())?;
        Ok(lin)
    }

    fn add(&self, mut a: Lin, b: Lin, subtract: bool) -> Result<Lin, Stop> {
        let b = if subtract { self.scale(b, -1)? } else { b };
        a.constant = a
            .constant
            .checked_add(b.constant)
            .ok_or_else(|| self.overflow())?;
        for (coef, view) in b.terms {
            a.push(coef, view).ok_or_else(|| self.overflow())?;
        }
        Ok(a)
    }

    /// A single view equal to `lin` (a fresh variable when it is a sum).
    fn materialize(&mut self, lin: Lin) -> Result<View, Stop> {
        let mut live = lin.terms.iter().filter(|(coef, _)| *coef != 0);
        if let (Some((1, view)), None) = (live.next(), live.next()) {
            if lin.constant.abs() <= SOLVER_LIMIT {
                return Ok(view.offset(lin.constant as i32));
            }
        }
        let (lo, hi) = self.bounds(&lin);
        let limit = i128::from(SOLVER_LIMIT);
        let fresh = self.fresh_int(
            lo.clamp(-limit, limit) as i64,
            hi.clamp(-limit, limit) as i64,
        )?;
        let difference = self.add(lin, view_lin(fresh.scaled(1)), true)?;
        self.post(difference, Rel::Eq, None)?;
        Ok(fresh.scaled(1))
    }

    /// Pumpkin views for a sum's terms, each within [`SOLVER_LIMIT`], for a
    /// constraint against `rhs`. pumpkin's linear propagators add up the
    /// terms' bounds (and subtract them from `rhs`) in `i32`, so the sum of
    /// every term's reach plus `|rhs|` must fit one: past it pumpkin panics
    /// in checked builds and wraps, propagating wrong bounds, in release
    /// ones (found by fuzzing). Such a constraint is refused as too large.
    fn views(&mut self, terms: Vec<(i64, View)>, rhs: i64) -> Result<Vec<View>, Stop> {
        let mut views = Vec::with_capacity(terms.len());
        let mut total = rhs.unsigned_abs();
        for (coef, view) in terms {
            if coef == 0 {
                continue;
            }
            let reach = i64::from(self.solver.lower_bound(&view).unsigned_abs())
                .max(i64::from(self.solver.upper_bound(&view).unsigned_abs()));
            let fits = coef.abs() <= SOLVER_LIMIT
                && reach
                    .checked_mul(coef.abs())
                    .is_some_and(|p| p <= SOLVER_LIMIT);
            if fits {
                total += reach.unsigned_abs() * coef.unsigned_abs();
                if total > i32::MAX as u64 {
                    return Err(self.overflow());
                }
                views.push(view.scaled(coef as i32));
                continue;
            }
            if coef.abs() > SOLVER_LIMIT {
                return Err(self.overflow());
            }
            // coef * view would overflow pumpkin's i32 view arithmetic:
            // a product variable clamped to the solver's range instead.
            let factor = self.fresh_int(coef, coef)?;
            let product = self.fresh_int(-SOLVER_LIMIT, SOLVER_LIMIT)?;
            self.solver
                .add_constraint(pumpkin_solver::times(view, factor, product, self.tag))
                .post();
            self.consistent()?;
            total += SOLVER_LIMIT as u64;
            if total > i32::MAX as u64 {
                return Err(self.overflow());
            }
            views.push(product.scaled(1));
        }
        Ok(views)
    }

    /// Posts `lin REL 0`, or reifies it as `literal <-> (lin REL 0)`.
    fn post(&mut self, lin: Lin, rel: Rel, reify: Option<Literal>) -> Result<(), Stop> {
        self.consistent()?;
        self.step(1)?;
        if lin.is_constant() {
            let holds = match rel {
                Rel::Le => lin.constant <= 0,
                Rel::Eq => lin.constant == 0,
                Rel::Ne => lin.constant != 0,
            };
            return match (reify, holds) {
                (None, true) => Ok(()),
                (None, false) => Err(Stop::Unsat),
                (Some(l), true) => self.clause(&[l]),
                (Some(l), false) => self.clause(&[!l]),
            };
        }
        let rhs = lin.constant.checked_neg().ok_or_else(|| self.overflow())?;
        if rhs.abs() > SOLVER_LIMIT {
            return Err(self.overflow());
        }
        let views = self.views(lin.terms, rhs)?;
        let rhs = rhs as i32;
        let tag = self.tag;
        match (rel, reify) {
            (Rel::Le, None) => self
                .solver
                .add_constraint(pumpkin_solver::less_than_or_equals(views, rhs, tag))
                .post(),
            (Rel::Le, Some(l)) => self
                .solver
                .add_constraint(pumpkin_solver::less_than_or_equals(views, rhs, tag))
                .reify(l),
            (Rel::Eq, None) => self
                .solver
                .add_constraint(pumpkin_solver::equals(views, rhs, tag))
                .post(),
            (Rel::Eq, Some(l)) => self
                .solver
                .add_constraint(pumpkin_solver::equals(views, rhs, tag))
                .reify(l),
            (Rel::Ne, None) => self
                .solver
                .add_constraint(pumpkin_solver::not_equals(views, rhs, tag))
                .post(),
            (Rel::Ne, Some(l)) => self
                .solver
                .add_constraint(pumpkin_solver::not_equals(views, rhs, tag))
                .reify(l),
        }
        self.consistent()
    }

    /// Posts `lin = 0` only when `literal` holds.
    fn post_equal_if(&mut self, lin: Lin, literal: Literal) -> Result<(), Stop> {
        self.consistent()?;
        self.step(1)?;
        if lin.is_constant() {
            return if lin.constant == 0 {
                Ok(())
            } else {
                self.clause(&[!literal])
            };
        }
        let rhs = lin.constant.checked_neg().ok_or_else(|| self.overflow())?;
        if rhs.abs() > SOLVER_LIMIT {
            return Err(self.overflow());
        }
        let views = self.views(lin.terms, rhs)?;
        self.solver
            .add_constraint(pumpkin_solver::equals(views, rhs as i32, self.tag))
            .implied_by(literal);
        self.consistent()
    }

    /// `a op b` as `lin REL 0`.
    fn relation(&self, a: Lin, op: CmpOp, b: Lin) -> Result<(Lin, Rel), Stop> {
        Ok(match op {
            CmpOp::Le => (self.add(a, b, true)?, Rel::Le),
            CmpOp::Lt => {
                let mut d = self.add(a, b, true)?;
                d.constant = d.constant.checked_add(1).ok_or_else(|| self.overflow())?;
                (d, Rel::Le)
            }
            CmpOp::Ge => (self.add(b, a, true)?, Rel::Le),
            CmpOp::Gt => {
                let mut d = self.add(b, a, true)?;
                d.constant = d.constant.checked_add(1).ok_or_else(|| self.overflow())?;
                (d, Rel::Le)
            }
            CmpOp::Eq => (self.add(a, b, true)?, Rel::Eq),
            CmpOp::Ne => (self.add(a, b, true)?, Rel::Ne),
        })
    }

    /// The negation of `lin REL 0`.
    fn negate(&self, lin: Lin, rel: Rel) -> Result<(Lin, Rel), Stop> {
        Ok(match rel {
            // not (lin <= 0)  <=>  -lin + 1 <= 0
            Rel::Le => {
                let mut d = self.scale(lin, -1)?;
                d.constant = d.constant.checked_add(1).ok_or_else(|| self.overflow())?;
                (d, Rel::Le)
            }
            Rel::Eq => (lin, Rel::Ne),
            Rel::Ne => (lin, Rel::Eq),
        })
    }

    /// The linear sum equal to an integer term (auxiliary variables for its
    /// non-linear pieces).
    fn lin(&mut self, term: &Term) -> Result<Lin, Stop> {
        self.step(1)?;
        match term {
            Term::Const(v) => Ok(Lin::constant(*v)),
            Term::Var(i) => match self.handles.get(*i) {
                Some(Handle::Int(d)) => Ok(view_lin(d.scaled(1))),
                _ => Err(Stop::Fail(self.sort_error())),
            },
            Term::Alias(a) => self.alias_lin(*a),
            Term::Neg(t) => {
                let inner = self.lin(t)?;
                self.scale(inner, -1)
            }
            Term::Add(items) => {
                let mut acc = Lin::default();
                for (negated, item) in items {
                    let next = self.lin(item)?;
                    acc = self.add(acc, next, *negated)?;
                }
                Ok(acc)
            }
            Term::Mul(items) => {
                let mut acc = Lin::constant(1);
                for item in items {
                    let next = self.lin(item)?;
                    acc = self.multiply(acc, next)?;
                }
                Ok(acc)
            }
            Term::Div(t, k) => self.division_lin(t, *k, true),
            Term::Mod(t, k) => self.division_lin(t, *k, false),
            Term::Ite(c, t, e) => self.ite_lin(c, t, e),
            _ => Err(Stop::Fail(self.sort_error())),
        }
    }

    /// The sum of alias `a`, lowered once and then shared.
    fn alias_lin(&mut self, a: usize) -> Result<Lin, Stop> {
        if let Some(Some(lin)) = self.alias_lin.get(a) {
            return Ok(lin.clone());
        }
        let alias = self
            .program
            .aliases
            .get(a)
            .ok_or_else(|| self.sort_error())?;
        let lin = self.lin(&alias.term)?;
        if let Some(slot) = self.alias_lin.get_mut(a) {
            *slot = Some(lin.clone());
        }
        Ok(lin)
    }

    /// The quotient (`is_div`) or remainder of `t` by the constant `k`.
    fn division_lin(&mut self, t: &Term, k: i64, is_div: bool) -> Result<Lin, Stop> {
        let x = self.lin(t)?;
        let (lo, hi) = self.bounds(&x);
        let divisor = i128::from(k);
        let reach = lo.abs().max(hi.abs()) / divisor.abs() + 1;
        let limit = i128::from(SOLVER_LIMIT);
        let reach = reach.min(limit) as i64;
        let quotient = self.fresh_int(-reach, reach)?;
        let remainder = self.fresh_int(0, k.saturating_abs().saturating_sub(1))?;
        // x = k * q + r with 0 <= r < |k|: z3's (Euclidean) div and mod.
        let kq = self.scale(view_lin(quotient.scaled(1)), k)?;
        let rest = self.add(x, kq, true)?;
        let difference = self.add(rest, view_lin(remainder.scaled(1)), true)?;
        self.post(difference, Rel::Eq, None)?;
        Ok(view_lin(if is_div {
            quotient.scaled(1)
        } else {
            remainder.scaled(1)
        }))
    }

    /// An integer `If(c, t, e)`.
    fn ite_lin(&mut self, c: &Term, t: &Term, e: &Term) -> Result<Lin, Stop> {
        let condition = self.literal(c)?;
        let then = self.lin(t)?;
        let otherwise = self.lin(e)?;
        if then.is_constant() && otherwise.is_constant() {
            // If(c, a, b) = b + (a - b) * c: no new variable.
            let step = then
                .constant
                .checked_sub(otherwise.constant)
                .ok_or_else(|| self.overflow())?;
            let mut lin = Lin::constant(otherwise.constant);
            lin.push(step, condition.get_integer_variable())
                .ok_or_else(|| self.overflow())?;
            return Ok(lin);
        }
        let (lo_t, hi_t) = self.bounds(&then);
        let (lo_e, hi_e) = self.bounds(&otherwise);
        let limit = i128::from(SOLVER_LIMIT);
        let value = self.fresh_int(
            lo_t.min(lo_e).clamp(-limit, limit) as i64,
            hi_t.max(hi_e).clamp(-limit, limit) as i64,
        )?;
        let value_lin = view_lin(value.scaled(1));
        let when_true = self.add(then, value_lin.clone(), true)?;
        self.post_equal_if(when_true, condition)?;
        let when_false = self.add(otherwise, value_lin.clone(), true)?;
        self.post_equal_if(when_false, !condition)?;
        Ok(value_lin)
    }

    fn multiply(&mut self, a: Lin, b: Lin) -> Result<Lin, Stop> {
        if a.is_constant() {
            return self.scale(b, a.constant);
        }
        if b.is_constant() {
            return self.scale(a, b.constant);
        }
        // A product of two variables: pumpkin's bounds-consistent `times`.
        let (lo_a, hi_a) = self.bounds(&a);
        let (lo_b, hi_b) = self.bounds(&b);
        let corners = [lo_a * lo_b, lo_a * hi_b, hi_a * lo_b, hi_a * hi_b];
        let limit = i128::from(SOLVER_LIMIT);
        let lo = corners
            .iter()
            .copied()
            .min()
            .unwrap_or(0)
            .clamp(-limit, limit);
        let hi = corners
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .clamp(-limit, limit);
        let x = self.materialize(a)?;
        let y = self.materialize(b)?;
        let product = self.fresh_int(lo as i64, hi as i64)?;
        self.solver
            .add_constraint(pumpkin_solver::times(x, y, product, self.tag))
            .post();
        self.consistent()?;
        Ok(view_lin(product.scaled(1)))
    }

    fn sort_error(&self) -> LogicError {
        LogicError::Invalid {
            line: self.line,
            what: "a term of the wrong sort".into(),
        }
    }

    /// A literal equivalent to a Boolean term.
    fn literal(&mut self, term: &Term) -> Result<Literal, Stop> {
        self.step(1)?;
        match term {
            Term::BoolConst(true) => Ok(self.solver.get_true_literal()),
            Term::BoolConst(false) => Ok(self.solver.get_false_literal()),
            Term::Var(i) => match self.handles.get(*i) {
                Some(Handle::Bool(l)) => Ok(*l),
                _ => Err(Stop::Fail(self.sort_error())),
            },
            Term::Alias(a) => self.alias_literal(*a),
            Term::Not(t) => Ok(!self.literal(t)?),
            Term::And(items) | Term::Or(items) => {
                let is_and = matches!(term, Term::And(_));
                let mut parts = Vec::with_capacity(items.len());
                for item in items {
                    parts.push(self.literal(item)?);
                }
                self.junction(parts, is_and)
            }
            Term::Implies(a, b) => {
                let a = self.literal(a)?;
                let b = self.literal(b)?;
                self.junction(vec![!a, b], false)
            }
            Term::Xor(a, b) => {
                let a = self.literal(a)?;
                let b = self.literal(b)?;
                self.equivalence(a, b, false)
            }
            Term::BoolEq(a, b, eq) => {
                let a = self.literal(a)?;
                let b = self.literal(b)?;
                self.equivalence(a, b, *eq)
            }
            Term::Ite(c, t, e) => self.ite_literal(c, t, e),
            Term::Compare(operands, ops) => self.compare_literal(operands, ops),
            Term::Distinct(items) => self.distinct_literal(items),
            _ => Err(Stop::Fail(self.sort_error())),
        }
    }

    /// The literal of alias `a`, built once and then shared.
    fn alias_literal(&mut self, a: usize) -> Result<Literal, Stop> {
        if let Some(Some(lit)) = self.alias_lit.get(a) {
            return Ok(*lit);
        }
        let alias = self
            .program
            .aliases
            .get(a)
            .ok_or_else(|| self.sort_error())?;
        let lit = self.literal(&alias.term)?;
        if let Some(slot) = self.alias_lit.get_mut(a) {
            *slot = Some(lit);
        }
        Ok(lit)
    }

    /// A Boolean `If(c, t, e)`.
    fn ite_literal(&mut self, c: &Term, t: &Term, e: &Term) -> Result<Literal, Stop> {
        let c = self.literal(c)?;
        let t = self.literal(t)?;
        let e = self.literal(e)?;
        let r = self.fresh_literal()?;
        self.clause(&[!c, !t, r])?;
        self.clause(&[!c, t, !r])?;
        self.clause(&[c, !e, r])?;
        self.clause(&[c, e, !r])?;
        Ok(r)
    }

    /// A chain of comparisons `a op b op c`: each pair reified, then their
    /// conjunction.
    fn compare_literal(&mut self, operands: &[Term], ops: &[CmpOp]) -> Result<Literal, Stop> {
        let mut parts = Vec::with_capacity(ops.len());
        for (pair, op) in operands.windows(2).zip(ops) {
            let a = self.lin(&pair[0])?;
            let b = self.lin(&pair[1])?;
            let (lin, rel) = self.relation(a, *op, b)?;
            let r = self.fresh_literal()?;
            self.post(lin, rel, Some(r))?;
            parts.push(r);
        }
        if parts.len() == 1 {
            return Ok(parts[0]);
        }
        self.junction(parts, true)
    }

    /// `Distinct(items)`: every pair reified as different, then their
    /// conjunction.
    fn distinct_literal(&mut self, items: &[Term]) -> Result<Literal, Stop> {
        let lins = self.lins(items)?;
        self.step(lins.len().saturating_mul(lins.len()) / 2)?;
        let mut parts = Vec::new();
        for i in 0..lins.len() {
            for j in i + 1..lins.len() {
                let d = self.add(lins[i].clone(), lins[j].clone(), true)?;
                let r = self.fresh_literal()?;
                self.post(d, Rel::Ne, Some(r))?;
                parts.push(r);
            }
        }
        self.junction(parts, true)
    }

    fn lins(&mut self, items: &[Term]) -> Result<Vec<Lin>, Stop> {
        items.iter().map(|item| self.lin(item)).collect()
    }

    /// A literal for the conjunction (or disjunction) of `parts`.
    fn junction(&mut self, parts: Vec<Literal>, is_and: bool) -> Result<Literal, Stop> {
        if parts.is_empty() {
            return Ok(if is_and {
                self.solver.get_true_literal()
            } else {
                self.solver.get_false_literal()
            });
        }
        if parts.len() == 1 {
            return Ok(parts[0]);
        }
        // An Or is the negation of the And of the negations.
        let parts: Vec<Literal> = if is_and {
            parts
        } else {
            parts.into_iter().map(|l| !l).collect()
        };
        let r = self.fresh_literal()?;
        let mut back = Vec::with_capacity(parts.len() + 1);
        back.push(r);
        for part in &parts {
            self.clause(&[!r, *part])?;
            back.push(!*part);
        }
        self.clause(&back)?;
        Ok(if is_and { r } else { !r })
    }

    /// A literal for `a == b` (`eq`) or `a != b`.
    fn equivalence(&mut self, a: Literal, b: Literal, eq: bool) -> Result<Literal, Stop> {
        let r = self.fresh_literal()?;
        let b = if eq { b } else { !b };
        self.clause(&[!r, !a, b])?;
        self.clause(&[!r, a, !b])?;
        self.clause(&[r, a, b])?;
        self.clause(&[r, !a, !b])?;
        Ok(r)
    }

    /// Asserts `term` (or its negation), posting constraints directly where
    /// possible so that the common case needs no reification.
    fn assert(&mut self, term: &Term, positive: bool) -> Result<(), Stop> {
        self.step(1)?;
        match term {
            Term::BoolConst(b) => {
                if *b == positive {
                    Ok(())
                } else {
                    Err(Stop::Unsat)
                }
            }
            Term::Not(t) => self.assert(t, !positive),
            Term::And(items) if positive => items.iter().try_for_each(|t| self.assert(t, true)),
            Term::Or(items) if !positive => items.iter().try_for_each(|t| self.assert(t, false)),
            Term::And(items) | Term::Or(items) => {
                let mut clause = Vec::with_capacity(items.len());
                for item in items {
                    let l = self.literal(item)?;
                    clause.push(if positive { l } else { !l });
                }
                self.clause(&clause)
            }
            Term::Implies(a, b) if positive => {
                let a = self.literal(a)?;
                let b = self.literal(b)?;
                self.clause(&[!a, b])
            }
            Term::Implies(a, b) => {
                self.assert(a, true)?;
                self.assert(b, false)
            }
            Term::Compare(operands, ops) if positive || ops.len() == 1 => {
                for (pair, op) in operands.windows(2).zip(ops) {
                    let a = self.lin(&pair[0])?;
                    let b = self.lin(&pair[1])?;
                    let (lin, rel) = self.relation(a, *op, b)?;
                    let (lin, rel) = if positive {
                        (lin, rel)
                    } else {
                        self.negate(lin, rel)?
                    };
                    self.post(lin, rel, None)?;
                }
                Ok(())
            }
            Term::Distinct(items) if positive => {
                let lins = self.lins(items)?;
                self.step(lins.len().saturating_mul(lins.len()) / 2)?;
                for i in 0..lins.len() {
                    for j in i + 1..lins.len() {
                        let d = self.add(lins[i].clone(), lins[j].clone(), true)?;
                        self.post(d, Rel::Ne, None)?;
                    }
                }
                Ok(())
            }
            _ => {
                let l = self.literal(term)?;
                self.clause(&[if positive { l } else { !l }])
            }
        }
    }

    fn search(mut self, domains: &[Domain], limits: &Limits) -> Result<Solution, LogicError> {
        if self.solver.is_inconsistent() {
            return Ok(Solution::unsat());
        }
        let interest: Vec<usize> = if self.program.interest.is_empty() {
            (0..self.program.vars.len()).collect()
        } else {
            self.program.interest.clone()
        };
        let mut brancher = self.solver.default_brancher();
        let mut resolver = ResolutionResolver::new(AnalysisMode::OneUIP, false, false);
        let mut budget = TimeBudget::starting_now(limits.time_budget);
        let found = match self
            .solver
            .satisfy(&mut brancher, &mut budget, &mut resolver)
        {
            SatisfactionResult::Satisfiable(satisfiable) => {
                asked_values(&self.handles, &interest, &satisfiable.solution())
            }
            SatisfactionResult::Unsatisfiable(..) => return Ok(Solution::unsat()),
            SatisfactionResult::Unknown(..) => {
                let mut solution = Solution::unknown();
                solution.notes.push(format!(
                    "no answer within the time budget of {:?}",
                    limits.time_budget
                ));
                return Ok(solution);
            }
        };
        let (mut solution, blocking) = self.first_solution(&found, domains);
        if blocking.is_empty() {
            solution.unique = true;
            return Ok(solution);
        }
        // Forbid this answer (on the asked variables only) and look again.
        self.solver.add_clause(blocking, self.tag);
        if self.solver.is_inconsistent() {
            solution.unique = true;
            return Ok(solution);
        }
        match self
            .solver
            .satisfy(&mut brancher, &mut budget, &mut resolver)
        {
            SatisfactionResult::Satisfiable(_) => {}
            SatisfactionResult::Unsatisfiable(..) => solution.unique = true,
            SatisfactionResult::Unknown(..) => solution.notes.push(format!(
                "uniqueness not proven within the time budget of {:?}",
                limits.time_budget
            )),
        }
        Ok(solution)
    }

    /// The solution made of the values `found` (not yet known unique),
    /// noting values at a default bound, and the predicates that forbid
    /// it.
    fn first_solution(
        &self,
        found: &[(usize, Val)],
        domains: &[Domain],
    ) -> (Solution, Vec<Predicate>) {
        let mut solution = Solution {
            status: Status::Sat,
            model: BTreeMap::new(),
            unique: false,
            notes: Vec::new(),
        };
        let mut blocking = Vec::with_capacity(found.len());
        for (i, value) in found {
            let name = self.program.vars[*i].name.clone();
            match (value, self.handles[*i]) {
                (Val::Int(v), Handle::Int(d)) => {
                    let domain = &domains[*i];
                    if (domain.lower_is_default && *v == domain.lower)
                        || (domain.upper_is_default && *v == domain.upper)
                    {
                        solution.notes.push(format!(
                            "{name} = {v} is at the default bound ±{DEFAULT_BOUND} of an unbounded Int"
                        ));
                    }
                    blocking.push(d.disequality_predicate(clamp_i32(*v)));
                }
                (Val::Bool(b), Handle::Bool(l)) => blocking.push(if *b {
                    l.get_false_predicate()
                } else {
                    l.get_true_predicate()
                }),
                _ => {}
            }
            solution.model.insert(name, *value);
        }
        (solution, blocking)
    }
}

/// The values of the asked variables (`interest`) in a solution.
fn asked_values(
    handles: &[Handle],
    interest: &[usize],
    solution: &impl ProblemSolution,
) -> Vec<(usize, Val)> {
    interest
        .iter()
        .filter_map(|&i| {
            let value = match handles.get(i)? {
                Handle::Int(d) => Val::Int(i64::from(solution.get_integer_value(*d))),
                Handle::Bool(l) => Val::Bool(solution.get_literal_value(*l)),
            };
            Some((i, value))
        })
        .collect()
}

fn view_lin(view: View) -> Lin {
    let mut lin = Lin::default();
    lin.index.insert(view, 0);
    lin.terms.push((1, view));
    lin
}
