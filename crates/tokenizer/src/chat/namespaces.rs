//! Refuses chat templates that could put a namespace inside a namespace.
//!
//! A namespace is minijinja's one mutable value, so it is the only way a
//! template can build a cycle (`{% set ns.me = ns %}`). Printing, comparing
//! or serializing a cycle recurses without end in minijinja and overflows
//! the stack, which aborts the process: no render limit or caught panic can
//! stop it. So before a template is accepted, its syntax tree is read once
//! and every value stored into a namespace (`{% set a.b = ... %}` and
//! `namespace(...)`'s own arguments) must be one that cannot hold a
//! namespace. The test is conservative: a variable may hold one when any
//! binding of it might, and a call, filter or operator may return one when
//! any of its inputs might. Real chat templates store strings, numbers,
//! booleans and message fields, which pass.

use std::collections::HashSet;

use minijinja::machinery::ast::{CallArg, Expr, Macro, Stmt};
use minijinja::machinery::parse;
use minijinja::syntax::SyntaxConfig;

/// `Err` with the line of the first store that could hold a namespace.
/// A template that does not parse passes: compiling it reports that.
pub(super) fn check(source: &str) -> Result<(), String> {
    let Ok(tree) = parse(source, "chat", SyntaxConfig::default()) else {
        return Ok(());
    };
    let mut bindings = Bindings::default();
    // A name's binding can depend on another's: iterate to the fixed point
    // (each round adds at least one name, so this ends).
    loop {
        let before = (bindings.holders.len(), bindings.impure.len());
        bindings.collect(&tree);
        if (bindings.holders.len(), bindings.impure.len()) == before {
            break;
        }
    }
    match bindings.first_unsafe_store(&tree) {
        Some(line) => Err(format!(
            "line {line} stores a value that may be a namespace inside a namespace, \
             which could make a cycle that crashes the renderer"
        )),
        None => Ok(()),
    }
}

/// What the template binds to its names.
#[derive(Default)]
struct Bindings<'a> {
    /// Names some binding of which may hold a namespace.
    holders: HashSet<&'a str>,
    /// Names bound at least once to something other than a bare
    /// `namespace(...)` call: reading an attribute of them may give a
    /// namespace.
    impure: HashSet<&'a str>,
}

impl<'a> Bindings<'a> {
    /// Whether `expr`'s value may be, or contain, a namespace.
    fn may_hold(&self, expr: &Expr<'a>) -> bool {
        match expr {
            Expr::Var(v) => v.id == "namespace" || self.holders.contains(v.id),
            Expr::Const(_) | Expr::Test(_) | Expr::Compare(_) => false,
            // No namespace is ever stored in a namespace (that is what this
            // module enforces), so a plain namespace's attributes hold none.
            Expr::GetAttr(a) => !self.is_plain_namespace(&a.expr) && self.may_hold(&a.expr),
            Expr::GetItem(g) => !self.is_plain_namespace(&g.expr) && self.may_hold(&g.expr),
            Expr::Slice(s) => self.may_hold(&s.expr),
            Expr::UnaryOp(u) => self.may_hold(&u.expr),
            Expr::BinOp(b) => self.may_hold(&b.left) || self.may_hold(&b.right),
            Expr::IfExpr(i) => {
                self.may_hold(&i.true_expr)
                    || i.false_expr.as_ref().is_some_and(|e| self.may_hold(e))
            }
            Expr::Filter(f) => {
                f.expr.as_ref().is_some_and(|e| self.may_hold(e)) || self.args_may_hold(&f.args)
            }
            Expr::Call(c) => self.may_hold(&c.expr) || self.args_may_hold(&c.args),
            Expr::List(l) => l.items.iter().any(|e| self.may_hold(e)),
            Expr::Tuple(t) => t.items.iter().any(|e| self.may_hold(e)),
            Expr::Map(m) => m.keys.iter().chain(&m.values).any(|e| self.may_hold(e)),
        }
    }

