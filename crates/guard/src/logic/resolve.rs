//! Meaning: statements to a typed constraint program.
//!
//! Names are resolved when a statement is read, as Python would, so a later
//! rebinding cannot change an earlier constraint and no definition can refer
//! to itself. A name bound to an expression (`total = a + b`) becomes an
//! [`Term::Alias`]: lowered once and shared, so definitions that reuse each
//! other cannot blow up exponentially.

use super::parse::{is_reserved, CmpOp, Expr, ExprKind, Stmt};
use super::{Limits, LogicError};
use std::collections::HashMap;

/// The sort of a z3 term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sort {
    Int,
    Bool,
}

impl Sort {
    fn name(self) -> &'static str {
        match self {
            Sort::Int => "Int",
            Sort::Bool => "Bool",
        }
    }
}

/// A typed term; integer arithmetic is checked at construction.
#[derive(Debug, Clone)]
pub(crate) enum Term {
    Const(i64),
    BoolConst(bool),
    Var(usize),
    Alias(usize),
    Neg(Box<Term>),
    Add(Vec<(bool, Term)>),
    Mul(Vec<Term>),
    /// Integer division by a non-zero constant (z3's: floor for a positive
    /// divisor, remainder always non-negative).
    Div(Box<Term>, i64),
    Mod(Box<Term>, i64),
    /// Integer comparisons `a op b op c`.
    Compare(Vec<Term>, Vec<CmpOp>),
    /// `a == b` (`true`) or `a != b` (`false`) between Booleans.
    BoolEq(Box<Term>, Box<Term>, bool),
    And(Vec<Term>),
    Or(Vec<Term>),
    Not(Box<Term>),
    Implies(Box<Term>, Box<Term>),
    Xor(Box<Term>, Box<Term>),
    Ite(Box<Term>, Box<Term>, Box<Term>),
    Distinct(Vec<Term>),
}

/// A declared z3 constant.
#[derive(Debug, Clone)]
pub(crate) struct Var {
    pub name: String,
    pub sort: Sort,
}

/// A named expression.
#[derive(Debug, Clone)]
pub(crate) struct Alias {
    pub term: Term,
    pub sort: Sort,
    /// Its value when it is a constant integer (so bounds can use it).
    pub constant: Option<i64>,
}

/// A whole program, ready to be built into a solver.
#[derive(Debug, Default)]
pub(crate) struct Program {
    pub vars: Vec<Var>,
    pub aliases: Vec<Alias>,
    /// The asserted constraints and their lines.
    pub asserts: Vec<(Term, usize)>,
    /// The variables whose values were asked for, in order; empty: all.
    pub interest: Vec<usize>,
}

#[derive(Debug, Clone, Copy)]
enum Binding {
    Var(usize),
    Alias(usize),
    /// A Python list of terms (`cells = [a, b, c]`), indexing `lists`.
    List(usize),
    Solver,
    Model,
    CheckResult,
}

struct Resolver<'l> {
    limits: &'l Limits,
    program: Program,
    names: HashMap<String, Binding>,
    /// z3 name to variable: two declarations of one name are one constant.
    by_z3_name: HashMap<String, usize>,
    asked_all: bool,
    /// The tree depth of each alias, indexed like `program.aliases`.
    alias_depths: Vec<usize>,
    /// Named lists: each item is an alias, so using a list copies indices.
    lists: Vec<Vec<usize>>,
    /// List items copied so far, bounded so reuse cannot exhaust memory.
    copied: usize,
}

/// A resolved term with its sort and the depth of its tree (aliases
/// included), which bounds every later recursion over it.
struct Typed {
    term: Term,
    sort: Sort,
    depth: usize,
}

/// Resolves parsed statements into a [`Program`].
pub(crate) fn resolve(stmts: &[Stmt], limits: &Limits) -> Result<Program, LogicError> {
    let mut resolver = Resolver {
        limits,
        program: Program::default(),
        names: HashMap::new(),
        by_z3_name: HashMap::new(),
        asked_all: false,
        alias_depths: Vec::new(),
        lists: Vec::new(),
        copied: 0,
    };
    for stmt in stmts {
        resolver.statement(stmt)?;
    }
    let mut program = resolver.program;
    if resolver.asked_all {
        program.interest.clear();
    }
    Ok(program)
}

fn invalid(line: usize, what: impl Into<String>) -> LogicError {
    LogicError::Invalid {
        line,
        what: what.into(),
    }
}

fn describe(expr: &Expr) -> String {
    match &expr.kind {
        ExprKind::Name(n) => format!("`{n}`"),
        ExprKind::Call(f, ..) => format!("`{f}(...)`"),
        ExprKind::Method(_, m, ..) => format!("`.{m}(...)`"),
        ExprKind::Str(_) => "a string".into(),
        ExprKind::List(_) => "a list".into(),
        _ => "an expression".into(),
    }
}

