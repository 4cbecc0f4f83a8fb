//! `verified = "REPORT.json"` on a `[[pass]]`: the operator installs a pass
//! only as it was verified. `tfwasm pass verify PASS --report REPORT.json`
//! runs the golden graphs before and after the pass in TensorFlow and
//! writes what it found; the plugin then loads the pass (at start and on a
//! swap) only if the report says it passed, for this file's SHA-256 and
//! with this entry's `[pass.config]`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The part of a verify report the plugin reads.
#[derive(Debug, Deserialize)]
struct Report {
    sha256: String,
    passed: bool,
    #[serde(default)]
    config: BTreeMap<String, String>,
}

/// `Ok` when the report at `report` records a passed verify of a pass file
/// with digest `sha256` under `options`; otherwise why not, in words an
/// operator can act on.
pub fn check(report: &Path, sha256: &str, options: &[(String, String)]) -> Result<(), String> {
    let redo = "run `tfwasm pass verify PASS --report REPORT` on this file (with its [pass.config] as --config)";
    let text = std::fs::read_to_string(report).map_err(|e| {
        format!(
            "the policy requires a verified pass, and its verify report {} cannot be read ({e}); {redo}",
            report.display()
        )
    })?;
    let report_path = report.display();
    let report: Report = serde_json::from_str(&text)
        .map_err(|e| format!("the policy requires a verified pass, and {report_path} is not a verify report ({e})"))?;
    if !report.sha256.eq_ignore_ascii_case(sha256) {
        return Err(format!(
            "its sha256 {sha256} is not the one its verify report {report_path} records ({}): this file was not verified; {redo}",
            report.sha256
        ));
    }
    if !report.passed {
        return Err(format!(
            "its verify report {report_path} records that it FAILED verify (graphs before and after it differ); \
             the policy requires a verified pass"
        ));
    }
    let given: BTreeMap<String, String> = options.iter().cloned().collect();
    if given != report.config {
        return Err(format!(
            "it was verified with [pass.config] {:?} ({report_path}) but the policy gives it {given:?}; {redo}",
            report.config
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(dir: &Path, body: &str) -> std::path::PathBuf {
        let path = dir.join("report.json");
        std::fs::write(&path, body).unwrap();
        path
    }

    #[test]
    fn only_a_passed_report_of_this_digest_and_config_admits_the_pass() {
        let dir = std::env::temp_dir().join(format!("tfwasm-verified-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let digest = "ab".repeat(32);
        let ok = report(&dir, &format!(r#"{{"sha256": "{digest}", "passed": true, "config": {{"mode": "honest"}}}}"#));
        let honest = [("mode".to_string(), "honest".to_string())];
        assert_eq!(check(&ok, &digest.to_uppercase(), &honest), Ok(()));
        let other = check(&ok, &"cd".repeat(32), &honest).unwrap_err();
        assert!(other.contains("not the one its verify report") && other.contains(&digest), "{other}");
        let config = check(&ok, &digest, &[]).unwrap_err();
        assert!(config.contains("verified with [pass.config]"), "{config}");
        let failed = report(&dir, &format!(r#"{{"sha256": "{digest}", "passed": false}}"#));
        assert!(check(&failed, &digest, &[]).unwrap_err().contains("FAILED verify"));
        let garbage = report(&dir, "not json");
        assert!(check(&garbage, &digest, &[]).unwrap_err().contains("is not a verify report"));
        let missing = check(&dir.join("nowhere.json"), &digest, &[]).unwrap_err();
        assert!(missing.contains("cannot be read"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
