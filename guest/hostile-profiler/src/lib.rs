//! A profiler guest that misbehaves on purpose, for tfwasm's hostile-guest
//! suite: a wasm guest of world `profiler` (`wit/profiler`,
//! `tfwasm:profiler@0.1.0`).
//!
//! Its `[profiler.guest.config]` option `mode` picks the misbehaviour. An
//! unknown mode is an error, so a typo in a test policy cannot pass for an
//! honest guest. Whatever the mode, the trace must still hold the host's
//! own lines, TensorFlow's planes, and the plane stat `profiler_guest`
//! saying why.
//!
//! | mode | what it does | the host's reason |
//! | --- | --- | --- |
//! | `honest` | shapes nothing (every device keeps the host's lines) | none |
//! | `trap` | panics | trapped … panicked |
//! | `loop` | never returns | exceeded its deadline |
//! | `error` | returns an error | failed |
//! | `flood` | a million events of its own | more than … of its own |
//! | `lying-ids` | names a recorded event that does not exist | does not exist |
//! | `wrong-device` | puts a device's recorded event on another device's plane, or names a device that does not exist | not device … / does not exist |
//! | `absurd-time` | an event of its own near the end of time | outside the session |
//! | `long-name` | a line named with a million characters | more than … characters |

/// The misbehaviour asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Honest,
    Trap,
    Loop,
    Error,
    Flood,
    LyingIds,
    WrongDevice,
    AbsurdTime,
    LongName,
}

impl Mode {
    pub const ALL: [(&'static str, Mode); 9] = [
        ("honest", Mode::Honest),
        ("trap", Mode::Trap),
        ("loop", Mode::Loop),
        ("error", Mode::Error),
        ("flood", Mode::Flood),
        ("lying-ids", Mode::LyingIds),
        ("wrong-device", Mode::WrongDevice),
        ("absurd-time", Mode::AbsurdTime),
        ("long-name", Mode::LongName),
    ];

    /// The mode `options` name (`mode = "..."`), or why there is none.
    pub fn from_options(options: &[(String, String)]) -> Result<Mode, String> {
        let name = options.iter().find(|(key, _)| key == "mode").map(|(_, value)| value.as_str());
        let name = name.ok_or("no `mode` option: the hostile profiler needs one")?;
        Mode::ALL
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, mode)| *mode)
            .ok_or_else(|| format!("unknown mode {name:?}"))
    }
}

#[cfg(target_arch = "wasm32")]
mod component {
    use crate::Mode;

    wit_bindgen::generate!({
        path: "../../wit/profiler",
        world: "profiler",
    });

    use exports::tfwasm::profiler::shaper::Guest;
    use tfwasm::profiler::types::{DeviceTrace, RecordedEvent, Session, TraceEvent, TraceLine};

    fn own(name: &str, start_ns: u64, end_ns: u64) -> TraceEvent {
        TraceEvent { recorded: None, start_ns, end_ns, name: name.into(), stats: vec![] }
    }

    fn one_line(device: u32, events: Vec<TraceEvent>) -> Vec<DeviceTrace> {
        vec![DeviceTrace { device, lines: vec![TraceLine { name: "lies".into(), events }], stats: vec![] }]
    }

    struct HostileProfiler;

    impl Guest for HostileProfiler {
        fn shape(session: Session, events: Vec<RecordedEvent>) -> Result<Vec<DeviceTrace>, String> {
            let device = session.devices.first().map_or(0, |d| d.ordinal);
            match Mode::from_options(&session.options)? {
                Mode::Honest => Ok(vec![]),
                Mode::Trap => panic!("asked to trap (mode = \"trap\")"),
                Mode::Loop => {
                    let mut spins = 0u64;
                    loop {
                        spins = std::hint::black_box(spins.wrapping_add(1));
                    }
                }
                Mode::Error => Err("asked to fail (mode = \"error\")".into()),
                Mode::Flood => {
                    let at = session.start_ns;
                    Ok(one_line(device, (0..1_000_000).map(|_| own("flood", at, at)).collect()))
                }
                Mode::LyingIds => {
                    let id = events.len() as u64 + 7;
                    Ok(one_line(
                        device,
                        vec![TraceEvent {
                            recorded: Some(id),
                            start_ns: 0,
                            end_ns: 0,
                            name: "lie".into(),
                            stats: vec![],
                        }],
                    ))
                }
                Mode::WrongDevice => match events.iter().find(|e| e.device == device) {
                    Some(event) => Ok(one_line(
                        device + 1,
                        vec![TraceEvent {
                            recorded: Some(event.id),
                            start_ns: 0,
                            end_ns: 0,
                            name: "moved".into(),
                            stats: vec![],
                        }],
                    )),
                    None => Ok(one_line(u32::MAX, vec![])),
                },
                Mode::AbsurdTime => Ok(one_line(device, vec![own("the end of time", u64::MAX - 1, u64::MAX)])),
                Mode::LongName => Ok(vec![DeviceTrace {
                    device,
                    lines: vec![TraceLine { name: "x".repeat(1_000_000), events: vec![] }],
                    stats: vec![],
                }]),
            }
        }
    }

    export!(HostileProfiler);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_read_from_the_options_and_a_typo_is_an_error() {
        let options = |mode: &str| vec![("mode".to_owned(), mode.to_owned())];
        assert_eq!(Mode::from_options(&options("lying-ids")), Ok(Mode::LyingIds));
        assert!(Mode::from_options(&options("lyingids")).is_err());
        assert!(Mode::from_options(&[]).is_err());
    }
}
