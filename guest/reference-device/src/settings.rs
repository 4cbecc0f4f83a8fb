//! The reference device's policy options (`[guest.config]`), parsed and
//! checked. Pure Rust, no WIT types: tested natively.

/// What the device reports about itself and how much memory it hands out.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub hardware_name: String,
    pub vendor: String,
    /// Bytes per second, for TensorFlow's cost model.
    pub memory_bandwidth: u64,
    pub gflops: f64,
    /// Bytes the allocator hands out, at most the region's size.
    pub memory_limit: u64,
}

impl Settings {
    pub fn defaults(memory_size: u64) -> Settings {
        Settings {
            hardware_name: "tfwasm reference device".into(),
            vendor: "tfwasm".into(),
            // Compute runs on the host's CPU cores: a DDR4 channel and a few
            // cores' worth of FLOPs. Only TF's cost model reads these.
            memory_bandwidth: 20_000_000_000,
            gflops: 100.0,
            memory_limit: memory_size,
        }
    }

    /// Applies `options` over the defaults. A malformed value is an error
    /// naming the option; an unknown option only earns a warning, so a
    /// policy written for a newer guest still loads.
    pub fn parse(memory_size: u64, options: &[(String, String)]) -> Result<(Settings, Vec<String>), String> {
        let mut settings = Settings::defaults(memory_size);
        let mut warnings = Vec::new();
        for (key, value) in options {
            match key.as_str() {
                "hardware-name" => settings.hardware_name = value.clone(),
                "vendor" => settings.vendor = value.clone(),
                "memory-bandwidth" => settings.memory_bandwidth = positive_integer(key, value)?,
                "gflops" => {
                    settings.gflops = value
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|g| g.is_finite() && *g > 0.0)
                        .ok_or_else(|| format!("option gflops = {value:?} is not a positive number"))?;
                }
                "memory-limit" => {
                    let limit = value
                        .trim()
                        .parse::<u64>()
                        .map_err(|_| format!("option memory-limit = {value:?} is not a byte count"))?;
                    if limit > memory_size {
                        warnings.push(format!(
                            "option memory-limit = {limit} exceeds the device region of {memory_size} bytes; using {memory_size}"
                        ));
                    }
                    settings.memory_limit = limit.min(memory_size);
                }
                other => warnings.push(format!("ignoring unknown option {other:?}")),
            }
        }
        Ok((settings, warnings))
    }
}

fn positive_integer(key: &str, value: &str) -> Result<u64, String> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("option {key} = {value:?} is not a positive integer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect()
    }

    #[test]
    fn no_options_means_defaults() {
        let (settings, warnings) = Settings::parse(1 << 20, &[]).unwrap();
        assert_eq!(settings, Settings::defaults(1 << 20));
        assert_eq!(settings.memory_limit, 1 << 20);
        assert!(warnings.is_empty());
    }

    #[test]
    fn options_override_defaults() {
        let given = options(&[
            ("hardware-name", "Test Board 7"),
            ("vendor", "ACME"),
            ("memory-bandwidth", "1000"),
            ("gflops", "2.5"),
            ("memory-limit", " 4096 "),
        ]);
        let (settings, warnings) = Settings::parse(1 << 20, &given).unwrap();
        assert_eq!(settings.hardware_name, "Test Board 7");
        assert_eq!(settings.vendor, "ACME");
        assert_eq!(settings.memory_bandwidth, 1000);
        assert_eq!(settings.gflops, 2.5);
        assert_eq!(settings.memory_limit, 4096);
        assert!(warnings.is_empty());
    }

    #[test]
    fn unknown_options_and_oversized_limits_warn() {
        let given = options(&[("colour", "blue"), ("memory-limit", "999999")]);
        let (settings, warnings) = Settings::parse(1000, &given).unwrap();
        assert_eq!(settings.memory_limit, 1000);
        assert_eq!(warnings.len(), 2);
        assert!(warnings[0].contains("colour"));
        assert!(warnings[1].contains("memory-limit"));
    }

    #[test]
    fn malformed_numbers_name_the_option() {
        for (key, value) in [
            ("memory-bandwidth", "fast"),
            ("memory-bandwidth", "0"),
            ("memory-bandwidth", "-5"),
            ("gflops", "NaN"),
            ("gflops", "inf"),
            ("gflops", "-1"),
            ("memory-limit", "1.5e6"),
            ("memory-limit", ""),
        ] {
            let err = Settings::parse(1 << 20, &options(&[(key, value)])).unwrap_err();
            assert!(err.contains(key), "{key} = {value:?}: {err}");
        }
    }
}
