//! `--config seckill.toml`: the settings of `serve` and `worker` in a file, so an operator
//! does not keep thirty flags in a unit file.
//!
//! The file's keys are the flags' own names (`admin-listen = "127.0.0.1:9090"`; an
//! underscore may stand for the dash), one table, no sections. Its settings are read first,
//! then the environment, then the command line: a flag or a set `SECKILL_*` variable
//! overrides the file (a list flag's values replace the file's list), so one instance can
//! differ from the shared file without editing it. A switch the file turns on (`log-json =
//! true`) cannot be turned off by a flag: leave it out of a shared file.
//! Rather than a second parser beside clap, the file is turned into the flags it stands for
//! and clap checks them as it checks typed flags, with the same errors; an unknown key is
//! refused with its name (a typo never falls back to a default in silence).
//!
//! `token` is read apart ([`tokens`]): its list is re-read on SIGHUP or when the file
//! changes, so a credential is rotated without a restart (`crate::app::tokens`).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The key whose list of credentials is reloaded without a restart.
pub const TOKENS_KEY: &str = "token";

/// `argv` with the settings of its `--config` file (or `SECKILL_CONFIG`) put before the
/// command line's own, for subcommand `sub` of `cmd`. Unchanged without a config file.
pub fn expand(argv: Vec<OsString>, cmd: &clap::Command) -> anyhow::Result<Vec<OsString>> {
    // Only the subcommand itself, never an argument further on that happens to read so
    // (`lock run L -- ./deploy serve` must not get the file's secrets in its argv).
    let sub_at = 1;
    if !argv
        .get(sub_at)
        .is_some_and(|a| a == OsStr::new("serve") || a == OsStr::new("worker"))
    {
        return Ok(argv);
    }
    let Some(path) = config_path(&argv[sub_at + 1..]) else {
        return Ok(argv);
    };
    let sub = cmd
        .find_subcommand(&argv[sub_at])
        .ok_or_else(|| anyhow::anyhow!("no subcommand {:?}", argv[sub_at]))?;
    let from_file = flags(&read(&path)?, &path, sub, cmd, &argv[sub_at + 1..])?;
    let mut out = argv[..=sub_at].to_vec();
    out.extend(from_file);
    out.extend_from_slice(&argv[sub_at + 1..]);
    Ok(out)
}

/// The flags `table` (the file at `path`) stands for, for subcommand `sub` of `cmd`, but
/// those the environment or the command line `given` already set; an error for a key no
/// subcommand knows.
fn flags(
    table: &toml::Table,
    path: &Path,
    sub: &clap::Command,
    cmd: &clap::Command,
    given_args: &[OsString],
) -> anyhow::Result<Vec<OsString>> {
    let mut from_file = Vec::new();
    for (key, value) in table {
        let long = key.replace('_', "-");
        if long == TOKENS_KEY || long == "config" {
            continue;
        }
        if value.is_table() {
            anyhow::bail!(
                "{}: [{key}] is a section; the file is one table of flag names",
                path.display()
            );
        }
        let Some(arg) = flag(sub, &long) else {
            // One file serves `serve` and `worker`: a key of the other is left to it.
            let elsewhere = ["serve", "worker"]
                .into_iter()
                .filter_map(|n| cmd.find_subcommand(n))
                .any(|c| flag(c, &long).is_some());
            if elsewhere {
                continue;
            }
            anyhow::bail!(
                "{}: unknown setting {key:?} (the keys are the flags of `seckill serve` and `seckill worker`)",
                path.display()
            );
        };
        if arg.get_env().is_some_and(|e| std::env::var_os(e).is_some()) {
            continue; // the environment overrides the file
        }
        if given(given_args, &long) {
            // So does the command line, lists included: clap would add a list flag's values
            // to the file's, and a per-instance `--trusted-proxy` must replace the shared
            // file's, not widen it.
            continue;
        }
        push(&mut from_file, &long, value, arg, path)?;
    }
    Ok(from_file)
}

/// Whether `args` (up to a `--`) give `--long`.
fn given(args: &[OsString], long: &str) -> bool {
    let bare = format!("--{long}");
    let with = format!("--{long}=");
    args.iter()
        .take_while(|a| *a != OsStr::new("--"))
        .filter_map(|a| a.to_str())
        .any(|a| a == bare || a.starts_with(&with))
}

fn flag<'c>(cmd: &'c clap::Command, long: &str) -> Option<&'c clap::Arg> {
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long) && !a.is_hide_set())
}

/// The `--config` of a subcommand's arguments (the last one, as clap takes it), or
/// `SECKILL_CONFIG`.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == OsStr::new("--") {
            break;
        }
        if a == OsStr::new("--config") {
            found = it.next().map(PathBuf::from);
        } else if let Some(p) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            found = Some(PathBuf::from(p));
        }
    }
    found.or_else(|| std::env::var_os("SECKILL_CONFIG").map(PathBuf::from))
}

/// The `token` list of the file at `path` for a reload, read once: the whole file is
/// checked as a start with it would be (TOML, known keys), and it must have a `token` key
/// (an empty list counts), so a file cut short mid-write or a misspelled key never revokes
/// every token in silence.
pub fn reloaded_tokens(path: &Path) -> anyhow::Result<Vec<String>> {
    let table = read(path)?;
    let cmd = <crate::cli::Cli as clap::CommandFactory>::command();
    let serve = cmd
        .find_subcommand("serve")
        .expect("seckill has a serve command");
    flags(&table, path, serve, &cmd, &[])?;
    anyhow::ensure!(
        table.contains_key(TOKENS_KEY),
        "{} has no `token` list (write `token = []` to remove every token of the file)",
        path.display()
    );
    token_list(&table, path)
}

