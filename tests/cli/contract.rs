//! The device contract `tfwasm:device@0.1.0` is frozen: guests built against
//! it keep loading and passing the conformance suite as the host evolves,
//! and its WIT cannot change under the same version.

use crate::{results, tfwasm, workspace};

/// The digest of `wit/device/device.wit` with comments and blank lines
/// removed: the contract itself, not its documentation.
const DEVICE_0_1_0_WIT: &str = "69ae8d9afe9ece0f93b95fb8a570f82f771e0dc47c251be4ed517dcd1a1c4581";

#[test]
fn a_guest_built_for_0_1_0_keeps_passing_the_suite() {
    let fixture = workspace().join("tests/fixtures/guests/device-0.1.0-reference.wasm");
    let (code, out) = tfwasm(&["info", "--json", fixture.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let info: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(info["exports_packages"][0], "tfwasm:device@0.1.0");
    assert_eq!(
        info["sha256"], "e4758d046d16dd2681c83f533e2606dec95d7a1278de105da720da8a45097320",
        "the fixture was rebuilt: add a new fixture instead (tests/fixtures/guests/README.md)"
    );
    let (code, out) = tfwasm(&["check", "--json", fixture.to_str().unwrap()]);
    let checks = results(&out);
    assert_eq!(code, 0, "{out}");
    assert!(checks.len() >= 8 && checks.iter().all(|(_, passed)| *passed), "{checks:?}");
}

#[test]
fn the_0_1_0_contract_is_unchanged() {
    let text = std::fs::read_to_string(workspace().join("wit/device/device.wit")).unwrap();
    assert!(
        text.contains("package tfwasm:device@0.1.0;"),
        "the package version moved: update this test's fixture list"
    );
    let contract: Vec<&str> =
        text.lines().map(|line| line.split("//").next().unwrap().trim()).filter(|line| !line.is_empty()).collect();
    let digest = tfwasm_runtime::sandbox::cache::sha256_hex(contract.join("\n").as_bytes());
    assert_eq!(
        digest, DEVICE_0_1_0_WIT,
        "wit/device/device.wit changed while it still says tfwasm:device@0.1.0, which guests have been built \
         against. A compatible change needs a new minor version; an incompatible one a new version with \
         the 0.1.0 WIT kept under wit/device/0.1.0/ and still spoken by the host."
    );
}