/// Arguments with a single list argument spread out, as z3py allows for
/// `And([...])`, `Sum([...])` and `Distinct([...])`.
fn spread(args: &[Expr]) -> &[Expr] {
    match args {
        [Expr {
            kind: ExprKind::List(items),
            ..
        }] => items,
        _ => args,
    }
}

impl Resolver<'_> {
    /// The terms of an argument list where a single list argument (written
    /// out or named) is spread, as z3py allows for `And([...])`,
    /// `Sum(cells)` and `Distinct(row)`.
    fn items(&mut self, args: &[Expr], depth: usize) -> Result<Vec<Typed>, LogicError> {
        if let [Expr {
            kind: ExprKind::Name(name),
            line,
        }] = args
        {
            if let Some(Binding::List(list)) = self.names.get(name) {
                let items = self.lists[*list].clone();
                self.copied = self.copied.saturating_add(items.len());
                if self.copied > self.limits.max_constraints {
                    return Err(LogicError::TooLarge {
                        line: *line,
                        what: format!(
                            "lists used more than {} items in all",
                            self.limits.max_constraints
                        ),
                    });
                }
                return items
                    .into_iter()
                    .map(|a| {
                        let alias = &self.program.aliases[a];
                        self.typed(Term::Alias(a), alias.sort, self.alias_depth(a) + 1, *line)
                    })
                    .collect();
            }
        }
        spread(args)
            .iter()
            .map(|arg| self.term(arg, depth + 1))
            .collect()
    }

    /// Stores a resolved term as an alias and returns its index.
    fn store(&mut self, typed: Typed) -> usize {
        let constant = if typed.sort == Sort::Int {
            self.constant(&typed.term)
        } else {
            None
        };
        let index = self.program.aliases.len();
        self.program.aliases.push(Alias {
            term: typed.term,
            sort: typed.sort,
            constant,
        });
        self.alias_depths.push(typed.depth);
        index
    }

    fn max_term_depth(&self) -> usize {
        self.limits.max_depth.saturating_mul(4)
    }

    fn statement(&mut self, stmt: &Stmt) -> Result<(), LogicError> {
        match stmt {
            Stmt::Import => Ok(()),
            Stmt::Assign {
                line,
                targets,
                value,
            } => self.assign(*line, targets, value),
            Stmt::Expr(expr) => self.effect(expr),
        }
    }

    fn declare(&mut self, line: usize, z3_name: &str, sort: Sort) -> Result<usize, LogicError> {
        if let Some(&index) = self.by_z3_name.get(z3_name) {
            let existing = self.program.vars[index].sort;
            if existing != sort {
                return Err(invalid(
                    line,
                    format!(
                        "`{z3_name}` is declared both {} and {}",
                        existing.name(),
                        sort.name()
                    ),
                ));
            }
            return Ok(index);
        }
        let valid = !z3_name.is_empty()
            && z3_name.len() <= 64
            && z3_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(invalid(
                line,
                format!("bad variable name {z3_name:?} (letters, digits and _ only)"),
            ));
        }
        if self.program.vars.len() >= self.limits.max_variables {
            return Err(LogicError::TooLarge {
                line,
                what: format!("more than {} variables", self.limits.max_variables),
            });
        }
        let index = self.program.vars.len();
        self.program.vars.push(Var {
            name: z3_name.to_string(),
            sort,
        });
        self.by_z3_name.insert(z3_name.to_string(), index);
        Ok(index)
    }

    /// The names in the string argument of `Int`/`Ints`/`Bool`/`Bools`.
    fn declared_names<'e>(
        &self,
        line: usize,
        function: &str,
        args: &'e [Expr],
        kwargs: &[(String, Expr)],
    ) -> Result<Vec<&'e str>, LogicError> {
        if let Some((key, _)) = kwargs.first() {
            return Err(LogicError::unsupported(
                line,
                &format!("the keyword argument `{key}=` of {function}"),
                "declare with a name only, e.g. Int('x')",
            ));
        }
        match args {
            [Expr {
                kind: ExprKind::Str(text),
                ..
            }] => {
                let names: Vec<&str> = text.split_whitespace().collect();
                if names.len() > self.limits.max_variables {
                    return Err(LogicError::TooLarge {
                        line,
                        what: format!("more than {} variables", self.limits.max_variables),
                    });
                }
                Ok(names)
            }
            [other] if matches!(other.kind, ExprKind::Mod(..)) => Err(LogicError::unsupported(
                line,
                "string formatting with `%`",
                "write the names out: Ints('x0 x1 x2')",
            )),
            _ => Err(invalid(
                line,
                format!("{function} takes one string of names, e.g. {function}('a b c')"),
            )),
        }
    }

    fn bind(&mut self, line: usize, target: &str, binding: Binding) -> Result<(), LogicError> {
        if is_reserved(target) || is_function(target) {
            return Err(invalid(line, format!("`{target}` cannot be assigned to")));
        }
        self.names.insert(target.to_string(), binding);
        Ok(())
    }

    fn assign(&mut self, line: usize, targets: &[String], value: &Expr) -> Result<(), LogicError> {
        if let ExprKind::Call(function, args, kwargs) = &value.kind {
            let sort = match function.as_str() {
                "Int" | "Ints" => Some(Sort::Int),
                "Bool" | "Bools" => Some(Sort::Bool),
                _ => None,
            };
            if let Some(sort) = sort {
                let names = self.declared_names(line, function, args, kwargs)?;
                let plural = function.ends_with('s');
                if !plural && names.len() != 1 {
                    return Err(invalid(
                        line,
                        format!("{function} declares one variable; use {function}s('a b c')"),
                    ));
                }
                if names.len() != targets.len() {
                    return Err(invalid(
                        line,
                        format!(
                            "{} names on the left but {} declared by {function}(...)",
                            targets.len(),
                            names.len()
                        ),
                    ));
                }
                for (target, name) in targets.iter().zip(names) {
                    let index = self.declare(line, name, sort)?;
                    self.bind(line, target, Binding::Var(index))?;
                }
                return Ok(());
            }
            if function == "Solver" {
                if !args.is_empty() || !kwargs.is_empty() || targets.len() != 1 {
                    return Err(invalid(line, "write `s = Solver()`"));
                }
                return self.bind(line, &targets[0], Binding::Solver);
            }
        }
        if let ExprKind::Method(receiver, method, args, _) = &value.kind {
            if self.is_solver(receiver) && args.is_empty() && targets.len() == 1 {
                match method.as_str() {
                    "model" => return self.bind(line, &targets[0], Binding::Model),
                    "check" => return self.bind(line, &targets[0], Binding::CheckResult),
                    _ => {}
                }
            }
        }
        if targets.len() != 1 {
            return Err(LogicError::unsupported(
                line,
                "unpacking an expression into several names",
                "assign one name at a time",
            ));
        }
        if let ExprKind::List(items) = &value.kind {
            let mut stored = Vec::with_capacity(items.len());
            for item in items {
                let typed = self.term(item, 1)?;
                stored.push(self.store(typed));
            }
            let list = self.lists.len();
            self.lists.push(stored);
            return self.bind(line, &targets[0], Binding::List(list));
        }
        let typed = self.term(value, 0)?;
        let index = self.store(typed);
        self.bind(line, &targets[0], Binding::Alias(index))
    }

    fn is_solver(&self, expr: &Expr) -> bool {
        matches!(&expr.kind, ExprKind::Name(n) if matches!(self.names.get(n), Some(Binding::Solver)))
    }

    fn is_model(&self, expr: &Expr) -> bool {
        match &expr.kind {
            ExprKind::Name(n) => matches!(self.names.get(n), Some(Binding::Model)),
            ExprKind::Method(receiver, method, args, _) => {
                method == "model" && args.is_empty() && self.is_solver(receiver)
            }
            _ => false,
        }
    }

    /// A statement evaluated for its effect: adding constraints, checking,
    /// printing.
    fn effect(&mut self, expr: &Expr) -> Result<(), LogicError> {
        let line = expr.line;
        match &expr.kind {
            ExprKind::Method(receiver, method, args, kwargs) if self.is_solver(receiver) => {
                if let Some((key, _)) = kwargs.first() {
                    return Err(LogicError::unsupported(
                        line,
                        &format!("the keyword argument `{key}=`"),
                        "pass constraints positionally",
                    ));
                }
                match method.as_str() {
                    "add" | "append" | "assert_exprs" => self.assert_all(args),
                    "check" | "model" if args.is_empty() => Ok(()),
                    other => Err(LogicError::unsupported(
                        line,
                        &format!("the solver method `.{other}`"),
                        "only s.add(...), s.check() and s.model()",
                    )),
                }
            }
            ExprKind::Call(function, args, kwargs) if function == "solve" => {
                if let Some((key, _)) = kwargs.first() {
                    return Err(LogicError::unsupported(
                        line,
                        &format!("the keyword argument `{key}=`"),
                        "pass constraints positionally",
                    ));
                }
                self.asked_all = true;
                self.assert_all(args)
            }
            ExprKind::Call(function, args, kwargs) if function == "print" => {
                if let Some((key, _)) = kwargs.first() {
                    return Err(LogicError::unsupported(
                        line,
                        &format!("the keyword argument `{key}=` of print"),
                        "print values with print(m[x])",
                    ));
                }
                for arg in args {
                    self.ask(arg)?;
                }
                Ok(())
            }
            ExprKind::Index(..) => self.ask(expr),
            _ if self.is_model(expr) => Ok(()),
            ExprKind::Call(function, ..) if !is_function(function) => {
                Err(unknown_function(line, function))
            }
            ExprKind::Method(_, method, ..) => Err(LogicError::unsupported(
                line,
                &format!("the method `.{method}`"),
                "only s.add(...), s.check(), s.model(), m[x] and m.eval(x)",
            )),
            _ => Err(invalid(
                line,
                format!(
                    "{} on its own does nothing; add constraints with s.add(...)",
                    describe(expr)
                ),
            )),
        }
    }

    fn assert_all(&mut self, args: &[Expr]) -> Result<(), LogicError> {
        let line = args.first().map_or(0, |a| a.line);
        for typed in self.items(args, 0)? {
            if typed.sort != Sort::Bool {
                return Err(invalid(
                    line,
                    "s.add needs constraints (comparisons such as x > 0), not Int terms",
                ));
            }
            self.program.asserts.push((typed.term, line));
        }
        Ok(())
    }

    /// One argument of `print`: what it names is of interest.
    fn ask(&mut self, arg: &Expr) -> Result<(), LogicError> {
        let line = arg.line;
        match &arg.kind {
            ExprKind::Str(_) | ExprKind::Int(_) => Ok(()),
            _ if self.is_model(arg) => {
                self.asked_all = true;
                Ok(())
            }
            ExprKind::Name(n) if matches!(self.names.get(n), Some(Binding::CheckResult)) => Ok(()),
            ExprKind::Method(receiver, method, args, _)
                if method == "check" && args.is_empty() && self.is_solver(receiver) =>
            {
                Ok(())
            }
            ExprKind::Index(model, target) if self.is_model(model) => self.ask_about(target),
            ExprKind::Method(model, method, args, kwargs)
                if method == "eval" && self.is_model(model) =>
            {
                if let Some((key, _)) = kwargs.iter().find(|(k, _)| k != "model_completion") {
                    return Err(LogicError::unsupported(
                        line,
                        &format!("the keyword argument `{key}=` of eval"),
                        "use m.eval(x)",
                    ));
                }
                match args.as_slice() {
                    [target] => self.ask_about(target),
                    _ => Err(invalid(line, "m.eval takes one expression")),
                }
            }
            ExprKind::Name(_) => self.ask_about(arg),
            _ => Err(LogicError::unsupported(
                line,
                &format!("printing {}", describe(arg)),
                "print(m[x]), print(m.eval(x)), print(m) or a string",
            )),
        }
    }

    fn ask_about(&mut self, target: &Expr) -> Result<(), LogicError> {
        let typed = self.term(target, 0)?;
        let mut found = Vec::new();
        self.collect_vars(&typed.term, &mut found);
        for index in found {
            if !self.program.interest.contains(&index) {
                self.program.interest.push(index);
            }
        }
        Ok(())
    }

    fn collect_vars(&self, term: &Term, out: &mut Vec<usize>) {
        match term {
            Term::Var(i) => {
                if !out.contains(i) {
                    out.push(*i);
                }
            }
            Term::Alias(a) => {
                if let Some(alias) = self.program.aliases.get(*a) {
                    self.collect_vars(&alias.term, out);
                }
            }
            Term::Const(_) | Term::BoolConst(_) => {}
            Term::Neg(t) | Term::Not(t) | Term::Div(t, _) | Term::Mod(t, _) => {
                self.collect_vars(t, out)
            }
            Term::Add(ts) => ts.iter().for_each(|(_, t)| self.collect_vars(t, out)),
            Term::Mul(ts)
            | Term::Compare(ts, _)
            | Term::And(ts)
            | Term::Or(ts)
            | Term::Distinct(ts) => ts.iter().for_each(|t| self.collect_vars(t, out)),
            Term::BoolEq(a, b, _) | Term::Implies(a, b) | Term::Xor(a, b) => {
                self.collect_vars(a, out);
                self.collect_vars(b, out);
            }
            Term::Ite(c, t, e) => {
                self.collect_vars(c, out);
                self.collect_vars(t, out);
                self.collect_vars(e, out);
            }
        }
    }

    /// The value of an integer term built from constants only.
    pub(crate) fn constant(&self, term: &Term) -> Option<i64> {
        constant_value(term, &self.program.aliases)
    }

    fn typed(
        &self,
        term: Term,
        sort: Sort,
        depth: usize,
        line: usize,
    ) -> Result<Typed, LogicError> {
        if depth > self.max_term_depth() {
            return Err(LogicError::TooLarge {
                line,
                what: format!(
                    "expression nested more than {} levels deep (definitions included)",
                    self.max_term_depth()
                ),
            });
        }
        Ok(Typed { term, sort, depth })
    }

    fn term(&mut self, expr: &Expr, depth: usize) -> Result<Typed, LogicError> {
        let line = expr.line;
        if depth > self.max_term_depth() {
            return self.typed(Term::Const(0), Sort::Int, depth, line);
        }
        match &expr.kind {
            ExprKind::Int(v) => self.typed(Term::Const(*v), Sort::Int, 1, line),
            ExprKind::Bool(b) => self.typed(Term::BoolConst(*b), Sort::Bool, 1, line),
            ExprKind::Str(_) => Err(invalid(line, "a string is not a z3 term")),
            ExprKind::List(_) => Err(invalid(
                line,
                "a list is only allowed as the argument of And/Or/Sum/Distinct or s.add",
            )),
            ExprKind::Name(name) => self.named_term(name, line),
            ExprKind::Neg(inner) => {
                let t = self.int_term(inner, depth)?;
                self.typed(Term::Neg(Box::new(t.term)), Sort::Int, t.depth + 1, line)
            }
            ExprKind::Add(items) => {
                let mut terms = Vec::with_capacity(items.len());
                let mut deepest = 0;
                for (negated, item) in items {
                    let t = self.int_term(item, depth)?;
                    deepest = deepest.max(t.depth);
                    terms.push((*negated, t.term));
                }
                self.typed(Term::Add(terms), Sort::Int, deepest + 1, line)
            }
            ExprKind::Mul(items) => {
                let mut terms = Vec::with_capacity(items.len());
                let mut deepest = 0;
                for item in items {
                    let t = self.int_term(item, depth)?;
                    deepest = deepest.max(t.depth);
                    terms.push(t.term);
                }
                self.typed(Term::Mul(terms), Sort::Int, deepest + 1, line)
            }
            ExprKind::Div(a, b) => self.division(a, b, true, line, depth),
            ExprKind::Mod(a, b) => self.division(a, b, false, line, depth),
            ExprKind::Compare(first, rest) => self.comparison(first, rest, line, depth),
            ExprKind::Call(function, args, kwargs) => {
                self.call(line, function, args, kwargs, depth)
            }
            ExprKind::Index(list, index) => self.list_item(list, index, line),
            ExprKind::Method(_, method, ..) => Err(LogicError::unsupported(
                line,
                &format!("the method `.{method}` inside an expression"),
                "constraints use only variables, numbers and z3 functions",
            )),
        }
    }

    /// What a name stands for in a term: a variable or a definition.
    fn named_term(&mut self, name: &str, line: usize) -> Result<Typed, LogicError> {
        match self.names.get(name) {
            Some(Binding::Var(i)) => {
                let sort = self.program.vars[*i].sort;
                self.typed(Term::Var(*i), sort, 1, line)
            }
            Some(Binding::Alias(a)) => {
                let a = *a;
                let alias = &self.program.aliases[a];
                let (sort, inner_depth) = (alias.sort, self.alias_depth(a));
                self.typed(Term::Alias(a), sort, inner_depth + 1, line)
            }
            Some(Binding::List(_)) => Err(invalid(
                line,
                format!(
                    "the list `{name}` can only be the argument of And/Or/Sum/Distinct or s.add"
                ),
            )),
            Some(_) => Err(invalid(
                line,
                format!("`{name}` is a solver or model, not a z3 term"),
            )),
            None if name == "sat" || name == "unsat" || name == "unknown" => {
                Err(LogicError::unsupported(
                    line,
                    &format!("comparing with `{name}`"),
                    "just call print(s.check()); no Python control flow",
                ))
            }
            None => Err(invalid(
                line,
                format!("`{name}` is not declared (declare it with Int('{name}'))"),
            )),
        }
    }

    /// `a / b` (`is_div`) or `a % b`, by a non-zero constant only.
    fn division(
        &mut self,
        a: &Expr,
        b: &Expr,
        is_div: bool,
        line: usize,
        depth: usize,
    ) -> Result<Typed, LogicError> {
        if matches!(a.kind, ExprKind::Str(_)) {
            return Err(LogicError::unsupported(
                line,
                "string formatting with `%`",
                "write names out: Ints('x0 x1 x2')",
            ));
        }
        let numerator = self.int_term(a, depth)?;
        let denominator = self.int_term(b, depth)?;
        let Some(divisor) = self.constant(&denominator.term) else {
            return Err(LogicError::unsupported(
                line,
                if is_div {
                    "division by a variable"
                } else {
                    "`%` by a variable"
                },
                "divide only by a constant, or multiply out: x == k * y",
            ));
        };
        if divisor == 0 {
            return Err(LogicError::DivisionByZero { line });
        }
        let inner = Box::new(numerator.term);
        let term = if is_div {
            Term::Div(inner, divisor)
        } else {
            Term::Mod(inner, divisor)
        };
        self.typed(term, Sort::Int, numerator.depth + 1, line)
    }

    /// A chain of integer comparisons `a < b <= c`, or one Boolean `==`
    /// or `!=`.
    fn comparison(
        &mut self,
        first: &Expr,
        rest: &[(CmpOp, Expr)],
        line: usize,
        depth: usize,
    ) -> Result<Typed, LogicError> {
        let first = self.term(first, depth + 1)?;
        if first.sort == Sort::Bool {
            let [(op, second)] = rest else {
                return Err(invalid(line, "a chain of Boolean comparisons"));
            };
            let second = self.bool_term(second, depth)?;
            let eq = match op {
                CmpOp::Eq => true,
                CmpOp::Ne => false,
                _ => return Err(invalid(line, "Booleans can only be compared with == or !=")),
            };
            let d = first.depth.max(second.depth) + 1;
            return self.typed(
                Term::BoolEq(Box::new(first.term), Box::new(second.term), eq),
                Sort::Bool,
                d,
                line,
            );
        }
        let mut deepest = first.depth;
        let mut operands = vec![first.term];
        let mut ops = Vec::with_capacity(rest.len());
        for (op, operand) in rest {
            let t = self.int_term(operand, depth)?;
            deepest = deepest.max(t.depth);
            operands.push(t.term);
            ops.push(*op);
        }
        self.typed(Term::Compare(operands, ops), Sort::Bool, deepest + 1, line)
    }

    /// `cells[i]` (or `cells[-i]`) of a named list, by an integer literal.
    fn list_item(&mut self, list: &Expr, index: &Expr, line: usize) -> Result<Typed, LogicError> {
        let list = match &list.kind {
            ExprKind::Name(n) => match self.names.get(n) {
                Some(Binding::List(l)) => Some(*l),
                _ => None,
            },
            _ => None,
        };
        let Some(list) = list else {
            return Err(invalid(
                line,
                "m[x] can only be printed, not used in a constraint",
            ));
        };
        let position = match index.kind {
            ExprKind::Int(i) => usize::try_from(i).ok(),
            ExprKind::Neg(ref inner) => match inner.kind {
                ExprKind::Int(i) => usize::try_from(i)
                    .ok()
                    .and_then(|i| self.lists[list].len().checked_sub(i)),
                _ => None,
            },
            _ => None,
        };
        match position.and_then(|p| self.lists[list].get(p).copied()) {
            Some(a) => {
                let sort = self.program.aliases[a].sort;
                self.typed(Term::Alias(a), sort, self.alias_depth(a) + 1, line)
            }
            None => Err(invalid(
                line,
                "a list index must be an integer literal within the list",
            )),
        }
    }

    fn expect_sort(
        &self,
        t: &Typed,
        sort: Sort,
        line: usize,
        function: &str,
    ) -> Result<(), LogicError> {
        if t.sort == sort {
            return Ok(());
        }
        let hint = if sort == Sort::Int {
            " (use If(b, 1, 0) to count a Bool)"
        } else {
            ""
        };
        Err(invalid(
            line,
            format!(
                "an argument of {function} is {} where {} is needed{hint}",
                t.sort.name(),
                sort.name()
            ),
        ))
    }

    fn alias_depth(&self, alias: usize) -> usize {
        self.alias_depths.get(alias).copied().unwrap_or(1)
    }

    fn int_term(&mut self, expr: &Expr, depth: usize) -> Result<Typed, LogicError> {
        let t = self.term(expr, depth + 1)?;
        if t.sort != Sort::Int {
            return Err(invalid(
                expr.line,
                format!(
                    "{} is a Bool where an Int is needed (use If(b, 1, 0))",
                    describe(expr)
                ),
            ));
        }
        Ok(t)
    }

    fn bool_term(&mut self, expr: &Expr, depth: usize) -> Result<Typed, LogicError> {
        let t = self.term(expr, depth + 1)?;
        if t.sort != Sort::Bool {
            return Err(invalid(
                expr.line,
                format!(
                    "{} is an Int where a constraint is needed (compare it, e.g. x > 0)",
                    describe(expr)
                ),
            ));
        }
        Ok(t)
    }

    fn call(
        &mut self,
        line: usize,
        function: &str,
        args: &[Expr],
        kwargs: &[(String, Expr)],
        depth: usize,
    ) -> Result<Typed, LogicError> {
        if !is_function(function) {
            return Err(unknown_function(line, function));
        }
        if let Some((key, _)) = kwargs.first() {
            return Err(LogicError::unsupported(
                line,
                &format!("the keyword argument `{key}=` of {function}"),
                "pass arguments positionally",
            ));
        }
        let arity = |n: usize| check_arity(line, function, args, n);
        match function {
            "And" | "Or" | "Not" | "Implies" | "Xor" => {
                self.connective(line, function, args, depth)
            }
            "If" => {
                arity(3)?;
                self.if_then_else(line, args, depth)
            }
            "Distinct" | "Sum" | "Product" => self.aggregate(line, function, args, depth),
            "Abs" => {
                arity(1)?;
                self.absolute(line, &args[0], depth)
            }
            "IntVal" => {
                arity(1)?;
                let t = self.int_term(&args[0], depth)?;
                match self.constant(&t.term) {
                    Some(v) => self.typed(Term::Const(v), Sort::Int, 1, line),
                    None => Err(invalid(line, "IntVal takes an integer literal")),
                }
            }
            "BoolVal" => {
                arity(1)?;
                match args[0].kind {
                    ExprKind::Bool(b) => self.typed(Term::BoolConst(b), Sort::Bool, 1, line),
                    _ => Err(invalid(line, "BoolVal takes True or False")),
                }
            }
            "Int" | "Bool" => self.inline_declaration(line, function, args, kwargs),
            _ => Err(invalid(
                line,
                format!(
                    "{function}(...) can only be assigned to names, e.g. a, b = {function}('a b')"
                ),
            )),
        }
    }

    /// `And`, `Or`, `Not`, `Implies` or `Xor` of Boolean terms.
    fn connective(
        &mut self,
        line: usize,
        function: &str,
        args: &[Expr],
        depth: usize,
    ) -> Result<Typed, LogicError> {
        match function {
            "And" | "Or" => {
                let (terms, deepest) =
                    self.items_of_sort(args, depth, Sort::Bool, line, function)?;
                let term = if function == "And" {
                    Term::And(terms)
                } else {
                    Term::Or(terms)
                };
                self.typed(term, Sort::Bool, deepest + 1, line)
            }
            "Not" => {
                check_arity(line, function, args, 1)?;
                let t = self.bool_term(&args[0], depth)?;
                self.typed(Term::Not(Box::new(t.term)), Sort::Bool, t.depth + 1, line)
            }
            _ => {
                check_arity(line, function, args, 2)?;
                let a = self.bool_term(&args[0], depth)?;
                let b = self.bool_term(&args[1], depth)?;
                let d = a.depth.max(b.depth) + 1;
                let (a, b) = (Box::new(a.term), Box::new(b.term));
                let term = if function == "Implies" {
                    Term::Implies(a, b)
                } else {
                    Term::Xor(a, b)
                };
                self.typed(term, Sort::Bool, d, line)
            }
        }
    }

    /// `Distinct`, `Sum` or `Product` of integer terms (an empty sum is 0,
    /// an empty product 1).
    fn aggregate(
        &mut self,
        line: usize,
        function: &str,
        args: &[Expr],
        depth: usize,
    ) -> Result<Typed, LogicError> {
        let (terms, deepest) = self.items_of_sort(args, depth, Sort::Int, line, function)?;
        if function == "Distinct" {
            return self.typed(Term::Distinct(terms), Sort::Bool, deepest + 1, line);
        }
        let term = match (function, terms.is_empty()) {
            ("Sum", true) => Term::Const(0),
            ("Sum", false) => Term::Add(terms.into_iter().map(|t| (false, t)).collect()),
            (_, true) => Term::Const(1),
            (_, false) => Term::Mul(terms),
        };
        self.typed(term, Sort::Int, deepest + 1, line)
    }

    /// The items of a function's arguments (see [`Self::items`]), each of
    /// `sort`, and the depth of the deepest.
    fn items_of_sort(
        &mut self,
        args: &[Expr],
        depth: usize,
        sort: Sort,
        line: usize,
        function: &str,
    ) -> Result<(Vec<Term>, usize), LogicError> {
        let mut terms = Vec::new();
        let mut deepest = 0;
        for t in self.items(args, depth)? {
            self.expect_sort(&t, sort, line, function)?;
            deepest = deepest.max(t.depth);
            terms.push(t.term);
        }
        Ok((terms, deepest))
    }

    /// `If(c, t, e)`: its branches of one sort.
    fn if_then_else(
        &mut self,
        line: usize,
        args: &[Expr],
        depth: usize,
    ) -> Result<Typed, LogicError> {
        let c = self.bool_term(&args[0], depth)?;
        let t = self.term(&args[1], depth + 1)?;
        let e = self.term(&args[2], depth + 1)?;
        if t.sort != e.sort {
            return Err(invalid(
                line,
                format!(
                    "the branches of If are {} and {}; they must have one sort",
                    t.sort.name(),
                    e.sort.name()
                ),
            ));
        }
        let d = c.depth.max(t.depth).max(e.depth) + 1;
        self.typed(
            Term::Ite(Box::new(c.term), Box::new(t.term), Box::new(e.term)),
            t.sort,
            d,
            line,
        )
    }

    /// `Abs(x)` as `If(x < 0, -x, x)`.
    fn absolute(&mut self, line: usize, arg: &Expr, depth: usize) -> Result<Typed, LogicError> {
        let t = self.int_term(arg, depth)?;
        // Shared through an alias so the operand is built once.
        let alias = self.program.aliases.len();
        let constant = self.constant(&t.term);
        self.program.aliases.push(Alias {
            term: t.term,
            sort: Sort::Int,
            constant,
        });
        self.alias_depths.push(t.depth);
        let x = || Term::Alias(alias);
        let term = Term::Ite(
            Box::new(Term::Compare(vec![x(), Term::Const(0)], vec![CmpOp::Lt])),
            Box::new(Term::Neg(Box::new(x()))),
            Box::new(x()),
        );
        self.typed(term, Sort::Int, t.depth + 3, line)
    }

    /// `Int('x')` or `Bool('p')` inside an expression: one variable.
    fn inline_declaration(
        &mut self,
        line: usize,
        function: &str,
        args: &[Expr],
        kwargs: &[(String, Expr)],
    ) -> Result<Typed, LogicError> {
        let sort = if function == "Int" {
            Sort::Int
        } else {
            Sort::Bool
        };
        let names = self.declared_names(line, function, args, kwargs)?;
        let [name] = names.as_slice() else {
            return Err(invalid(line, format!("{function} declares one variable")));
        };
        let index = self.declare(line, name, sort)?;
        self.typed(Term::Var(index), sort, 1, line)
    }
}

