//! `tfwasm check` against the rest of the hostile suite: each hand-written
//! WAT guest of `guest/hostile-wat` (built by its `build.sh`) and each mode
//! of the hostile guest beyond those in `main.rs` fails the check its clause
//! belongs to, and that check's detail names the guest and says why. The
//! legal ones (slow answers, redundant dependencies, a forged log line the
//! host defuses) pass every check.

use std::path::{Path, PathBuf};

use super::{guest, tfwasm, workspace};

/// A component built by `guest/hostile-wat/build.sh`.
fn wat_guest(kind: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), PathBuf::from);
    let path = target.join("wasm32-wasip2/guest/hostile").join(format!("{kind}.wasm"));
    assert!(path.is_file(), "{} is not built: bash guest/hostile-wat/build.sh", path.display());
    path
}

/// `(check, passed, detail)` of every check, and the exit status.
fn check(dir: &Path, name: &str, guest: &Path, config: &str) -> (i32, Vec<(String, bool, String)>) {
    let policy = dir.join(format!("{name}.toml"));
    std::fs::write(
        &policy,
        format!(
            "[guest]\nname = \"{name}\"\npath = \"unused.wasm\"\n[guest.config]\n{config}\n\
             [limits]\nmemory-bytes = 16777216\ncall-deadline-ms = 50\n"
        ),
    )
    .unwrap();
    let (code, out) = tfwasm(&["check", "--json", "--policy", policy.to_str().unwrap(), guest.to_str().unwrap()]);
    let value: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{name}: {e}\n{out}"));
    let checks = value
        .as_array()
        .expect("a list of checks")
        .iter()
        .map(|r| {
            let detail = r["detail"].as_str().unwrap_or_default().to_owned();
            (r["check"].as_str().unwrap().to_owned(), r["passed"].as_bool().unwrap(), detail)
        })
        .collect();
    (code, checks)
}

