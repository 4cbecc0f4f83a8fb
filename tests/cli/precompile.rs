//! `tfwasm precompile` fills the cache the plugin reads: the entry it names
//! exists, a second run finds it, and a file that is not a component is an
//! error rather than an empty entry.

use crate::{guest, tfwasm, workspace};

#[test]
fn precompile_fills_the_cache_once() {
    let dir = std::env::temp_dir().join(format!("tfwasm-cli-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let reference = guest("tfwasm_reference_device.wasm");
    let args = ["precompile", "--json", "--cache-dir", dir.to_str().unwrap(), reference.to_str().unwrap()];
    let run = || {
        let (code, out) = tfwasm(&args);
        assert_eq!(code, 0, "{out}");
        let value: serde_json::Value = serde_json::from_str(&out).expect("--json prints JSON");
        value[0].clone()
    };
    let first = run();
    assert_eq!(first["cached"], false, "{first}");
    let entry = std::path::PathBuf::from(first["entry"].as_str().unwrap());
    assert!(entry.is_file() && entry.starts_with(&dir), "{first}");
    let digest = first["sha256"].as_str().unwrap();
    assert!(
        entry.file_name().unwrap().to_str().unwrap().starts_with(digest),
        "the entry is keyed by the guest's digest"
    );
    let second = run();
    assert_eq!(second["cached"], true, "{second}");
    assert_eq!(second["entry"], first["entry"]);

    let (code, _) =
        tfwasm(&["precompile", "--cache-dir", dir.to_str().unwrap(), workspace().join("Cargo.toml").to_str().unwrap()]);
    assert_eq!(code, 2, "not a component");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "nothing but the one entry was written");
    let _ = std::fs::remove_dir_all(&dir);
}
