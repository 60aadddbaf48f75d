//! `hearth calc`: exact values from arguments and from stdin, errors inline.

use std::io::Write;
use std::process::{Command, Stdio};

#[test]
fn calc_prints_one_exact_value_a_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["calc", "20*4", "$1,200 * 15%", "round(10/3, 2)"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "80\n180\n3.33\n");

    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("calc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"1/3\n\n5/0\nx = 2; x^10\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "a bad line makes the exit status 1");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1/3 ≈ 0.333333333333\nerror: division by zero\n1024\n"
    );
}
