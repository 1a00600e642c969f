//! The service files of `deploy/systemd/`: the unit passes `systemd-analyze verify` with no
//! warning and keeps its sandboxing (`systemd-analyze security` exposure at most 2.0 of 10),
//! and the example config file starts a real server (with the flags that a test must
//! override: its own port and data directory).

use std::process::Command;

use crate::process::Proc;

const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/systemd/seckill.service"
);
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/systemd/seckill.toml");

fn analyze(args: &[&str]) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .output()
        .expect("systemd-analyze runs: install Debian's systemd package (apt-get install systemd)")
}

#[test]
fn the_unit_verifies_and_keeps_its_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    // The unit as installed, but running this build's binary.
    let unit = std::fs::read_to_string(UNIT)
        .unwrap()
        .replace("/usr/local/bin/seckill", env!("CARGO_BIN_EXE_seckill"));
    let path = dir.path().join("seckill.service");
    std::fs::write(&path, unit).unwrap();
    let p = path.to_str().unwrap();
    let out = analyze(&["verify", p]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
    let out = analyze(&["security", "--offline=yes", "--no-pager", p]);
    let text = String::from_utf8_lossy(&out.stdout);
    let level: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for seckill.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in {text}"));
    assert!(level <= 2.0, "exposure {level}: {text}");
}

#[tokio::test]
async fn the_example_config_starts_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let p = Proc::spawn(
        &[
            "--config",
            EXAMPLE,
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--data",
            data.to_str().unwrap(),
        ],
        &[],
    );
    let health = reqwest::get(format!("{}/healthz", p.url)).await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(
        data.join("admin-token").exists(),
        "the example names no token, so one is generated"
    );
}
