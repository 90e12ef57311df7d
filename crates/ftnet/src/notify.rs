//! systemd's service notifications (sd_notify(3)), by hand: one datagram of
//! `KEY=value` lines to the Unix socket named by `$NOTIFY_SOCKET` (a path,
//! or `@name` for an abstract socket). Without `$NOTIFY_SOCKET` (not started
//! by systemd with `Type=notify`) every call does nothing.
//!
//! The router says `READY=1` once it serves (TUN open, policy routing
//! installed, status socket and control listener bound), `STOPPING=1` when
//! it stops, and, with `WatchdogSec=` set (`$WATCHDOG_USEC`), `WATCHDOG=1`
//! every half of that period — but only while its data plane makes
//! progress (the snapshot refresh `/healthz` watches too), so systemd
//! restarts a router whose data plane is wedged although its process lives.
//! The agent says `READY=1` once its shim socket listens, and its
//! registrations with the router in `STATUS=`.

use std::ffi::OsString;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;
use tracing::{info, warn};

/// Where notifications go: `$NOTIFY_SOCKET`, if set and not empty.
fn socket() -> Option<OsString> {
    std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty())
}

/// The socket address `$NOTIFY_SOCKET` names: a path, or `@name` for a
/// name in the abstract namespace.
fn address(name: &OsString) -> std::io::Result<SocketAddr> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = name.as_bytes();
    match bytes.strip_prefix(b"@") {
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abstract_name)
        }
        None => SocketAddr::from_pathname(std::path::Path::new(name)),
    }
}

/// Send `state` (newline-separated `KEY=value` assignments) to `socket`.
fn send_to(socket: &OsString, state: &str) -> std::io::Result<()> {
    let addr = address(socket)?;
    let sock = UnixDatagram::unbound()?;
    let n = sock.send_to_addr(state.as_bytes(), &addr)?;
    if n != state.len() {
        return Err(std::io::Error::other("notification truncated"));
    }
    Ok(())
}

/// Send `state` to the service manager, if there is one. Returns whether it
/// was sent; a failure is logged once per kind of message, never fatal.
pub fn notify(state: &str) -> bool {
    let Some(s) = socket() else { return false };
    match send_to(&s, state) {
        Ok(()) => true,
        Err(e) => {
            let key = state.split('=').next().unwrap_or("");
            if key != "WATCHDOG" {
                warn!("systemd notification {key} to {}: {e}", s.to_string_lossy());
            }
            false
        }
    }
}

/// One line for `systemctl status` (`STATUS=`): newlines would start new
/// assignments, so they become spaces.
pub fn status(text: &str) -> bool {
    notify(&format!("STATUS={}", text.replace('\n', " ")))
}

/// `STOPPING=1`, with why in `STATUS=`.
pub fn stopping(why: &str) -> bool {
    notify(&format!("STOPPING=1\nSTATUS={}", why.replace('\n', " ")))
}

/// How often to ping the watchdog: half of `$WATCHDOG_USEC`, if it is set
/// for this process (`$WATCHDOG_PID`, when set, must be ours).
pub fn watchdog_interval() -> Option<Duration> {
    interval_from(
        std::env::var("WATCHDOG_USEC").ok().as_deref(),
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    )
}

fn interval_from(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    if let Some(p) = pid.filter(|p| !p.is_empty()) {
        if p.trim().parse::<u32>().ok()? != me {
            return None;
        }
    }
    let us: u64 = usec?.trim().parse().ok().filter(|&us| us > 0)?;
    Some(Duration::from_micros(us / 2))
}

/// The router serves: `READY=1`, and with a watchdog, a thread that pings it
/// every half period while `progress()` says the data plane moved within
/// `stalled_after` (and stops at the router's stop).
pub fn router_ready(
    status: &str,
    progress: fn() -> Option<Duration>,
    stalled_after: Duration,
    stop: fn() -> bool,
) {
    let Some(target) = socket() else { return };
    notify(&format!("READY=1\nSTATUS={}", status.replace('\n', " ")));
    let Some(every) = watchdog_interval() else {
        info!("systemd: ready (no watchdog)");
        return;
    };
    info!(
        every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
        "systemd: ready; pinging its watchdog while the data plane makes progress"
    );
    let spawned = std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || watchdog(&target, every, progress, stalled_after, stop));
    if let Err(e) = spawned {
        warn!("systemd watchdog thread: {e}; no pings (systemd will restart the router)");
    }
}