/// `name` fails `expected`, whose detail names the guest and contains `why`.
fn fails(dir: &Path, name: &str, guest: &Path, config: &str, expected: &str, why: &str) {
    let (code, checks) = check(dir, name, guest, config);
    assert_eq!(code, 1, "{name}: the command must fail: {checks:?}");
    let (_, passed, detail) = checks
        .iter()
        .find(|(check, ..)| check == expected)
        .unwrap_or_else(|| panic!("{name}: no check {expected}: {checks:?}"));
    assert!(!passed, "{name}: `{expected}` passed: {checks:?}");
    assert!(detail.contains(&format!("guest '{name}'")), "{name}: `{expected}` does not name the guest: {detail}");
    assert!(detail.contains(why), "{name}: `{expected}` does not say {why:?}: {detail}");
    assert!(detail.len() < 4096, "{name}: a {} byte detail", detail.len());
    if expected != "load" {
        assert!(checks.iter().any(|(c, passed, _)| c == "load" && *passed), "{name}: the guest itself loads");
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfwasm-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn each_wat_guest_fails_the_check_of_its_clause() {
    let dir = scratch("wat");
    // kind → the check that must fail, and what its detail must say.
    let cases = [
        ("wrong-version", "load", "built against tfwasm:device@9.0.0"),
        ("newer-host", "load", "built against tfwasm:device@0.2.0"),
        ("missing-export", "load", "does not export tfwasm:device/streams@0.1.0"),
        ("imports-random", "load", "wasi:random/random@0.2.6"),
        ("imports-sockets", "load", "the network: tfwasm never grants it"),
        ("huge-initial-memory", "init", "limits.memory-bytes"),
        ("start-loop", "init", "`instantiate` exceeded its 50 ms deadline"),
        ("string-past-memory", "init", "out of bounds"),
        ("invalid-utf8", "init", "utf-8"),
        ("realloc-lies", "init", "realloc"),
        ("resource-bomb", "init", "more than 4096 WASI resources"),
        ("trap-in-post-return", "init", "`identity.init` trapped"),
        ("stack-overflow", "placement", "stack overflow"),
        ("memory-grow-bomb", "placement", "past its cap of 16777216 bytes"),
        ("table-grow-bomb", "placement", "past the host's cap of 100000"),
        ("bad-discriminant", "placement", "discriminant"),
        ("list-past-memory", "stream-order", "list pointer/length out of bounds"),
    ];
    for (kind, expected, why) in cases {
        fails(&dir, kind, &wat_guest(kind), "colour = \"red\"", expected, why);
    }
    // The control: what these guests share loads, starts and places memory;
    // so do those that import an empty filesystem or the clocks, which give
    // a guest nothing under any policy.
    for kind in ["honest", "imports-filesystem", "imports-clocks"] {
        let (_, checks) = check(&dir, kind, &wat_guest(kind), "");
        for name in ["load", "init", "placement", "stream-order", "events"] {
            assert!(checks.iter().any(|(c, passed, _)| c == name && *passed), "{kind}: {name} fails: {checks:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_other_hostile_modes_fail_the_check_of_their_clause() {
    let dir = scratch("modes");
    let hostile = guest("tfwasm_hostile_device.wasm");
    let cases = [
        ("loop-on-init", "init", "`identity.init` exceeded"),
        ("loop-on-free", "free-and-usage", "`memory.free` exceeded"),
        ("loop-on-adopt", "adopt", "`memory.adopt` exceeded"),
        ("loop-on-create-stream", "stream-order", "`streams.create-stream` exceeded"),
        ("loop-on-submit", "stream-order", "`streams.submit` exceeded"),
        ("loop-on-complete", "stream-order", "`streams.complete` exceeded"),
        ("loop-on-add-dependency", "stream-order", "`streams.add-dependency` exceeded"),
        ("loop-on-stream-status", "stream-order", "`streams.stream-status` exceeded"),
        ("loop-on-destroy-stream", "stream-order", "`streams.destroy-stream` exceeded"),
        ("loop-on-create-event", "events", "`streams.create-event` exceeded"),
        ("loop-on-record-event", "events", "`streams.record-event` exceeded"),
        ("loop-on-wait-event", "events", "`streams.wait-event` exceeded"),
        ("loop-on-event-status", "events", "`streams.event-status` exceeded"),
        ("loop-on-destroy-event", "events", "`streams.destroy-event` exceeded"),
        ("loop-on-create-timer", "timers", "`streams.create-timer` exceeded"),
        ("loop-on-mark-timer", "timers", "`streams.mark-timer` exceeded"),
        ("loop-on-timer-elapsed", "timers", "`streams.timer-elapsed` exceeded"),
        ("loop-on-destroy-timer", "timers", "`streams.destroy-timer` exceeded"),
        ("deep-recursion", "placement", "`memory.allocate` trapped"),
        ("exit", "placement", "called exit(1)"),
        ("offset-overflow", "placement", "out of bounds"),
        ("huge-refusal", "placement", "bytes in all"),
        ("huge-name", "init", "at most 256 bytes"),
        ("seq-jump", "stream-order", "jumps more than"),
        ("lie-timer-elapsed", "timers", "before both timer markers ran"),
    ];
    for (mode, expected, why) in cases {
        fails(&dir, mode, &hostile, &format!("mode = \"{mode}\""), expected, why);
    }
    // Legal, if odd: every check passes.
    for (name, config) in [
        ("slow", "mode = \"slow\"\ndelay-ms = \"1\""),
        ("huge-ticket", "mode = \"huge-ticket\""),
        ("log-forgery", "mode = \"log-forgery\""),
    ] {
        let (code, checks) = check(&dir, name, &hostile, config);
        assert!(code == 0 && checks.iter().all(|(_, passed, _)| *passed), "{name}: {checks:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn info_prints_the_policy_lines_a_guest_needs() {
    let lines = |kind: &str| -> Vec<String> {
        let (code, out) = tfwasm(&["info", "--json", wat_guest(kind).to_str().unwrap()]);
        assert_eq!(code, 0, "{kind}: {out}");
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        value["policy"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
    };
    assert!(lines("imports-clocks").is_empty(), "the clocks need no grant");
    assert!(lines("imports-filesystem").is_empty(), "an empty filesystem needs no grant");
    assert_eq!(lines("imports-random"), ["[capabilities] random = true"]);
    let sockets = lines("imports-sockets");
    assert!(!sockets.is_empty() && sockets.iter().all(|l| l.starts_with("refused: wasi:sockets/")), "{sockets:?}");
}
