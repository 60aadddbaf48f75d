//! Bad input: every construct outside the subset is refused by name and
//! line, and hostile programs end quickly with an error or "unknown".
//! A binary of its own, apart from `it`: a program past its time budget
//! leaves the solver busy for the whole process until it stops.

use hearth_guard::logic::{solve, Limits, LogicError, Status};
use proptest::prelude::*;
use std::time::{Duration, Instant};

const HEADER: &str = "from z3 import *\nx, y = Ints('x y')\np = Bool('p')\ns = Solver()\n";

fn error_of(body: &str) -> LogicError {
    let src = format!("{HEADER}{body}\n");
    match solve(&src, &Limits::default()) {
        Err(e) => e,
        Ok(s) => panic!("{body:?} was accepted: {s:?}"),
    }
}

#[test]
fn unsupported_constructs_are_named_with_their_line() {
    let cases: &[(&str, &str)] = &[
        (
            "xs = [Int('x%d' % i) for i in range(5)]",
            "list comprehension",
        ),
        ("for i in range(3):\n    s.add(x > i)", "`for`"),
        ("while True:\n    pass", "`while`"),
        ("def f(a):\n    return a", "`def`"),
        ("f = lambda a: a + 1", "`lambda`"),
        ("import os", "`import`"),
        ("import z3", "`import`"),
        ("from os import system", "import other than"),
        ("s.add(x > 0 and y > 0)", "Python's `and`"),
        ("s.add(x > 0 or y > 0)", "Python's `or`"),
        ("s.add(not p)", "Python's `not`"),
        ("s.add(x ** 2 == 4)", "power operator"),
        ("s.add(x == 1.5)", "floating-point"),
        ("print(f'{x}')", "f-string"),
        ("if s.check() == sat:\n    print(s.model())", "`if`"),
        ("  s.add(x > 0)", "indented block"),
        ("r = Real('r')", "the function `Real`"),
        ("o = Optimize()", "the function `Optimize`"),
        ("s.push()", "the solver method `.push`"),
        ("s.minimize(x)", "the solver method `.minimize`"),
        ("s.add(foo(x))", "the function `foo`"),
        ("exec('import os')", "the function `exec`"),
        ("__import__('os')", "the function `__import__`"),
        ("s.add(eval('x > 1'))", "the function `eval`"),
        ("s.add(x / y == 2)", "division by a variable"),
        ("s.add(x % y == 2)", "by a variable"),
        ("s.add(x.sort() == 1)", "method `.sort`"),
        ("s.add(x // 2 == 1)", "floor division"),
        ("s.add(x & y)", "bitwise"),
        ("x += 1", "augmented assignment"),
        ("s.add(ForAll([x], x > 0))", "the function `ForAll`"),
        ("s.add(x == y if p else x == 0)", "`if`"),
        ("s.add(x in [1, 2])", "`in`"),
    ];
    for (body, named) in cases {
        let e = error_of(body);
        let text = e.to_string();
        assert!(
            text.contains(named),
            "{body:?}: {text:?} does not name {named:?}"
        );
        assert_eq!(e.line(), 5, "{body:?}: {text}");
        assert!(text.starts_with("line 5:"), "{text}");
    }
}

#[test]
fn meaningless_programs_are_explained() {
    let cases: &[(&str, &str)] = &[
        ("s.add(z > 0)", "`z` is not declared"),
        ("s.add(p + 1 == 2)", "Bool where an Int"),
        ("s.add(x)", "not Int terms"),
        ("s.add(Sum([p, p]) == 2)", "If(b, 1, 0)"),
        ("a, b = Ints('a b c')", "2 names on the left but 3"),
        ("s.add(If(p, 1, True))", "one sort"),
        ("s.add(x / 0 == 1)", "division by zero"),
        ("s.add(x % (2 - 2) == 1)", "division by zero"),
        (
            "s.add(x == 1000000000000000000000000000000)",
            "more than 18 digits",
        ),
    ];
    for (body, named) in cases {
        let text = error_of(body).to_string();
        assert!(
            text.contains(named),
            "{body:?}: {text:?} does not say {named:?}"
        );
    }
}

