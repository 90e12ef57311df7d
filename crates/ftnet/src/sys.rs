//! Small OS helpers: signal flag, monotonic clock, random secret, process
//! groups.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores.
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// Route SIGINT and SIGTERM to a flag the main loop polls, for the
/// long-running services (`ftnet router`, `ftnet agent`). No SA_RESTART, so a
/// blocking poll(2) or wait returns EINTR promptly.
///
/// SIGHUP never stops them: logrotate and `systemctl reload` send it to ask
/// for a reload, and a router that stops on it takes the service down. It
/// runs the action given to [`on_sighup`] (the router reloads its config),
/// or is logged and ignored.
pub fn install_stop_handler() {
    install(&[libc::SIGINT, libc::SIGTERM], on_signal);
    install_hup_logger();
}

/// [`install_stop_handler`] for interactive commands (`ftnet lab ...`):
/// SIGHUP (the terminal went away) stops them too, so that they tear down
/// what they built.
pub fn install_session_stop_handler() {
    install(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP], on_signal);
}

fn install(sigs: &[libc::c_int], handler: extern "C" fn(libc::c_int)) {
    for &sig in sigs {
        // SAFETY: `sa` is zero-initialised (a valid sigaction), the handler is an
        // `extern "C"` function that only performs async-signal-safe work
        // (atomic loads and stores, write(2)).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// What a SIGHUP does, once set (from the SIGHUP thread, never from the
/// signal handler).
static HUP_ACTION: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>> = std::sync::OnceLock::new();

/// Run `f` on every SIGHUP (after [`install_stop_handler`]); set once.
pub fn on_sighup(f: Box<dyn Fn() + Send + Sync>) {
    let _ = HUP_ACTION.set(f);
}

/// Write end of the pipe the SIGHUP handler writes one byte to; -1 before
/// [`install_hup_logger`] ran.
static HUP_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_hup(_sig: libc::c_int) {
    let fd = HUP_PIPE.load(Ordering::SeqCst);
    if fd < 0 {
        return;
    }
    // SAFETY: write(2) on a non-blocking pipe is async-signal-safe; errno is
    // saved and restored so the interrupted code does not see ours.
    unsafe {
        let errno = *libc::__errno_location();
        let b = 1u8;
        libc::write(fd, (&b as *const u8).cast(), 1);
        *libc::__errno_location() = errno;
    }
}

/// Log every SIGHUP from a thread of its own (logging is not
/// async-signal-safe), and otherwise ignore it. Falls back to SIG_IGN when
/// no pipe or thread can be had: never stopping matters more than the line.
fn install_hup_logger() {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2(2) writes two fds into the array it is given.
    let ok = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0;
    if !ok {
        ignore(libc::SIGHUP);
        return;
    }
    let (rd, wr) = (fds[0], fds[1]);
    let spawned = std::thread::Builder::new()
        .name("sighup".into())
        .spawn(move || loop {
            let mut pfd = libc::pollfd {
                fd: rd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd that lives across the call.
            if unsafe { libc::poll(&mut pfd, 1, -1) } < 0 {
                continue;
            }
            let mut buf = [0u8; 64];
            // SAFETY: reads at most 64 bytes into a live buffer of that size.
            let n = unsafe { libc::read(rd, buf.as_mut_ptr().cast(), buf.len()) };
            // Several signals that came together are one reload.
            if n > 0 {
                match HUP_ACTION.get() {
                    Some(f) => f(),
                    None => tracing::warn!("SIGHUP: reload not supported yet, ignored"),
                }
            }
        });
    if spawned.is_err() {
        ignore(libc::SIGHUP);
        return;
    }
    HUP_PIPE.store(wr, Ordering::SeqCst);
    install(&[libc::SIGHUP], on_hup);
}

fn ignore(sig: libc::c_int) {
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory effects.
    unsafe {
        libc::signal(sig, libc::SIG_IGN);
    }
}

/// Ignore SIGINT/SIGHUP (the reaper must survive the terminal's Ctrl-C).
pub fn ignore_interrupts() {
    for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGPIPE] {
        // SAFETY: setting a signal's disposition to SIG_IGN has no memory effects.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// Ignore SIGPIPE so a status client hanging up does not kill the router.
pub fn ignore_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory effects.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Ask every loop that watches [`stop_requested`] to end (the first
/// data-plane thread to stop takes the others with it).
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

pub fn last_signal() -> i32 {
    LAST_SIGNAL.load(Ordering::SeqCst)
}

/// Microseconds on the monotonic clock since `origin` (std's `Instant` is
/// CLOCK_MONOTONIC on Linux).
pub fn micros_since(origin: std::time::Instant) -> u64 {
    u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// 16 random bytes for the router's ISN secret.
pub fn random_secret() -> std::io::Result<[u8; 16]> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// Send `sig` to every process of group `pgid`.
pub fn kill_group(pgid: i32, sig: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) takes plain integers; a negative pid addresses a group.
    if unsafe { libc::kill(-pgid, sig) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Send `sig` to one process.
pub fn kill_pid(pid: i32, sig: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) takes plain integers.
    if unsafe { libc::kill(pid, sig) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Put a child in its own session (and so its own process group) before it
/// execs: it survives our terminal's Ctrl-C and can be killed as a group.
pub fn detach(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and calls only setsid(2),
    // which is async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Processes whose process group is `pgid`: (pid, command name).
pub fn group_members(pgid: i32) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised comm (which may contain spaces):
        // state ppid pgrp ...
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if rest.len() > 2 && rest[2].parse::<i32>().ok() == Some(pgid) && rest[0] != "Z" {
            out.push((pid, comm));
        }
    }
    out
}

/// Keep freed heap memory instead of returning it to the kernel. Every GSO
/// super-packet is a fresh allocation of up to 64 KB; with glibc's default
/// 128 KB trim threshold the heap top is given back and faulted in again
/// all the time (2-3 % of the router's CPU in page faults under iperf3).
pub fn keep_heap() {
    // SAFETY: mallopt(3) only changes allocator tuning parameters; it is
    // called before any other thread of ours exists.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// This machine's host name (for the agent's registration), or "unknown".
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// A read that timed out or was interrupted: try again, nothing is wrong.
pub fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// Microseconds since the Unix epoch (the wall clock, read once).
pub fn epoch_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A duration in whole milliseconds, saturating.
pub fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Watches one loop that must turn often (a control session: its silence
/// for `dead_after` reads as a lost host on the other side). An iteration
/// that took longer than [`StallWatch::LIMIT`] is said once, at warn level,
/// with where the time went, so that a slow peer or a starved host shows in
/// the log of the side that stalled and not only as the other side's verdict.
pub struct StallWatch {
    what: &'static str,
    start: std::time::Instant,
    last: std::time::Instant,
    parts: Vec<(&'static str, u64)>,
    /// When the last warning went, so that a stalling loop says it at most
    /// once a second.
    said: Option<std::time::Instant>,
}

impl StallWatch {
    /// An iteration at least this long is said.
    pub const LIMIT: std::time::Duration = std::time::Duration::from_millis(150);

    pub fn new(what: &'static str) -> StallWatch {
        let now = std::time::Instant::now();
        StallWatch {
            what,
            start: now,
            last: now,
            parts: Vec::new(),
            said: None,
        }
    }

    /// The part of the iteration since the last mark is `part`.
    pub fn mark(&mut self, part: &'static str) {
        let now = std::time::Instant::now();
        let took = ms(now.saturating_duration_since(self.last));
        self.parts.push((part, took));
        self.last = now;
    }

    /// One iteration ended (`part` names its last piece) and the next begins.
    pub fn lap(&mut self, part: &'static str) {
        self.mark(part);
        let now = self.last;
        let took = now.saturating_duration_since(self.start);
        if took >= Self::LIMIT
            && self.said.is_none_or(|t| {
                now.saturating_duration_since(t) >= std::time::Duration::from_secs(1)
            })
        {
            let detail: Vec<String> = self
                .parts
                .iter()
                .filter(|(_, t)| *t > 0)
                .map(|(p, t)| format!("{p} {t} ms"))
                .collect();
            tracing::warn!(
                took_ms = ms(took),
                "{} stalled for {} ms ({}): the peer may take this silence for a lost host",
                self.what,
                ms(took),
                detail.join(", ")
            );
            self.said = Some(now);
        }
        self.parts.clear();
        self.start = now;
    }
}

/// What [`realtime`] got for the calling thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sched {
    /// `SCHED_RR` at this priority.
    RoundRobin(i32),
    /// Normal scheduling at a raised weight (nice -10): realtime was refused.
    Nice,
    /// Normal scheduling (priority 0 asked for, or both refused).
    Normal,
}

/// Run the calling thread (and the threads it starts later) at realtime
/// priority `prio` (`SCHED_RR`, 1–99; 0 leaves it alone), as cluster
/// heartbeat daemons do (corosync, keepalived): a failure detector whose own
/// process waits for the CPU behind a loaded host's servers takes its delay
/// for the peer's death. Where realtime is refused (no CAP_SYS_NICE, a
/// container without an RT budget) it falls back to nice -10. Returns what
/// it got; the caller logs it. The kernel's RT throttling
/// (`sched_rt_runtime_us`, 95 % by default) keeps a runaway thread from
/// taking a whole CPU.
pub fn realtime(prio: i32) -> Sched {
    if prio <= 0 {
        return Sched::Normal;
    }
    let param = libc::sched_param {
        sched_priority: prio.clamp(1, 99),
    };
    // SAFETY: sched_setscheduler reads one sched_param through a valid pointer; pid 0 is this thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &param) } == 0 {
        return Sched::RoundRobin(param.sched_priority);
    }
    // SAFETY: setpriority takes no pointers; PRIO_PROCESS with id 0 is this thread on Linux.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) } == 0 {
        return Sched::Nice;
    }
    Sched::Normal
}

impl std::fmt::Display for Sched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sched::RoundRobin(p) => write!(f, "realtime (SCHED_RR {p})"),
            Sched::Nice => write!(f, "nice -10 (realtime refused)"),
            Sched::Normal => write!(f, "normal"),
        }
    }
}
