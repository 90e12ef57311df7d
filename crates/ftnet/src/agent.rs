//! `ftnet agent`: runs on each replica host. Registers its replica with the
//! router over the authenticated control channel, heartbeats, and keeps the
//! connection records the router sends (what a recovering router needs).
//! Reconnects with back-off whenever the router is unreachable or silent;
//! the records survive reconnections.

use crate::sys;
use anyhow::Context;
use ftnet_control::{AgentEvent, AgentSession, ConnId, ConnRecord, Decoder, Msg, OrderLog};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};

pub struct AgentArgs {
    pub router: SocketAddrV4,
    pub replica: Ipv4Addr,
    pub secret: Vec<u8>,
    pub host: String,
    /// Where servers started with `ftnet run` pick up the input order.
    pub shim_socket: PathBuf,
}

/// The shims connected to this agent (normally one: the replica's server).
#[derive(Default)]
struct Shims {
    list: Mutex<Vec<UnixStream>>,
}

impl Shims {
    /// Serve `path`; every shim that connects gets every input record.
    fn listen(path: &Path) -> anyhow::Result<Arc<Shims>> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                anyhow::bail!(
                    "another agent is already serving {} — stop it or pick another --shim-socket",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing stale {}", path.display()))?;
        }
        let l = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
        let shims = Arc::new(Shims::default());
        let s = shims.clone();
        std::thread::Builder::new()
            .name("shims".into())
            .spawn(move || {
                for c in l.incoming() {
                    let Ok(c) = c else { continue };
                    // Short: this thread also heartbeats to the router, and a
                    // shim that stops reading (its server blocked, or a
                    // fork-per-connection server that never asks for the
                    // order) must not silence the agent for `dead_after_ms`.
                    // After one timeout the shim is dropped (falls back).
                    let _ = c.set_write_timeout(Some(Duration::from_millis(50)));
                    let pid = peer_pid(&c);
                    info!(
                        pid,
                        "shim connected: the server there now gets its input in the router's order"
                    );
                    s.list.lock().unwrap_or_else(|p| p.into_inner()).push(c);
                }
            })?;
        Ok(shims)
    }

    fn send(&self, rec: &[u8]) {
        let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        list.retain_mut(|c| match c.write_all(rec) {
            Ok(()) => true,
            Err(e) => {
                warn!(
                    pid = peer_pid(c),
                    "shim dropped ({e}); that server falls back to the kernel's input order"
                );
                false
            }
        });
    }
}

