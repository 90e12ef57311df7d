//! `--log-format json`: one JSON object per line, with stable field names a
//! log collector can index. Runs the real binary (an agent whose router
//! does not answer logs a warning and retries).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

const FTNET: &str = env!("CARGO_BIN_EXE_ftnet");

#[test]
fn the_json_log_format_writes_one_object_per_line() {
    let dir = std::env::temp_dir().join(format!("ftnet-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, "0123456789abcdef0123").unwrap();
    let mut child = Command::new(FTNET)
        .args(["agent", "--router", "127.0.0.1:9", "--replica", "127.0.0.1"])
        .arg("--secret-file")
        .arg(&secret)
        .arg("--shim-socket")
        .arg(dir.join("shim.sock"))
        .args(["--log-format", "json"])
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("running ftnet agent");
    std::thread::sleep(Duration::from_millis(800));
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "some lines: {err}");
    let mut warned = false;
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        for k in ["timestamp", "level", "target"] {
            assert!(v.get(k).is_some(), "no {k}: {l}");
        }
        let msg = v["fields"]["message"].as_str().unwrap_or_default();
        assert!(!msg.is_empty(), "no fields.message: {l}");
        warned |= v["level"] == "WARN" && msg.contains("cannot reach the router");
    }
    assert!(warned, "the unreachable router is a WARN line: {err}");

    // A format that does not exist is refused, with the choices.
    let out = Command::new(FTNET)
        .args(["agent", "--log-format", "xml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("text") && e.contains("json"), "{e}");
}