    fn args_may_hold(&self, args: &[CallArg<'a>]) -> bool {
        args.iter().any(|a| self.may_hold(arg_expr(a)))
    }

    /// A variable every binding of which is a bare `namespace(...)` call.
    fn is_plain_namespace(&self, expr: &Expr<'a>) -> bool {
        matches!(expr, Expr::Var(v) if self.holders.contains(v.id) && !self.impure.contains(v.id))
    }

    /// Records what `target` is bound to.
    fn bind(&mut self, target: &Expr<'a>, value: Option<&Expr<'a>>) {
        let holds = value.is_none_or(|v| self.may_hold(v));
        let plain = value.is_some_and(is_namespace_call);
        let mut names = Vec::new();
        target_names(target, &mut names);
        for name in names {
            if holds {
                self.holders.insert(name);
            }
            if !plain {
                self.impure.insert(name);
            }
        }
    }

    /// One pass over the statements, binding every name they assign.
    fn collect(&mut self, tree: &Stmt<'a>) {
        // A macro's parameters can be bound to any argument of any call.
        let mut calls_pass_holders = false;
        each_stmt(tree, &mut |_, exprs| {
            for e in exprs {
                walk_expr(e, &mut |e| {
                    if let Expr::Call(c) = e {
                        calls_pass_holders |= self.args_may_hold(&c.args);
                    }
                });
            }
        });
        let mut binds: Vec<(&Expr<'a>, Option<&Expr<'a>>)> = Vec::new();
        each_stmt(tree, &mut |stmt, _| match stmt {
            Stmt::Set(s) => binds.push((&s.target, Some(&s.expr))),
            // A loop variable holds an element of the iterable.
            Stmt::ForLoop(f) => binds.push((&f.target, Some(&f.iter))),
            Stmt::WithBlock(w) => binds.extend(w.assignments.iter().map(|(t, v)| (t, Some(v)))),
            Stmt::Macro(m) => bind_params(m, calls_pass_holders, &mut binds),
            Stmt::CallBlock(c) => bind_params(&c.macro_decl, calls_pass_holders, &mut binds),
            Stmt::Import(i) => binds.push((&i.name, None)),
            Stmt::FromImport(i) => {
                binds.extend(
                    i.names
                        .iter()
                        .map(|(n, alias)| (alias.as_ref().unwrap_or(n), None)),
                );
            }
            _ => {}
        });
        for (target, value) in binds {
            self.bind(target, value);
        }
        // Names minijinja binds itself: `loop` (its `previtem`, `cycle`)
        // gives back elements and arguments, `varargs` and `kwargs` a
        // macro's extra arguments.
        let mut implicit = Vec::new();
        each_stmt(tree, &mut |stmt, _| {
            if let Stmt::ForLoop(f) = stmt {
                if self.may_hold(&f.iter) {
                    implicit.push("loop");
                }
            }
        });
        if calls_pass_holders {
            implicit.extend(["loop", "varargs", "kwargs"]);
        }
        for name in implicit {
            self.holders.insert(name);
            self.impure.insert(name);
        }
    }

    /// The line of the first `{% set a.b = ... %}` or `namespace(...)` that
    /// stores a value that may hold a namespace.
    fn first_unsafe_store(&self, tree: &Stmt<'a>) -> Option<usize> {
        let mut found = None;
        each_stmt(tree, &mut |stmt, exprs| {
            if found.is_some() {
                return;
            }
            if let Stmt::Set(s) = stmt {
                let into_namespace = matches!(s.target, Expr::GetAttr(_) | Expr::GetItem(_));
                if into_namespace && self.may_hold(&s.expr) {
                    found = Some(usize::from(s.span().start_line));
                    return;
                }
            }
            for e in exprs {
                walk_expr(e, &mut |e| match e {
                    Expr::Call(c)
                        if found.is_none()
                            && is_namespace_callee(&c.expr)
                            && self.args_may_hold(&c.args) =>
                    {
                        found = Some(usize::from(c.span().start_line));
                    }
                    _ => {}
                });
            }
        });
        found
    }
}

/// Binds a macro's parameters: to anything when some call may pass a
/// namespace, and to each default (any parameter may take any of them:
/// conservative, and simple); in every case never to a bare namespace.
fn bind_params<'e, 'a>(
    m: &'e Macro<'a>,
    calls_pass_holders: bool,
    binds: &mut Vec<(&'e Expr<'a>, Option<&'e Expr<'a>>)>,
) {
    for arg in &m.args {
        binds.push((arg, if calls_pass_holders { None } else { Some(arg) }));
        binds.extend(m.defaults.iter().map(|d| (arg, Some(d))));
    }
}

fn is_namespace_callee(expr: &Expr<'_>) -> bool {
    matches!(expr, Expr::Var(v) if v.id == "namespace")
}

fn is_namespace_call(expr: &Expr<'_>) -> bool {
    matches!(expr, Expr::Call(c) if is_namespace_callee(&c.expr))
}

/// The names a target binds (`a`, or `a, b` in a loop).
fn target_names<'a>(target: &Expr<'a>, out: &mut Vec<&'a str>) {
    match target {
        Expr::Var(v) => out.push(v.id),
        Expr::List(l) => l.items.iter().for_each(|e| target_names(e, out)),
        Expr::Tuple(t) => t.items.iter().for_each(|e| target_names(e, out)),
        _ => {}
    }
}