/// An error unless `function` got `n` arguments.
fn check_arity(line: usize, function: &str, args: &[Expr], n: usize) -> Result<(), LogicError> {
    if args.len() == n {
        Ok(())
    } else {
        Err(invalid(
            line,
            format!("{function} takes {n} argument(s), got {}", args.len()),
        ))
    }
}

/// Functions the subset knows (anything else is named in an error).
fn is_function(name: &str) -> bool {
    matches!(
        name,
        "Int"
            | "Ints"
            | "Bool"
            | "Bools"
            | "Solver"
            | "And"
            | "Or"
            | "Not"
            | "Implies"
            | "Xor"
            | "If"
            | "Distinct"
            | "Sum"
            | "Product"
            | "Abs"
            | "IntVal"
            | "BoolVal"
            | "print"
            | "solve"
    )
}

fn unknown_function(line: usize, name: &str) -> LogicError {
    let hint = match name {
        "Real" | "Reals" | "RealVal" | "Q" => "only Int and Bool variables are supported",
        "BitVec" | "BitVecs" | "BitVecVal" => "use Int variables with bounds",
        "Array" | "Function" | "IntVector" | "BoolVector" | "Datatype" | "EnumSort" => {
            "declare each variable with Ints('a b c') / Bools('p q')"
        }
        "Optimize" | "SolverFor" | "SimpleSolver" => "use s = Solver()",
        "ForAll" | "Exists" => "quantifiers are not supported; write each case out",
        "range" | "len" | "enumerate" | "zip" | "list" | "map" | "filter" => {
            "no Python computation: write each constraint out"
        }
        "exec" | "eval" | "open" | "__import__" | "compile" | "getattr" | "setattr" | "globals"
        | "locals" | "input" => "the program is parsed, never run: only z3 declarations and constraints",
        _ => "supported: Int(s), Bool(s), Solver, And, Or, Not, Implies, Xor, If, Distinct, Sum, Abs, print",
    };
    LogicError::unsupported(line, &format!("the function `{name}`"), hint)
}

