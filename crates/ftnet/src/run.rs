//! `ftnet run -- CMD`: exec a server with the determinism shim preloaded.

use anyhow::Context;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Where the shim library is: $FTNET_SHIM_LIB, else next to this executable
/// (a build tree: target/release/), else in ../lib/ftnet/ from it (the
/// Debian package: /usr/bin/ftnet, /usr/lib/ftnet/libftnet_shim.so).
pub fn shim_library() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("FTNET_SHIM_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("finding the ftnet executable")?;
    let places = shim_places(&exe);
    if let Some(lib) = places.iter().find(|p| p.exists()) {
        return Ok(lib.clone());
    }
    anyhow::bail!(
        "no libftnet_shim.so at {} or {} — build it with `cargo build --release` (crate ftnet-shim), install the ftnet package, or set FTNET_SHIM_LIB",
        places[0].display(),
        places[1].display()
    );
}

/// Where the shim library may be, for the executable `exe`, in order.
fn shim_places(exe: &Path) -> [PathBuf; 2] {
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let prefix = dir.parent().unwrap_or(dir);
    [
        dir.join("libftnet_shim.so"),
        prefix.join("lib/ftnet/libftnet_shim.so"),
    ]
}

/// How long `ftnet run` waits for its agent's hello before it starts the
/// server without it (no agent running).
pub const HELLO_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// How long it waits for the agent to register with the router (the hello
/// then says whether the router ticks) before it takes the agent's
/// provisional one (ticks assumed: a spare's agent is refused until its
/// replica is a member).
pub const REGISTERED_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The agent's hello for the server (`FTNET_SHIM_HELLO`: the group's random
/// seed and clock), written next to the shim socket by the agent
/// ([`crate::agent::hello_path`]): at its start (`provisional`) and once it
/// registered with the router (`registered`). A server started without it
/// gets this host's time, random bytes and pid, and its replies that show
/// them may differ from the other replicas' (said loudly).
pub fn hello(socket: &Path) -> Option<String> {
    let path = crate::agent::hello_path(socket);
    let start = std::time::Instant::now();
    let mut said = false;
    loop {
        let mut provisional = None;
        if let Ok(s) = std::fs::read_to_string(&path) {
            let mut lines = s.lines();
            let h = lines.next().unwrap_or("").trim().to_string();
            if h.len() == 48 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
                if lines.next() == Some("registered") {
                    return Some(h);
                }
                provisional = Some(h);
            }
        }
        let waited = start.elapsed();
        let have = provisional.is_some();
        if let Some(h) = provisional.filter(|_| waited >= REGISTERED_WAIT) {
            eprintln!(
                "ftnet run: the agent has not registered with the router in {} s: the server gets the group's seed and assumes the router's clock ticks (with [control] tick_ms = 0 its clock would stay at 2026-01-01 until then: start servers after their agents registered)",
                REGISTERED_WAIT.as_secs()
            );
            return Some(h);
        }
        if waited >= HELLO_WAIT {
            eprintln!(
                "ftnet run: WARNING: no hello from the agent at {} in {} s (is `ftnet agent --shim-socket {}` running?): the server starts with this host's clock, random bytes and pid, and its replies that show them may differ from the other replicas'",
                path.display(),
                HELLO_WAIT.as_secs(),
                socket.display()
            );
            return None;
        }
        if !said && waited >= std::time::Duration::from_secs(1) && !have {
            eprintln!(
                "ftnet run: waiting for the agent's hello at {} (the group's clock and random seed)",
                path.display()
            );
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Replace this process with `cmd` under the shim; returns only on error.
pub fn exec(socket: &Path, cmd: &[String]) -> anyhow::Result<i32> {
    let lib = shim_library()?;
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{} {p}", lib.display()),
        _ => lib.display().to_string(),
    };
    let mut c = std::process::Command::new(&cmd[0]);
    c.args(&cmd[1..])
        .env("LD_PRELOAD", preload)
        .env("FTNET_SHIM_SOCKET", socket);
    match hello(socket) {
        Some(h) => c.env("FTNET_SHIM_HELLO", h),
        None => c.env_remove("FTNET_SHIM_HELLO"),
    };
    let err = c.exec();
    Err(err).with_context(|| format!("starting {}", cmd[0]))
}

/// How long a supervised server must have run for its next restart to
/// come at once (after [`RESTART_MIN`]); one that dies sooner counts as a
/// quick death. The first [`QUICK_DEATHS_FREE`] quick deaths in a row are
/// restarted after `RESTART_MIN` too (a server killed again soon after a
/// restart, by a crash elsewhere or an operator, is no crash loop); from
/// then on each waits twice as long as the last, up to [`RESTART_MAX`].
const RAN_LONG_ENOUGH: std::time::Duration = std::time::Duration::from_secs(10);
const RESTART_MIN: std::time::Duration = std::time::Duration::from_millis(500);
const RESTART_MAX: std::time::Duration = std::time::Duration::from_secs(30);
const QUICK_DEATHS_FREE: u32 = 3;

/// The pause before the next start after `quick` quick deaths in a row.
fn restart_pause(quick: u32) -> std::time::Duration {
    let doublings = quick.saturating_sub(QUICK_DEATHS_FREE).min(10);
    (RESTART_MIN * 2u32.pow(doublings)).min(RESTART_MAX)
}

/// `ftnet run --supervise`: run `cmd` under the shim as a child and start
/// it again whenever it ends (a crash, or its agent ending a stale server
/// so that a fresh one joins with the group's state), with a growing pause
/// if it keeps dying at once. SIGTERM, SIGINT and SIGHUP are passed on to
/// the server; after SIGTERM or SIGINT this ends with it.
pub fn supervise(socket: &Path, cmd: &[String]) -> anyhow::Result<i32> {
    let lib = shim_library()?;
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{} {p}", lib.display()),
        _ => lib.display().to_string(),
    };
    // The signals are taken synchronously (sigtimedwait); the server gets
    // the mask it would have had.
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set is a live local; sigaddset/sigprocmask take pointers to it.
    unsafe {
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let mut quick = 0u32;
    loop {
        let mut c = std::process::Command::new(&cmd[0]);
        c.args(&cmd[1..])
            .env("LD_PRELOAD", &preload)
            .env("FTNET_SHIM_SOCKET", socket);
        match hello(socket) {
            Some(h) => c.env("FTNET_SHIM_HELLO", h),
            None => c.env_remove("FTNET_SHIM_HELLO"),
        };
        // SAFETY: between fork and exec only async-signal-safe calls are
        // made (sigprocmask on a set copied into the child).
        unsafe {
            c.pre_exec(move || {
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        let started = std::time::Instant::now();
        let mut child = c.spawn().with_context(|| format!("starting {}", cmd[0]))?;
        let pid = i32::try_from(child.id()).unwrap_or(0);
        eprintln!("ftnet run: server started (pid {pid}): {}", cmd.join(" "));
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            let sig = wait_signal(&set, std::time::Duration::from_secs(1));
            match sig {
                Some(s) if s == libc::SIGTERM || s == libc::SIGINT => {
                    // SAFETY: kill(2) takes no pointers; pid is our child.
                    unsafe { libc::kill(pid, s) };
                    let st = child.wait()?;
                    eprintln!("ftnet run: stopped; the server ended with {st}");
                    return Ok(st.code().unwrap_or(0));
                }
                Some(s) if s == libc::SIGHUP => {
                    // SAFETY: as above.
                    unsafe { libc::kill(pid, s) };
                }
                _ => {}
            }
        };
        let ran = started.elapsed();
        quick = if ran >= RAN_LONG_ENOUGH { 0 } else { quick + 1 };
        let pause = restart_pause(quick);
        eprintln!(
            "ftnet run: the server ended ({status}) after {} ms; starting it again in {} ms",
            ran.as_millis(),
            pause.as_millis()
        );
        let until = std::time::Instant::now() + pause;
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            if left.is_zero() {
                break;
            }
            if let Some(s) = wait_signal(&set, left) {
                if s == libc::SIGTERM || s == libc::SIGINT {
                    eprintln!("ftnet run: stopped while the server was down");
                    return Ok(0);
                }
            }
        }
    }
}

/// One of the blocked signals in `set`, or `None` after `timeout`.
fn wait_signal(set: &libc::sigset_t, timeout: std::time::Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(1),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos().min(999_999_999) as i32),
    };
    // SAFETY: both pointers are to live locals of the right types; the info
    // argument may be null.
    let s = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (s > 0).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server killed again soon after its restart comes back at once a
    /// few times (the fault campaign killed one 6 s after its restart and
    /// its supervisor waited 30 s); a crash loop backs off to 30 s.
    #[test]
    fn quick_deaths_back_off_only_after_a_few() {
        let ms = |q| restart_pause(q).as_millis();
        assert_eq!([ms(0), ms(1), ms(3)], [500, 500, 500]);
        assert_eq!([ms(4), ms(5), ms(6)], [1000, 2000, 4000]);
        assert_eq!([ms(9), ms(40)], [30_000, 30_000]);
    }

    /// A build tree's library next to the binary comes first; an installed
    /// /usr/bin/ftnet finds the package's /usr/lib/ftnet/libftnet_shim.so.
    #[test]
    fn the_shim_is_found_in_the_build_tree_and_where_the_package_puts_it() {
        assert_eq!(
            shim_places(Path::new("/usr/bin/ftnet")),
            [
                PathBuf::from("/usr/bin/libftnet_shim.so"),
                PathBuf::from("/usr/lib/ftnet/libftnet_shim.so")
            ]
        );
        assert_eq!(
            shim_places(Path::new("/src/target/release/ftnet"))[0],
            PathBuf::from("/src/target/release/libftnet_shim.so")
        );
    }
}
