//! Golden vectors, `realtime/` kind (§8, Appendix A): every valid case
//! parses and renders deep-equal to the file; every invalid case fails
//! with the manifest's code (the §8.1 malformed-known-event rule).

mod common;

use syncular_protocol::realtime::{control_text, parse_control, render_control, ControlMessage};

#[test]
fn realtime_vectors() {
    let Some(dir) = common::vectors_dir() else { return };
    let manifest = common::manifest(&dir, "realtime");
    let kind_dir = dir.join("realtime");
    let cases = manifest["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let text = std::fs::read_to_string(kind_dir.join(case["json"].as_str().unwrap())).unwrap();
        let want: serde_json::Value = serde_json::from_str(&text).unwrap();
        let msg = parse_control(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!matches!(msg, ControlMessage::Unknown(_)), "{name}: parsed as unknown");
        assert_eq!(render_control(&msg), want, "{name}");
        // The compact text form parses back to the same message.
        assert_eq!(parse_control(&control_text(&msg)).unwrap(), msg, "{name}");
    }
    let invalid = manifest["invalid"].as_array().expect("invalid");
    assert!(!invalid.is_empty());
    for case in invalid {
        let name = case["name"].as_str().unwrap();
        let code = case["error"].as_str().unwrap();
        let text = std::fs::read_to_string(kind_dir.join(case["json"].as_str().unwrap())).unwrap();
        let e = parse_control(&text).expect_err(name);
        assert_eq!(e.code.as_str(), code, "{name}: {e}");
    }
}