fn read(path: &Path) -> anyhow::Result<toml::Table> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading the config file {}: {e}", path.display()))?;
    // The parser's own message quotes the offending line, which may hold a secret: only
    // the line number and the reason are told.
    text.parse::<toml::Table>().map_err(|e| {
        let line = e.span().map_or(0, |s| {
            text[..s.start.min(text.len())].lines().count().max(1)
        });
        let reason = e.message().lines().next().unwrap_or("not TOML");
        anyhow::anyhow!(
            "the config file {} is not valid TOML at line {line}: {reason}",
            path.display()
        )
    })
}

fn push(
    out: &mut Vec<OsString>,
    long: &str,
    value: &toml::Value,
    arg: &clap::Arg,
    path: &Path,
) -> anyhow::Result<()> {
    use toml::Value;
    let switch = matches!(
        arg.get_action(),
        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
    );
    match value {
        Value::Boolean(b) if switch => {
            if *b {
                out.push(format!("--{long}").into());
            }
        }
        Value::Array(items) => {
            for item in items {
                if matches!(item, Value::Array(_) | Value::Table(_)) {
                    anyhow::bail!("{}: {long} holds a nested list", path.display());
                }
                push(out, long, item, arg, path)?;
            }
        }
        Value::Table(_) => anyhow::bail!(
            "{}: {long} is a section; the file is one table of flag names",
            path.display()
        ),
        Value::String(s) => out.push(format!("--{long}={s}").into()),
        Value::Integer(n) => out.push(format!("--{long}={n}").into()),
        Value::Float(x) => out.push(format!("--{long}={x}").into()),
        Value::Boolean(b) => out.push(format!("--{long}={b}").into()),
        Value::Datetime(d) => out.push(format!("--{long}={d}").into()),
    }
    Ok(())
}

/// The `token` list of the config file at `path` (`NAME:SCOPE[+SCOPE…]:SECRET` each).
pub fn tokens(path: &Path) -> anyhow::Result<Vec<String>> {
    token_list(&read(path)?, path)
}

fn token_list(table: &toml::Table, path: &Path) -> anyhow::Result<Vec<String>> {
    match table.get(TOKENS_KEY) {
        None => Ok(Vec::new()),
        Some(toml::Value::String(s)) => Ok(vec![s.clone()]),
        Some(toml::Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| anyhow::anyhow!("{}: every token is a string", path.display()))
            })
            .collect(),
        Some(_) => anyhow::bail!(
            "{}: token is a list of NAME:SCOPE:SECRET strings",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn expanded(file: &str, args: &[&str]) -> anyhow::Result<Vec<String>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seckill.toml");
        std::fs::write(&path, file).unwrap();
        let mut argv: Vec<OsString> = vec!["seckill".into(), "serve".into()];
        argv.push("--config".into());
        argv.push(path.clone().into());
        argv.extend(args.iter().map(OsString::from));
        let cmd = crate::cli::Cli::command();
        Ok(expand(argv, &cmd)?
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect())
    }

    #[test]
    fn the_file_becomes_flags_before_the_command_line() {
        let got = expanded(
            "listen = \"127.0.0.1:9000\"\nmax_batch = 64\nwebhook = [\"http://a/1\", \"http://a/2\"]\nno-worker = true\nlog-json = false\ntoken = [\"x:read:0123456789abcdef\"]\n",
            &["--max-batch", "8"],
        )
        .unwrap();
        let at = |s: &str| got.iter().position(|a| a == s);
        assert!(at("--listen=127.0.0.1:9000").is_some(), "{got:?}");
        assert!(at("--webhook=http://a/1").is_some() && at("--webhook=http://a/2").is_some());
        assert!(at("--no-worker").is_some() && at("--log-json").is_none());
        assert!(!got.iter().any(|a| a.starts_with("--token")), "{got:?}");
        // The command line's own --max-batch is kept and the file's dropped.
        assert!(at("--max-batch=64").is_none() && at("--max-batch").is_some());
    }

    #[test]
    fn only_the_subcommand_itself_takes_the_file_and_errors_quote_no_secret() {
        let argv: Vec<OsString> = ["seckill", "events", "tail", "serve", "--config", "/nope"]
            .iter()
            .map(Into::into)
            .collect();
        let cmd = crate::cli::Cli::command();
        assert_eq!(expand(argv.clone(), &cmd).unwrap(), argv);
        let e = expanded("token = [\"ops:admin:supersecretvalue123\" \"x\"]\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1") && !e.contains("supersecret"), "{e}");
    }

    #[test]
    fn unknown_keys_and_sections_are_refused_by_name() {
        let e = expanded("listen_adress = \"x\"\n", &[]).unwrap_err();
        assert!(e.to_string().contains("listen_adress"), "{e}");
        let e = expanded("[server]\nlisten = \"x\"\n", &[]).unwrap_err();
        assert!(e.to_string().contains("section"), "{e}");
        let e = expanded("listen = \n", &[]).unwrap_err();
        assert!(e.to_string().contains("seckill.toml"), "{e}");
    }
}
