//! The command line as a user meets it: `demo`, `serve` configured by environment, the
//! generated admin token.

use std::process::Command;

use crate::process::Proc;

#[test]
fn demo_runs_seed_000_and_passes() {
    let out = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .arg("demo")
        .env("RUST_LOG", "warn")
        .output()
        .expect("seckill demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("OK: exactly 10 won, 90 sold_out"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Requests per second:"),
        "an ab-style summary: {stdout}"
    );
    assert!(stdout.contains("p99"), "latency percentiles: {stdout}");
}

#[tokio::test]
async fn serve_reads_its_settings_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let env = [
        ("SECKILL_LISTEN", "127.0.0.1:0"),
        ("SECKILL_DATA", data),
        ("SECKILL_ADMIN_TOKEN", "from-env"),
    ];
    let p = Proc::spawn(&[], &env);
    assert!(
        dir.path().join("seckill.db").exists(),
        "the ledger lives in SECKILL_DATA"
    );
    // The ledger holds every unclaimed prize code: nobody but its owner reads it.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir.path()), 0o700, "data directory");
    assert_eq!(mode(&dir.path().join("seckill.db")), 0o600, "seckill.db");
    let client = seckill::bench::client::Client::new(&p.url, "from-env");
    client
        .create_campaign(&serde_json::json!({"id": "env", "stock": 1}))
        .await
        .expect("SECKILL_ADMIN_TOKEN is the admin token");
    assert!(
        p.stdout.lock().is_empty(),
        "no token is generated when one is given"
    );
}

#[tokio::test]
async fn generated_admin_token_is_printed_once_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let args = ["--listen", "127.0.0.1:0", "--data", data];
    let first = Proc::spawn(&args, &[]);
    let token = std::fs::read_to_string(dir.path().join("admin-token")).unwrap();
    let printed = first.stdout.lock().join("\n");
    assert!(
        printed.contains(token.trim()),
        "the new token is printed: {printed:?}"
    );
    assert!(
        first.log.lock().iter().all(|l| !l.contains(token.trim())),
        "the token never reaches the log"
    );
    drop(first);
    let second = Proc::spawn(&args, &[]);
    assert!(
        second.stdout.lock().is_empty(),
        "printed only when generated"
    );
    let client = seckill::bench::client::Client::new(&second.url, token.trim());
    client
        .create_campaign(&serde_json::json!({"id": "kept", "stock": 1}))
        .await
        .expect("the kept token still works after a restart");
}