/// Every `every` until `stop()`: `WATCHDOG=1` to `target` if `progress()`
/// (time since the data plane last moved) is below `stalled_after`; none,
/// said once, while it is not.
fn watchdog(
    target: &OsString,
    every: Duration,
    progress: fn() -> Option<Duration>,
    stalled_after: Duration,
    stop: fn() -> bool,
) {
    let mut stalled = false;
    loop {
        std::thread::sleep(every);
        if stop() {
            return;
        }
        match progress() {
            Some(d) if d < stalled_after => {
                if stalled {
                    info!("the data plane makes progress again: watchdog pings resume");
                    stalled = false;
                }
                let _ = send_to(target, "WATCHDOG=1");
            }
            other => {
                if !stalled {
                    warn!(
                        "the data plane made no progress for {}: no watchdog ping (systemd restarts the router once WatchdogSec passes without one)",
                        other.map_or("ever".to_string(), |d| format!("{:.1} s", d.as_secs_f64()))
                    );
                    stalled = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;

    fn receive(sock: &UnixDatagram) -> String {
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn sends_to_a_path_socket() {
        let path = std::env::temp_dir().join(format!("ftnet-notify-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        let name = OsString::from(path.as_os_str());
        send_to(&name, "READY=1\nSTATUS=serving 1 service").unwrap();
        assert_eq!(receive(&rx), "READY=1\nSTATUS=serving 1 service");
        send_to(&name, "WATCHDOG=1").unwrap();
        assert_eq!(receive(&rx), "WATCHDOG=1");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        let name = format!("ftnet-notify-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        send_to(&OsString::from(format!("@{name}")), "STOPPING=1").unwrap();
        assert_eq!(receive(&rx), "STOPPING=1");
    }

    /// The watchdog is pinged while the data plane moves, not while it
    /// stands still, again once it moves, and never after the stop.
    #[test]
    fn the_watchdog_is_pinged_only_while_the_data_plane_moves() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        static SINCE_MS: AtomicU64 = AtomicU64::new(0);
        static STOP: AtomicBool = AtomicBool::new(false);
        fn progress() -> Option<Duration> {
            Some(Duration::from_millis(SINCE_MS.load(Ordering::Relaxed)))
        }
        fn stop() -> bool {
            STOP.load(Ordering::Relaxed)
        }
        let name = format!("ftnet-watchdog-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        let target = OsString::from(format!("@{name}"));
        let every = Duration::from_millis(20);
        let t = std::thread::spawn(move || {
            watchdog(&target, every, progress, Duration::from_secs(2), stop)
        });
        assert_eq!(receive(&rx), "WATCHDOG=1");
        // Stalled: once the pings in flight are read (a turn that read the
        // progress before the change may still send one), none comes.
        SINCE_MS.store(2_500, Ordering::Relaxed);
        std::thread::sleep(every * 15);
        rx.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        while rx.recv(&mut buf).is_ok() {}
        std::thread::sleep(every * 10);
        assert!(rx.recv(&mut buf).is_err(), "a ping while stalled");
        rx.set_nonblocking(false).unwrap();
        // Moving again: pings resume.
        SINCE_MS.store(100, Ordering::Relaxed);
        assert_eq!(receive(&rx), "WATCHDOG=1");
        STOP.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }

    #[test]
    fn a_missing_socket_is_an_error_not_a_panic() {
        let name = OsString::from("/nonexistent/ftnet-notify.sock");
        assert!(send_to(&name, "READY=1").is_err());
    }

    #[test]
    fn watchdog_interval_is_half_the_period_for_this_process_only() {
        assert_eq!(
            interval_from(Some("10000000"), None, 7),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            interval_from(Some("2000000"), Some("7"), 7),
            Some(Duration::from_secs(1))
        );
        assert_eq!(interval_from(Some("2000000"), Some("8"), 7), None);
        assert_eq!(interval_from(Some("0"), None, 7), None);
        assert_eq!(interval_from(Some("x"), None, 7), None);
        assert_eq!(interval_from(None, None, 7), None);
    }
}