fn peer_pid(c: &UnixStream) -> i32 {
    use std::os::fd::AsRawFd;
    let mut cred: libc::ucred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes one ucred of `len` bytes.
    unsafe {
        libc::getsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    cred.pid
}

/// Reconnection back-off. After a router dies its standby takes the
/// address over within about a hundred milliseconds and rebuilds its table
/// from the records this agent sends on registering: every millisecond the
/// agent waits is a millisecond the clients' connections stall (the
/// endpoints' first retransmission, ~200 ms after the loss, only gets
/// through a rebuilt connection). So the first [`FAST_TRIES`] attempts
/// after losing a router come every [`BACKOFF_MIN`], each given
/// [`CONNECT_FAST`] (a SYN sent while no router owns the address is lost,
/// and the kernel would repeat it only after a second); then the back-off
/// doubles up to [`BACKOFF_MAX`] and attempts get [`CONNECT_TIMEOUT`].
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(250);
const FAST_TRIES: u32 = 40;
const CONNECT_FAST: Duration = Duration::from_millis(30);
/// How long one connection attempt may take once the fast tries are over.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);

pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    sys::install_stop_handler();
    sys::ignore_sigpipe();
    let origin = std::time::Instant::now();
    let now_ms = || origin.elapsed().as_millis() as u64;
    let mut records: HashMap<ConnId, ConnRecord> = HashMap::new();
    let mut order = OrderLog::default();
    // The replicas out of service, as the last router said: told to the
    // next one, which must not readmit them.
    let mut down = Vec::new();
    let mut backoff = BACKOFF_MIN;
    // Attempts since the last registration (or since the start).
    let mut tries = 0u32;
    let mut last_problem = String::new();
    info!(router = %args.router, replica = %args.replica, host = %args.host, shim_socket = %args.shim_socket.display(), "agent starting");
    let shims = Shims::listen(&args.shim_socket)?;
    while !sys::stop_requested() {
        tries = tries.saturating_add(1);
        let fast = tries <= FAST_TRIES;
        let timeout = if fast { CONNECT_FAST } else { CONNECT_TIMEOUT };
        let stream = match TcpStream::connect_timeout(&args.router.into(), timeout) {
            Ok(s) => s,
            Err(e) => {
                let p = format!("cannot reach the router at {}: {e}", args.router);
                if p != last_problem {
                    warn!("{p}; retrying every {} ms at most", BACKOFF_MAX.as_millis());
                    last_problem = p;
                }
                std::thread::sleep(backoff);
                if !fast {
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
                continue;
            }
        };
        let nonce = sys::random_secret().context("reading a nonce from /dev/urandom")?;
        let (mut s, hello) =
            AgentSession::new(&args.secret, args.replica, &args.host, nonce, now_ms());
        s.records = std::mem::take(&mut records);
        s.order = std::mem::take(&mut order);
        s.down = std::mem::take(&mut down);
        let outcome = session(stream, &mut s, hello, &now_ms, &shims);
        records = std::mem::take(&mut s.records);
        order = std::mem::take(&mut s.order);
        down = std::mem::take(&mut s.down);
        if s.is_live() {
            // It was registered: the router just went away; look for its
            // successor at once, and fast.
            backoff = BACKOFF_MIN;
            tries = 0;
        }
        match outcome {
            Ok(AgentEvent::Registered { .. } | AgentEvent::RouterLost | AgentEvent::Input(_)) => {
                let p = format!("router {} fell silent", args.router);
                warn!(
                    "{p}; keeping {} connection record(s); reconnecting",
                    records.len()
                );
                last_problem = p;
                backoff = BACKOFF_MIN;
            }
            Ok(AgentEvent::Rejected { reason }) => {
                let p = format!("refused: {reason}");
                if p != last_problem {
                    warn!("{p}");
                    last_problem = p;
                }
                backoff = BACKOFF_MAX;
            }
            Err(e) => {
                let p = format!("control connection to {}: {e:#}", args.router);
                if p != last_problem {
                    warn!("{p}; reconnecting");
                    last_problem = p;
                }
            }
        }
        if !sys::stop_requested() {
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
    info!(records = records.len(), "agent stopped");
    let _ = std::fs::remove_file(&args.shim_socket);
    Ok(())
}

/// One control connection, until it ends; returns why it ended.
fn session(
    mut stream: TcpStream,
    s: &mut AgentSession,
    hello: Msg,
    now_ms: &dyn Fn() -> u64,
    shims: &Shims,
) -> anyhow::Result<AgentEvent> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_millis(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(&ftnet_control::encode(&hello))?;
    let mut dec = Decoder::default();
    let mut buf = [0u8; 16384];
    let mut out = Vec::new();
    loop {
        if sys::stop_requested() {
            return Ok(AgentEvent::RouterLost);
        }
        let mut events = Vec::new();
        match stream.read(&mut buf) {
            Ok(0) => anyhow::bail!("the router closed the connection"),
            Ok(n) => dec.push(&buf[..n]),
            Err(e) if sys::is_transient(&e) => {}
            Err(e) => return Err(e.into()),
        }
        while let Some(m) = dec.next_msg()? {
            events.extend(s.handle(m, now_ms(), &mut out));
        }
        events.extend(s.on_timeout(now_ms(), &mut out));
        if !out.is_empty() {
            // One write for all (a router waits for `Stored` before it
            // sends a SYN-ACK).
            let mut wire = Vec::new();
            for m in out.drain(..) {
                wire.extend(ftnet_control::encode(&m));
            }
            stream.write_all(&wire)?;
        }
        for ev in events {
            match ev {
                AgentEvent::Registered {
                    heartbeat,
                    dead_after,
                } => {
                    let order: Vec<String> = s
                        .order
                        .report()
                        .iter()
                        .map(|o| format!("{}:{} at {}", o.vip, o.vport, o.last_seq))
                        .collect();
                    info!(
                        heartbeat_ms = heartbeat.as_millis() as u64,
                        dead_after_ms = dead_after.as_millis() as u64,
                        records = s.records.len(),
                        input_order = %order.join(", "),
                        "registered with the router (both sides proved the shared secret)"
                    );
                }
                AgentEvent::Input(e) => {
                    shims.send(&ftnet_control::shim_record(e.seq, &e.id, e.kind, e.end))
                }
                other => return Ok(other),
            }
        }
    }
}
