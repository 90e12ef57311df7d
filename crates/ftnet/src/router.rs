//! `ftnet router`: the data-plane loop around the sans-IO core.
//!
//! One thread moves packets: poll(2) on the TUN, drain a batch into
//! `handle_packet`, write out everything the core wants sent, run its timers.
//! A second thread serves status snapshots on a Unix socket; it only reads
//! a string the data-plane thread refreshes, so it never blocks forwarding.

use crate::config::FileConfig;
use crate::sys;
use anyhow::Context;
use ftnet_core::{Event, Instant, Router};
use ftnet_io::{Routing, RoutingSpec, Tun, TunOptions, RECV_BUF_LEN};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{error, info, warn};

/// Packets read per wake-up before the replies are flushed: enough to
/// amortise the poll, few enough to keep latency of the first one low.
const BATCH: usize = 64;
/// Longest sleep even when the core wants no timer: the loop also watches
/// the stop flag and refreshes the status snapshot.
const MAX_SLEEP: Duration = Duration::from_millis(100);
const STATUS_EVERY: Duration = Duration::from_millis(250);

pub fn run(cfg: FileConfig) -> anyhow::Result<()> {
    sys::install_stop_handler();
    sys::ignore_sigpipe();
    let started = std::time::Instant::now();

    let tun = Tun::open(&TunOptions { name: cfg.tun.clone(), mtu: cfg.mtu, txqueuelen: 1000 })
        .with_context(|| format!("opening TUN device {}", cfg.tun))?;
    info!(tun = tun.name(), mtu = cfg.mtu, "TUN open with IFF_VNET_HDR, offloads CSUM|TSO4|TSO6|TSO_ECN");

    let mut replica_ports = Vec::new();
    for s in &cfg.core.services {
        info!(
            service = %s.name, vip = %s.vip, ports = ?s.ports,
            replicas = %s.replicas.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(","),
            "serving"
        );
        for r in &s.replicas {
            for p in &s.ports {
                replica_ports.push((*r, *p));
            }
        }
    }
    let spec = RoutingSpec {
        tun: tun.name().to_string(),
        table: cfg.table,
        vips: cfg.core.services.iter().map(|s| s.vip).collect(),
        replica_ports,
    };
    let routing = Routing::setup(&spec).context("setting up policy routing")?;

    let snapshot = Arc::new(Mutex::new(String::from("{}")));
    let socket = StatusSocket::bind(&cfg.status_socket, snapshot.clone())?;
    info!(socket = %cfg.status_socket.display(), "status socket listening");

    let secret = sys::random_secret().context("reading 16 random bytes from /dev/urandom")?;
    let mut router = Router::new(cfg.core.clone(), secret);
    let result = event_loop(tun, &mut router, started, &snapshot);

    drop(routing);
    drop(socket);
    if sys::stop_requested() {
        info!(signal = sys::last_signal(), "stopped by signal; routing and status socket removed");
    }
    result
}

fn event_loop(mut tun: Tun, router: &mut Router, started: std::time::Instant, snapshot: &Mutex<String>) -> anyhow::Result<()> {
    let mut buf = vec![0u8; RECV_BUF_LEN];
    let mut last_status = std::time::Instant::now() - STATUS_EVERY;
    let mut write_errors: u64 = 0;
    let now = || Instant::from_micros(sys::micros_since(started));
    loop {
        if sys::stop_requested() {
            return Ok(());
        }
        let t = now();
        if router.poll_timeout().is_some_and(|due| due <= t) {
            router.handle_timeout(t);
        }
        flush(&mut tun, router, &mut write_errors);

        if last_status.elapsed() >= STATUS_EVERY {
            refresh_status(router, started, snapshot, tun.name());
            last_status = std::time::Instant::now();
        }

        let sleep = match router.poll_timeout() {
            Some(due) => Duration::from_micros(due.as_micros().saturating_sub(now().as_micros())).min(MAX_SLEEP),
            None => MAX_SLEEP,
        };
        // Round up so a timer 300 µs away does not turn into a busy loop of
        // zero-millisecond polls.
        let ms = sleep.as_micros().div_ceil(1000) as libc::c_int;
        let mut pfd = libc::pollfd { fd: tun.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: `pfd` is one valid pollfd that lives across the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("poll on the TUN device");
        }
        if rc == 0 {
            continue;
        }
        let t = now();
        for _ in 0..BATCH {
            match tun.recv(&mut buf) {
                Ok(Some(pkt)) => router.handle_packet(t, pkt),
                Ok(None) => break,
                Err(e) => {
                    warn!("TUN read: {e}");
                    break;
                }
            }
        }
        flush(&mut tun, router, &mut write_errors);
    }
}

/// Write out every queued packet and log every event.
fn flush(tun: &mut Tun, router: &mut Router, write_errors: &mut u64) {
    while let Some(pkt) = router.poll_transmit() {
        if let Err(e) = tun.send(&pkt) {
            *write_errors += 1;
            // One line per power of two keeps a persistent error from flooding the log.
            if write_errors.is_power_of_two() {
                warn!(errors = *write_errors, len = pkt.data.len(), "TUN write: {e}");
            }
        }
    }
    while let Some(ev) = router.poll_event() {
        log_event(&ev);
    }
}

fn log_event(ev: &Event) {
    match ev {
        Event::Evicted { conn, replica, reason, remaining } => {
            warn!("connection {conn}: replica {replica} evicted ({reason:?}); {remaining} replica(s) remain")
        }
        Event::ReplicaDown { service, replica, reason } => {
            warn!("service {service}: replica {replica} declared down ({reason:?}); new connections skip it")
        }
        Event::ConnectionLost { conn } => error!("connection {conn}: no replica left, client reset"),
    }
}

fn refresh_status(router: &Router, started: std::time::Instant, snapshot: &Mutex<String>, tun: &str) {
    let doc = serde_json::json!({
        "uptime_s": started.elapsed().as_secs_f64(),
        "tun": tun,
        "pid": std::process::id(),
        "status": router.status(),
    });
    let text = doc.to_string();
    match snapshot.lock() {
        Ok(mut s) => *s = text,
        Err(p) => *p.into_inner() = text,
    }
}

/// The status socket: every connection gets the latest snapshot and is closed.
struct StatusSocket {
    path: PathBuf,
}

impl StatusSocket {
    fn bind(path: &Path, snapshot: Arc<Mutex<String>>) -> anyhow::Result<StatusSocket> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // A socket file left by a crashed router blocks bind(2); only remove
        // it if nobody answers on it, so two routers never fight over one.
        if path.exists() {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                anyhow::bail!("another router is already answering on {} — stop it or choose another status_socket", path.display());
            }
            std::fs::remove_file(path).with_context(|| format!("removing stale socket {}", path.display()))?;
        }
        let listener = UnixListener::bind(path).with_context(|| format!("binding status socket {}", path.display()))?;
        std::thread::Builder::new()
            .name("status".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    let text = match snapshot.lock() {
                        Ok(s) => s.clone(),
                        Err(p) => p.into_inner().clone(),
                    };
                    let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = conn.write_all(text.as_bytes()).and_then(|_| conn.write_all(b"\n"));
                }
            })
            .context("starting the status thread")?;
        Ok(StatusSocket { path: path.to_path_buf() })
    }
}

impl Drop for StatusSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
