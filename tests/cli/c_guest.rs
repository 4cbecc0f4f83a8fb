//! The device guest written in C (`guest/c-device`, built by its `build.sh`)
//! is held to the contract like the reference guest: every check passes, and
//! the component imports nothing but its world's own interfaces (no WASI).

use std::path::PathBuf;

use super::{guest, results, tfwasm, workspace};

fn c_guest() -> PathBuf {
    let path = workspace().join("target/wasm32-wasip2/guest/tfwasm_c_device.wasm");
    assert!(path.is_file(), "{} is not built: bash guest/c-device/build.sh", path.display());
    path
}

#[test]
fn the_c_guest_passes_every_check_the_reference_guest_passes() {
    let c = c_guest();
    let (code, out) = tfwasm(&["check", "--json", c.to_str().unwrap()]);
    let checks = results(&out);
    let failed: Vec<&str> = checks.iter().filter(|(_, passed)| !passed).map(|(name, _)| name.as_str()).collect();
    assert!(failed.is_empty(), "the C guest failed {failed:?}\n{out}");
    assert_eq!(code, 0, "{out}");
    // The same suite ran: no check is missing.
    let reference = guest("tfwasm_reference_device.wasm");
    let (_, reference_out) = tfwasm(&["check", "--json", reference.to_str().unwrap()]);
    let names = |checks: &[(String, bool)]| checks.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&checks), names(&results(&reference_out)));
    // And it was the C guest that answered: `init` quotes its device name.
    let value: serde_json::Value = serde_json::from_str(&out).unwrap();
    let init = value.as_array().unwrap().iter().find(|r| r["check"] == "init").expect("an init check");
    assert!(init["detail"].as_str().unwrap().contains("\"tfwasm C device\""), "{init}");
}

#[test]
fn the_c_guest_imports_no_wasi() {
    let (code, out) = tfwasm(&["info", "--json", c_guest().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let value: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(value["exports_packages"][0], "tfwasm:device@0.1.0");
    let imports: Vec<&str> = value["imports"].as_array().unwrap().iter().map(|i| i.as_str().unwrap()).collect();
    // `host` for its functions, `types` for the types the exports share.
    assert!(imports.contains(&"tfwasm:device/host@0.1.0"), "{imports:?}");
    assert!(
        imports.iter().all(|i| i.starts_with("tfwasm:device/") && i.ends_with("@0.1.0")),
        "a C guest needs no WASI (and so no adapter): {imports:?}"
    );
}
