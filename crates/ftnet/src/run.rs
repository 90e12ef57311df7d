//! `ftnet run -- CMD`: exec a server with the determinism shim preloaded.

use anyhow::Context;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Where the shim library is: $FTNET_SHIM_LIB, else next to this executable.
pub fn shim_library() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("FTNET_SHIM_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("finding the ftnet executable")?;
    let lib = exe.with_file_name("libftnet_shim.so");
    if !lib.exists() {
        anyhow::bail!(
            "no {} — build it with `cargo build --release` (crate ftnet-shim) or set FTNET_SHIM_LIB",
            lib.display()
        );
    }
    Ok(lib)
}

/// Replace this process with `cmd` under the shim; returns only on error.
pub fn exec(socket: &Path, cmd: &[String]) -> anyhow::Result<i32> {
    let lib = shim_library()?;
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{} {p}", lib.display()),
        _ => lib.display().to_string(),
    };
    let err = std::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .env("LD_PRELOAD", preload)
        .env("FTNET_SHIM_SOCKET", socket)
        .exec();
    Err(err).with_context(|| format!("starting {}", cmd[0]))
}