/// The value of an integer term built from constants, with checked
/// arithmetic (an overflow is simply "not a constant").
pub(crate) fn constant_value(term: &Term, aliases: &[Alias]) -> Option<i64> {
    match term {
        Term::Const(v) => Some(*v),
        Term::Alias(a) => aliases.get(*a).and_then(|alias| alias.constant),
        Term::Neg(t) => constant_value(t, aliases)?.checked_neg(),
        Term::Add(ts) => ts.iter().try_fold(0i64, |acc, (negated, t)| {
            let v = constant_value(t, aliases)?;
            if *negated {
                acc.checked_sub(v)
            } else {
                acc.checked_add(v)
            }
        }),
        Term::Mul(ts) => ts
            .iter()
            .try_fold(1i64, |acc, t| acc.checked_mul(constant_value(t, aliases)?)),
        Term::Div(t, k) => {
            let v = constant_value(t, aliases)?;
            // z3: q = floor(v / k) for k > 0, ceil for k < 0 (remainder >= 0).
            let r = v.checked_rem_euclid(*k)?;
            v.checked_sub(r)?.checked_div(*k)
        }
        Term::Mod(t, k) => constant_value(t, aliases)?.checked_rem_euclid(*k),
        Term::Ite(..) => None,
        _ => None,
    }
}
