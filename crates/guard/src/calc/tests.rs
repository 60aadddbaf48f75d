//! The calculator: exact values, the language's corners, and bounds.

use super::*;

fn show(src: &str) -> String {
    eval(src)
        .map(|v| v.to_string())
        .unwrap_or_else(|e| format!("error: {e}"))
}

#[test]
fn exact_arithmetic_and_display() {
    assert_eq!(show("20*4"), "80");
    assert_eq!(show("10*1.2"), "12");
    assert_eq!(show("0.1+0.2"), "0.3");
    assert_eq!(show("1/3"), "1/3 ≈ 0.333333333333");
    assert_eq!(show("2/8"), "0.25");
    assert_eq!(show("-7/2"), "-3.5");
    assert_eq!(show("$1,250 + 20%"), "1250.2");
    assert_eq!(show("200 * 15%"), "30");
    assert_eq!(show("17 % 5"), "2");
    assert_eq!(show("-7 % 3"), "2");
    assert_eq!(show("7 // 2"), "3");
    assert_eq!(show("-7 // 2"), "-4");
    assert_eq!(show("2^10"), "1024");
    assert_eq!(show("2**3**2"), "512");
    assert_eq!(show("-2^2"), "-4");
    assert_eq!(show("2^-2"), "0.25");
    assert_eq!(show("(1+2)*(3+4)"), "21");
    assert_eq!(show("x = 3*4; y = x + 1\ny*2"), "26");
    assert_eq!(show("round(2.5)"), "3");
    assert_eq!(show("round(-2.5)"), "-3");
    assert_eq!(show("round(3.14159, 2)"), "3.14");
    assert_eq!(show("floor(-1.5) + ceil(1.2) + abs(-3)"), "3");
    assert_eq!(show("min(3, 1, 2) + max(4, 9)"), "10");
    assert_eq!(show("sqrt(144/25)"), "2.4");
    assert_eq!(show("8^(1/3)"), "2");
    assert_eq!(show("sqrt(2)"), "≈ 1.41421356237309504880168872421");
    assert_eq!(show("3 × 4 ÷ 2 − 1"), "5");
    assert_eq!(
        show("1e3"),
        "error: syntax error at byte 1: expected an operator or the end"
    );
}

#[test]
fn errors_name_the_problem() {
    assert_eq!(show("1/0"), "error: division by zero");
    assert_eq!(show("5 % 0"), "error: division by zero");
    assert_eq!(show("0^-1"), "error: division by zero");
    assert_eq!(show("y + 1"), "error: `y` has no value");
    assert_eq!(show("(1+2"), "error: syntax error at byte 4: expected `)`");
    assert_eq!(show("sqrt(-1)"), "error: sqrt of a negative number");
    assert_eq!(
        show("(-8)^(1/2)"),
        "error: a negative number to a fractional power"
    );
    assert!(show("log(3)").contains("unknown function `log`"));
    assert!(show("").contains("no expression"));
    assert!(show("2 ? 3").contains("unexpected '?'"));
}

#[test]
fn bounds_end_hostile_programs() {
    assert!(show("10^10^10").contains("more than 10000 digits"));
    assert!(show("(10^5000)*(10^5001)").contains("more than 10000 digits"));
    assert!(show("2^33300").contains("more than 10000 digits"));
    let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
    assert!(show(&deep).contains("nesting deeper than 64"));
    let minus = format!("{}1", "-".repeat(100));
    assert!(show(&minus).contains("nesting deeper than 64"));
    let long = vec!["1"; 200_000].join("+");
    assert!(show(&long).contains("more than 100000 operations"));
    assert!(show(&"9".repeat(20_000)).contains("more than 10000 digits"));
    assert!(show("2^(1/1000)").contains("too high a degree"));
}

#[test]
fn claims_are_checked_with_the_precision_they_state() {
    assert_eq!(check_claim("20*4", "80"), Ok(Claim::Right));
    assert_eq!(check_claim("10/3", "3.33"), Ok(Claim::Right));
    assert_eq!(check_claim("2/3", "0.67"), Ok(Claim::Right));
    assert_eq!(check_claim("1/4", "25%"), Ok(Claim::Right));
    assert!(matches!(check_claim("20*4", "81"), Ok(Claim::Wrong(v)) if v.to_string() == "80"));
    assert!(matches!(check_claim("10/3", "3.4"), Ok(Claim::Wrong(_))));
    assert_eq!(
        annotations("so 4 * 20 = <<20*4=80>>80 and <<2*80=160>>160 >>"),
        vec![(12, "20*4", "80"), (30, "2*80", "160")]
    );
}