#[test]
fn overflowing_constants_are_errors_not_panics() {
    let e = error_of("s.add(x == 999999999999999999 * 999999999999999999)");
    assert!(matches!(e, LogicError::TooLarge { .. }), "{e}");
    let e = error_of("s.add(x * 100000 == 4000000000)");
    assert!(matches!(e, LogicError::TooLarge { .. }), "{e}");
}

#[test]
fn a_million_variables_are_refused_before_anything_is_built() {
    let names: Vec<String> = (0..1_000_000).map(|i| format!("v{i}")).collect();
    let targets = names.join(", ");
    let src = format!("{targets} = Ints('{}')\n", names.join(" "));
    let started = Instant::now();
    let e = solve(&src, &Limits::default()).unwrap_err();
    eprintln!("{} bytes refused in {:?}", src.len(), started.elapsed());
    assert!(matches!(e, LogicError::TooLarge { line: 0, .. }), "{e}");
    // With the text limit lifted, the variable limit still holds.
    let generous = Limits {
        max_text_bytes: 64 << 20,
        ..Limits::default()
    };
    let lifted = Instant::now();
    let e = solve(&src, &generous).unwrap_err();
    eprintln!(
        "10^6 names, text limit lifted: `{e}` in {:?}",
        lifted.elapsed()
    );
    assert!(e.to_string().contains("more than 10000 variables"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_variable_limit_holds_within_the_text_limit() {
    let names: Vec<String> = (0..20_000).map(|i| format!("v{i}")).collect();
    let src = format!("vs = Ints('{}')\n", names.join(" "));
    assert!(src.len() < Limits::default().max_text_bytes);
    let e = solve(&src, &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("more than 10000 variables"), "{e}");
}

fn pigeonhole(pigeons: usize) -> String {
    let names: Vec<String> = (0..pigeons).map(|i| format!("p{i}")).collect();
    let mut src = format!(
        "{} = Ints('{}')\ns = Solver()\n",
        names.join(", "),
        names.join(" ")
    );
    for n in &names {
        src.push_str(&format!("s.add({n} >= 1, {n} <= {})\n", pigeons - 1));
    }
    src.push_str(&format!("s.add(Distinct({}))\n", names.join(", ")));
    src
}

#[test]
fn a_hard_search_ends_unknown_within_the_budget() {
    let limits = Limits {
        time_budget: Duration::from_millis(500),
        ..Limits::default()
    };
    let started = Instant::now();
    let solution = solve(&pigeonhole(14), &limits).unwrap();
    let elapsed = started.elapsed();
    eprintln!("pigeonhole 14/13: {:?} in {elapsed:?}", solution.status);
    assert_eq!(solution.status, Status::Unknown);
    assert!(!solution.unique && solution.model.is_empty());
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[test]
fn factoring_a_large_prime_ends_within_the_budget() {
    let limits = Limits {
        time_budget: Duration::from_millis(500),
        ..Limits::default()
    };
    let src = "x, y = Ints('x y')\ns = Solver()\ns.add(x > 1, y > 1, x * y == 1000000007)\n";
    let started = Instant::now();
    let solution = solve(src, &limits).unwrap();
    let elapsed = started.elapsed();
    eprintln!("x * y == 1e9+7: {:?} in {elapsed:?}", solution.status);
    // Within the default domains there is no factorisation: unsat or unknown,
    // never a wrong "sat".
    assert_ne!(solution.status, Status::Sat);
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    for depth in [100, 10_000] {
        let nots = format!("s.add({}p{})", "Not(".repeat(depth), ")".repeat(depth));
        let e = error_of(&nots);
        assert!(e.to_string().contains("nesting deeper"), "{e}");
        let parens = format!("s.add({}x{} == 1)", "(".repeat(depth), ")".repeat(depth));
        assert!(error_of(&parens).to_string().contains("nesting deeper"));
        let minus = format!("s.add({}x == 1)", "-".repeat(depth));
        assert!(error_of(&minus).to_string().contains("nesting deeper"));
        let divisions = format!("s.add(x{} == 1)", " / 2".repeat(depth));
        assert!(error_of(&divisions).to_string().contains("nesting deeper"));
    }
}

#[test]
fn chained_definitions_cannot_blow_up() {
    // Each definition doubles the tree; lowering shares it, and the depth of
    // definitions is bounded.
    let mut src = String::from("x = Int('x')\na0 = x + 1\n");
    for i in 1..=40 {
        src.push_str(&format!("a{i} = a{} + a{}\n", i - 1, i - 1));
    }
    src.push_str("s = Solver()\ns.add(a40 > 0, x >= 0, x <= 3)\n");
    let started = Instant::now();
    let result = solve(&src, &Limits::default());
    assert!(started.elapsed() < Duration::from_secs(2));
    // 2^40 * (x + 1) overflows the solver's range: a clear error.
    assert!(
        matches!(result, Err(LogicError::TooLarge { .. })),
        "{result:?}"
    );

    let mut src = String::from("x = Int('x')\nb0 = x\n");
    for i in 1..=1000 {
        src.push_str(&format!("b{i} = b{} + 0\n", i - 1));
    }
    src.push_str("s = Solver()\ns.add(b1000 == 2)\n");
    let e = solve(&src, &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("nested more than"), "{e}");
}

#[test]
fn oversized_text_is_refused_first() {
    let src = "#".repeat(300 * 1024);
    let e = solve(&src, &Limits::default()).unwrap_err();
    assert!(matches!(e, LogicError::TooLarge { line: 0, .. }));
}

fn quick() -> Limits {
    Limits {
        time_budget: Duration::from_millis(20),
        ..Limits::default()
    }
}

const SEED_PROGRAM: &str = "from z3 import *\na, b, c = Ints('a b c')\np = Bool('p')\ns = Solver()\ns.add(a >= 1, a <= 9, b == If(p, a * 2, a - 1), Distinct(a, b, c))\ns.add(Sum([a, b, c]) == 12, Or(p, c % 3 == 1), Implies(p, Not(b > 10)))\nprint(s.check())\nm = s.model()\nprint(m[a], m.eval(b))\n";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_text_never_panics(src in "\\PC{0,200}") {
        let _ = solve(&src, &quick());
    }

    #[test]
    fn random_token_soup_never_panics(
        words in proptest::collection::vec(
            prop_oneof![
                Just("s.add("), Just(")"), Just("("), Just(","), Just("x"), Just("y"), Just("p"),
                Just("=="), Just("<"), Just("+"), Just("-"), Just("*"), Just("/"), Just("%"),
                Just("And("), Just("Or("), Just("Not("), Just("If("), Just("Sum(["), Just("]"),
                Just("Distinct("), Just("0"), Just("7"), Just("99999999999"), Just("\n"),
                Just("True"), Just("m[x]"), Just("print("), Just("z = "), Just("Ints('q r')"),
            ],
            0..40,
        )
    ) {
        let src = format!("{HEADER}{}", words.join(" "));
        let _ = solve(&src, &quick());
    }

    #[test]
    fn mutated_programs_never_panic(
        edits in proptest::collection::vec((0usize..400, 0u8..4, proptest::char::range(' ', '~')), 1..6)
    ) {
        let mut src: Vec<char> = SEED_PROGRAM.chars().collect();
        for (at, kind, c) in edits {
            let at = at % (src.len() + 1);
            match kind {
                0 => src.insert(at, c),
                1 if at < src.len() => { src.remove(at); }
                2 if at < src.len() => src[at] = c,
                _ => {
                    let end = (at + 12).min(src.len());
                    let piece: Vec<char> = src[at..end].to_vec();
                    for (k, ch) in piece.into_iter().enumerate() {
                        src.insert(at + k, ch);
                    }
                }
            }
        }
        let src: String = src.into_iter().collect();
        let _ = solve(&src, &quick());
    }
}