/// Calls `f` with every statement in `tree` (nested ones included) and the
/// expressions that belong to it directly.
pub(super) fn each_stmt<'e, 'a>(
    tree: &'e Stmt<'a>,
    f: &mut dyn FnMut(&'e Stmt<'a>, Vec<&'e Expr<'a>>),
) {
    let (exprs, bodies): (Vec<&'e Expr<'a>>, Vec<&'e [Stmt<'a>]>) = match tree {
        Stmt::Template(t) => (vec![], vec![&t.children]),
        Stmt::EmitExpr(e) => (vec![&e.expr], vec![]),
        Stmt::Set(s) => (vec![&s.target, &s.expr], vec![]),
        Stmt::SetBlock(s) => (s.filter.iter().collect(), vec![&s.body]),
        Stmt::ForLoop(l) => {
            let mut exprs = vec![&l.iter];
            exprs.extend(&l.filter_expr);
            (exprs, vec![&l.body, &l.else_body])
        }
        Stmt::IfCond(i) => (vec![&i.expr], vec![&i.true_body, &i.false_body]),
        Stmt::WithBlock(w) => (
            w.assignments.iter().map(|(_, v)| v).collect(),
            vec![&w.body],
        ),
        Stmt::AutoEscape(a) => (vec![&a.enabled], vec![&a.body]),
        Stmt::FilterBlock(b) => (vec![&b.filter], vec![&b.body]),
        Stmt::Macro(m) => (m.defaults.iter().collect(), vec![&m.body]),
        Stmt::CallBlock(c) => {
            let mut exprs = vec![&c.call.expr];
            exprs.extend(c.call.args.iter().map(arg_expr));
            (exprs, vec![&c.macro_decl.body])
        }
        Stmt::Do(d) => {
            let mut exprs = vec![&d.call.expr];
            exprs.extend(d.call.args.iter().map(arg_expr));
            (exprs, vec![])
        }
        Stmt::Block(b) => (vec![], vec![&b.body]),
        Stmt::Import(i) => (vec![&i.expr], vec![]),
        Stmt::FromImport(i) => (vec![&i.expr], vec![]),
        Stmt::Extends(e) => (vec![&e.name], vec![]),
        Stmt::Include(i) => (vec![&i.name], vec![]),
        _ => (vec![], vec![]),
    };
    f(tree, exprs);
    for body in bodies {
        for stmt in body {
            each_stmt(stmt, f);
        }
    }
}

fn arg_expr<'e, 'a>(arg: &'e CallArg<'a>) -> &'e Expr<'a> {
    match arg {
        CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e) => e,
    }
}

/// Calls `f` on `expr` and every expression inside it.
pub(super) fn walk_expr<'a>(expr: &Expr<'a>, f: &mut dyn FnMut(&Expr<'a>)) {
    f(expr);
    match expr {
        Expr::Var(_) | Expr::Const(_) => {}
        Expr::Slice(s) => {
            walk_expr(&s.expr, f);
            for e in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                walk_expr(e, f);
            }
        }
        Expr::UnaryOp(u) => walk_expr(&u.expr, f),
        Expr::BinOp(b) => {
            walk_expr(&b.left, f);
            walk_expr(&b.right, f);
        }
        Expr::Compare(c) => {
            walk_expr(&c.expr, f);
            c.ops.iter().for_each(|o| walk_expr(&o.expr, f));
        }
        Expr::IfExpr(i) => {
            walk_expr(&i.test_expr, f);
            walk_expr(&i.true_expr, f);
            if let Some(e) = &i.false_expr {
                walk_expr(e, f);
            }
        }
        Expr::Filter(x) => {
            if let Some(e) = &x.expr {
                walk_expr(e, f);
            }
            x.args.iter().for_each(|a| walk_expr(arg_expr(a), f));
        }
        Expr::Test(t) => {
            walk_expr(&t.expr, f);
            t.args.iter().for_each(|a| walk_expr(arg_expr(a), f));
        }
        Expr::GetAttr(g) => walk_expr(&g.expr, f),
        Expr::GetItem(g) => {
            walk_expr(&g.expr, f);
            walk_expr(&g.subscript_expr, f);
        }
        Expr::Call(c) => {
            walk_expr(&c.expr, f);
            c.args.iter().for_each(|a| walk_expr(arg_expr(a), f));
        }
        Expr::List(l) => l.items.iter().for_each(|e| walk_expr(e, f)),
        Expr::Tuple(t) => t.items.iter().for_each(|e| walk_expr(e, f)),
        Expr::Map(m) => m.keys.iter().chain(&m.values).for_each(|e| walk_expr(e, f)),
    }
}
