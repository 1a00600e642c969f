//! `seckill sign-user`: mints a signed identity token (`X-Seckill-User`) for one user.
//!
//! The operator's login system is meant to mint these itself (the format is in the README);
//! this command is for trying a deployment by hand, for scripts and for tests.

use std::process::ExitCode;

use clap::Args;

use crate::domain::validate_user_id;
use crate::guard::identity::Identity;
use crate::guard::secret::Secret;

#[derive(Debug, Clone, Args)]
pub struct SignUserOpts {
    /// The signing key the service is configured with (--user-signing-key).
    #[arg(long, env = "SECKILL_USER_SIGNING_KEY", hide_env_values = true)]
    pub key: Secret,
    /// The user id the token proves.
    #[arg(long)]
    pub user: String,
    /// Seconds the token stays valid.
    #[arg(long, default_value_t = 3600)]
    pub ttl: u64,
}

pub fn run(opts: SignUserOpts) -> anyhow::Result<ExitCode> {
    validate_user_id(&opts.user)?;
    let identity = Identity::new(opts.key).map_err(anyhow::Error::msg)?;
    let ttl = i64::try_from(opts.ttl).unwrap_or(i64::MAX / 2);
    let expires = chrono::Utc::now().timestamp().saturating_add(ttl);
    use std::io::Write;
    writeln!(
        std::io::stdout().lock(),
        "{}",
        identity.sign(&opts.user, expires)
    )?;
    Ok(ExitCode::SUCCESS)
}
