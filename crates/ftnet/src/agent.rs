//! `ftnet agent`: runs on each replica host. Registers its replica with the
//! router over the authenticated control channel, heartbeats, and keeps the
//! connection records the router sends (what a recovering router needs).
//! Reconnects with back-off whenever the router is unreachable or silent;
//! the records survive reconnections.

use crate::sys;
use anyhow::Context;
use ftnet_control::{
    AgentEvent, AgentSession, ConnKey, ConnRecord, Decoder, Msg, OrderLog, Sealer, SocketInfo,
    Sockets,
};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
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
    /// End servers the router calls stale (`--end-stale-servers`).
    pub end_stale: bool,
    /// `--realtime-priority` of the control loop (0: normal scheduling).
    pub realtime_priority: i32,
}

/// What the agent keeps for one shim that cannot take it yet: a server
/// busy for a while (a long command, a loaded CPU) is a normal server, not a
/// dead one. Beyond this much unread order (~2.8 million events), its
/// server is taken to have lost the order.
const SHIM_BUFFER: usize = 64 << 20;

/// The kernel's socket buffer asked for on each shim's socket.
const SHIM_SNDBUF: libc::c_int = 4 << 20;

/// One shim: the records it has not taken yet, and what it said.
struct Shim {
    sock: UnixStream,
    pid: i32,
    /// Records not written yet: `out[sent..]`.
    out: Vec<u8>,
    sent: usize,
    /// What the shim wrote and was not parsed yet (`P` lines: where it
    /// stands; one `L`/`N` line: why it leaves).
    note: Vec<u8>,
    /// Its last answer to a position query: (query id, the last event
    /// number it received, events not consumed by its server).
    pos: Option<(u64, Option<u64>, u64)>,
}

/// How a shim left.
#[derive(Debug, PartialEq, Eq)]
enum ShimEnd {
    /// Its server can no longer follow the order (the replica must leave).
    Lost(String),
    /// It has nothing to order (a fork-per-connection server).
    Quiet(String),
}

impl Shim {
    fn new(sock: UnixStream) -> Shim {
        use std::os::fd::AsRawFd;
        let _ = sock.set_nonblocking(true);
        for opt in [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF] {
            // SAFETY: setsockopt with a pointer to one int of its size.
            let rc = unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&SHIM_SNDBUF as *const libc::c_int).cast(),
                    socklen_of::<libc::c_int>(),
                )
            };
            if rc == 0 {
                break;
            }
        }
        let pid = peer_pid(&sock);
        Shim {
            sock,
            pid,
            out: Vec::new(),
            sent: 0,
            note: Vec::new(),
            pos: None,
        }
    }

    fn pending(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Queue records (bounded: see [`SHIM_BUFFER`]).
    fn queue(&mut self, recs: &[u8]) -> Result<(), ShimEnd> {
        if self.pending() + recs.len() > SHIM_BUFFER {
            return Err(ShimEnd::Lost(format!(
                "server pid {} left {} MiB of the order unread (the agent's bound)",
                self.pid,
                SHIM_BUFFER >> 20
            )));
        }
        if self.sent > 0 && self.sent >= self.out.len() / 2 {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        self.out.extend_from_slice(recs);
        Ok(())
    }

    /// Write what the socket takes and read what the shim said; never blocks.
    fn service(&mut self) -> Result<(), ShimEnd> {
        let mut buf = [0u8; 512];
        loop {
            match (&self.sock).read(&mut buf) {
                Ok(0) => {
                    return Err(self.ended().unwrap_or_else(|| {
                        ShimEnd::Lost(format!(
                            "the shim's socket closed (server pid {} exited, or dropped its agent)",
                            self.pid
                        ))
                    }))
                }
                Ok(n) => {
                    if self.note.len() < 4096 {
                        self.note.extend_from_slice(&buf[..n]);
                    }
                    self.positions();
                    if let Some(end) = self.ended() {
                        return Err(end);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    return Err(ShimEnd::Lost(format!(
                        "reading the shim's socket (server pid {}): {e}",
                        self.pid
                    )))
                }
            }
        }
        while self.pending() > 0 {
            match (&self.sock).write(&self.out[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    return Err(self.ended().unwrap_or_else(|| {
                        ShimEnd::Lost(format!(
                            "writing to the shim (server pid {}): {e}",
                            self.pid
                        ))
                    }))
                }
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
        Ok(())
    }

    /// Take the shim's answers to position queries (`P <id> <last|-> <queued>`)
    /// off the front of what it wrote.
    fn positions(&mut self) {
        while self.note.first() == Some(&b'P') {
            let Some(nl) = self.note.iter().position(|b| *b == b'\n') else {
                return;
            };
            let line = String::from_utf8_lossy(&self.note[..nl]).to_string();
            self.note.drain(..=nl);
            let f: Vec<&str> = line.split_whitespace().collect();
            if let [_, id, last, queued] = f.as_slice() {
                if let (Ok(id), Ok(queued)) = (id.parse(), queued.parse()) {
                    self.pos = Some((id, last.parse().ok(), queued));
                }
            }
        }
    }

    /// The shim's line, once whole: `L why` (lost the order) or `N why`
    /// (nothing to order).
    fn ended(&self) -> Option<ShimEnd> {
        let nl = self.note.iter().position(|b| *b == b'\n')?;
        let line = String::from_utf8_lossy(&self.note[..nl]).to_string();
        let why = line.get(2..).unwrap_or("").to_string();
        Some(match self.note.first() {
            Some(b'N') => ShimEnd::Quiet(format!("server pid {}: {why}", self.pid)),
            _ => ShimEnd::Lost(format!("server pid {}: {why}", self.pid)),
        })
    }
}

/// Where `ftnet run` finds the hello for its server: next to the shim socket.
pub fn hello_path(shim_socket: &Path) -> PathBuf {
    let mut p = shim_socket.as_os_str().to_owned();
    p.push(".hello");
    PathBuf::from(p)
}

/// The hello (the group's random seed from the shared secret, the servers'
/// clock) for `ftnet run` to pass its server: written whole (a rename) at
/// the agent's start, `provisional` (the router not heard yet: ticks
/// assumed), and on every registration, `registered` (whether the router
/// ticks, from its `Welcome`). A second line says which.
fn write_hello(shim_socket: &Path, hello: &[u8; ftnet_control::SHIM_RECORD], registered: bool) {
    let path = hello_path(shim_socket);
    let hex: String = hello.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = path.with_extension("hello.tmp");
    let what = if registered {
        "registered"
    } else {
        "provisional"
    };
    let r = std::fs::write(&tmp, format!("{hex}\n{what}\n"))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = r {
        warn!("cannot write {}: {e}; servers started by `ftnet run` now get this host's time and random bytes", path.display());
    }
}

/// The shims connected to this agent (normally one: the replica's server).
#[derive(Default)]
struct Shims {
    list: Mutex<Vec<Shim>>,
    /// Servers whose shim lost the router's order: they run on in the
    /// kernel's order, stale and out of the group, until the router's
    /// `Restart` ends them with the others (a fresh one then joins).
    lost_order: Mutex<Vec<i32>>,
    /// The socket's path (the hello is written next to it).
    path: PathBuf,
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
        let shims = Arc::new(Shims {
            list: Mutex::default(),
            lost_order: Mutex::default(),
            path: path.to_path_buf(),
        });
        let s = shims.clone();
        std::thread::Builder::new()
            .name("shims".into())
            .spawn(move || {
                for c in l.incoming() {
                    let Ok(c) = c else { continue };
                    // Nonblocking, with a bounded buffer of its own: a shim
                    // whose server is busy gets its records when it reads
                    // again, and never stalls this agent's heartbeats.
                    let shim = Shim::new(c);
                    info!(
                        pid = shim.pid,
                        "shim connected: the server there now gets its input in the router's order"
                    );
                    s.lock().push(shim);
                }
            })?;
        Ok(shims)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Shim>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember servers whose shim lost the order (see `lost_order`).
    fn lost_order(&self, pids: Vec<i32>) {
        if !pids.is_empty() {
            self.lost_order
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(pids);
        }
    }

    /// The servers a `Restart` ends: every one that follows the order here
    /// and every one that lost it and may still run (each pid once).
    fn stale_pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self.lock().iter().map(|m| m.pid).collect();
        pids.append(&mut self.lost_order.lock().unwrap_or_else(|p| p.into_inner()));
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Queue records for every shim and write what each socket takes;
    /// returns why shims that lost the order did (they are dropped).
    fn send(&self, recs: &[u8]) -> Vec<String> {
        let mut list = self.lock();
        let mut lost = Vec::new();
        let mut pids = Vec::new();
        list.retain_mut(|c| match c.queue(recs).and_then(|()| c.service()) {
            Ok(()) => true,
            Err(end) => {
                if note_end(end, &mut lost) {
                    pids.push(c.pid);
                }
                false
            }
        });
        drop(list);
        self.lost_order(pids);
        lost
    }

    /// Write what each socket takes, notice shims that left; returns why
    /// the ones that lost the order did, and how many are left.
    fn service(&self) -> (Vec<String>, usize) {
        let mut list = self.lock();
        let mut lost = Vec::new();
        let mut pids = Vec::new();
        list.retain_mut(|c| match c.service() {
            Ok(()) => true,
            Err(end) => {
                if note_end(end, &mut lost) {
                    pids.push(c.pid);
                }
                false
            }
        });
        let n = list.len();
        drop(list);
        self.lost_order(pids);
        (lost, n)
    }

    /// Ask every shim where it stands (query `id`).
    fn query(&self, id: u64) -> Vec<String> {
        self.send(&ftnet_control::shim_query(id))
    }

    /// Every shim's answer to query `id` (the last event it received, the
    /// events its server has not consumed), once all answered; `None`
    /// until then, or with no shim.
    fn answers(&self, id: u64) -> Option<Vec<(Option<u64>, u64)>> {
        let list = self.lock();
        if list.is_empty() {
            return None;
        }
        list.iter()
            .map(|c| c.pos.filter(|p| p.0 == id).map(|p| (p.1, p.2)))
            .collect()
    }

    /// What to wait on: each shim's socket, for input (its line, its close)
    /// and, with records pending, for room.
    fn pollfds(&self) -> Vec<libc::pollfd> {
        use std::os::fd::AsRawFd;
        self.lock()
            .iter()
            .map(|c| libc::pollfd {
                fd: c.sock.as_raw_fd(),
                events: libc::POLLIN | if c.pending() > 0 { libc::POLLOUT } else { 0 },
                revents: 0,
            })
            .collect()
    }
}

/// Log a shim's end; returns whether its server lost the order (and may
/// run on, stale).
fn note_end(end: ShimEnd, lost: &mut Vec<String>) -> bool {
    match end {
        ShimEnd::Lost(why) => {
            warn!("shim dropped: {why}; its server lost the router's order: this replica leaves the group (its server runs on, out of service, until the router asks for it to be ended)");
            lost.push(why);
            true
        }
        ShimEnd::Quiet(why) => {
            info!("shim left: {why}");
            false
        }
    }
}

/// The connections of this replica's server on the ports of `records`
/// (client address, client port, local port), each with what its peer
/// acknowledged of its output where the kernel says and whether it took
/// the client's FIN, from one `sock_diag`
/// dump of this network namespace's TCP sockets. `None`, and logged, if
/// the kernel will not say: the records then go as they are (no SND.UNA,
/// so the router prompts the replica only once the client spoke; none
/// dropped as closed).
fn sockets(records: &HashMap<ConnKey, ConnRecord>) -> Option<Sockets> {
    let mut ports: Vec<u16> = records.keys().map(|k| k.vport).collect();
    ports.sort_unstable();
    ports.dedup();
    if ports.is_empty() {
        return Some(HashMap::new());
    }
    match ftnet_io::netlink::tcp_sockets(&ports) {
        Ok(m) => Some(
            m.into_iter()
                .map(|(p, s)| {
                    let info = SocketInfo {
                        bytes_acked: s.bytes_acked,
                        fin_received: s.fin_received,
                    };
                    ((p.addr, p.port, p.local_port), info)
                })
                .collect(),
        ),
        Err(e) => {
            warn!("cannot read the server's sockets ({e}); the records go as they are, without their SND.UNA");
            None
        }
    }
}

/// How long ago the peer's host last acknowledged bytes sent on `s`
/// (`TCP_INFO`'s `tcpi_last_ack_recv`, ms), if the kernel says.
fn last_ack_ms(s: &TcpStream) -> Option<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain old data; all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = socklen_of::<libc::tcp_info>();
    // SAFETY: TCP_INFO writes at most `len` bytes into `info`.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &raw mut len,
        )
    };
    (rc == 0).then_some(u64::from(info.tcpi_last_ack_recv))
}

fn peer_pid(c: &UnixStream) -> i32 {
    use std::os::fd::AsRawFd;
    let mut cred: libc::ucred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = socklen_of::<libc::ucred>();
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
/// address over within a few hundred milliseconds and rebuilds its table
/// from the records this agent sends on registering: every millisecond the
/// agent waits is a millisecond the clients' connections stall (the
/// endpoints' first retransmission, ~200 ms after the loss, only gets
/// through a rebuilt connection). So the first [`FAST_TRIES`] attempts
/// after losing a router it was registered with come every
/// [`BACKOFF_MIN`], each given [`CONNECT_FAST`] (a SYN sent while no router
/// owns the address is lost, and the kernel would repeat it only after a
/// second); then the back-off doubles up to [`BACKOFF_MAX`] and attempts
/// get [`CONNECT_TIMEOUT`].
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(250);
const FAST_TRIES: u32 = 40;
const CONNECT_FAST: Duration = Duration::from_millis(30);
/// How long one connection attempt may take once the fast tries are over.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);

/// The pace of connection attempts to the router ([`BACKOFF_MIN`] and the
/// rest above).
struct Pace {
    /// Attempts since the last registration (or since the start).
    tries: u32,
    backoff: Duration,
}

impl Pace {
    fn new() -> Pace {
        Pace {
            tries: 0,
            backoff: BACKOFF_MIN,
        }
    }

    /// A connection attempt starts: how long it may take.
    fn attempt(&mut self) -> Duration {
        self.tries = self.tries.saturating_add(1);
        if self.fast() {
            CONNECT_FAST
        } else {
            CONNECT_TIMEOUT
        }
    }

    fn fast(&self) -> bool {
        self.tries <= FAST_TRIES
    }

    /// The attempt failed: how long to wait before the next.
    fn failed(&mut self) -> Duration {
        let wait = self.backoff;
        if !self.fast() {
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        }
        wait
    }

    /// A session ended; `registered`: it got as far as registering (its
    /// router went away since, silent or with an error): the router's
    /// successor is looked for at once, and fast; `refused`: the router
    /// refused this agent (a wrong secret, say): the longest wait. Returns
    /// how long to wait before the next attempt.
    fn ended(&mut self, registered: bool, refused: bool) -> Duration {
        if refused {
            self.backoff = BACKOFF_MAX;
        } else if registered {
            self.backoff = BACKOFF_MIN;
            self.tries = 0;
            return BACKOFF_MIN;
        }
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        wait
    }
}

pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    sys::install_stop_handler();
    sys::ignore_sigpipe();
    let origin = std::time::Instant::now();
    let now_ms = || crate::sys::ms(origin.elapsed());
    let mut records: HashMap<ConnKey, ConnRecord> = HashMap::new();
    let mut record_info: HashMap<ConnKey, ftnet_control::RecordInfo> = HashMap::new();
    let mut order = OrderLog::default();
    // The replicas out of service, as the last router said: told to the
    // next one, which must not readmit them.
    let mut down = Vec::new();
    let mut pace = Pace::new();
    let mut last_problem = String::new();
    // Before any thread starts: they inherit it.
    let sched = sys::realtime(args.realtime_priority);
    info!(router = %args.router, replica = %args.replica, host = %args.host, shim_socket = %args.shim_socket.display(), scheduling = %sched, "agent starting");
    let shims = Shims::listen(&args.shim_socket)?;
    // The hello before any router is heard (a spare's server starts before
    // its replica is a member): the group's seed, ticks assumed.
    write_hello(
        &args.shim_socket,
        &ftnet_control::shim_hello(
            &ftnet_control::shim_seed(&args.secret),
            1,
            ftnet_control::SHIM_EPOCH_MS,
        ),
        false,
    );
    // systemd (Type=notify): its servers may start now (`ftnet run` finds the shim socket).
    crate::notify::notify(&format!(
        "READY=1\nSTATUS=connecting to the router at {}",
        args.router
    ));
    while !sys::stop_requested() {
        let timeout = pace.attempt();
        let stream = match TcpStream::connect_timeout(&args.router.into(), timeout) {
            Ok(s) => s,
            Err(e) => {
                let p = format!("cannot reach the router at {}: {e}", args.router);
                if p != last_problem {
                    warn!("{p}; retrying every {} ms at most", BACKOFF_MAX.as_millis());
                    last_problem = p;
                }
                std::thread::sleep(pace.failed());
                continue;
            }
        };
        let nonce = sys::random_secret().context("reading a nonce from /dev/urandom")?;
        let (mut s, hello) =
            AgentSession::new(&args.secret, args.replica, &args.host, nonce, now_ms());
        s.records = std::mem::take(&mut records);
        s.record_info = std::mem::take(&mut record_info);
        s.order = std::mem::take(&mut order);
        s.down = std::mem::take(&mut down);
        let outcome = session(
            stream,
            &mut s,
            hello,
            &now_ms,
            &shims,
            args.replica,
            args.end_stale,
        );
        records = std::mem::take(&mut s.records);
        record_info = std::mem::take(&mut s.record_info);
        order = std::mem::take(&mut s.order);
        down = std::mem::take(&mut s.down);
        // Not `is_live`: a router that fell silent closed the session.
        let registered = s.registered();
        let refused = matches!(outcome, Ok(AgentEvent::Rejected { .. }));
        match outcome {
            Ok(
                AgentEvent::Registered { .. }
                | AgentEvent::RouterLost
                | AgentEvent::Input(..)
                | AgentEvent::Checkpoint { .. }
                | AgentEvent::State { .. }
                | AgentEvent::JoinEnded { .. }
                | AgentEvent::Restart { .. },
            ) => {
                let p = format!("router {} fell silent", args.router);
                warn!(
                    "{p}; keeping {} connection record(s); reconnecting",
                    records.len()
                );
                crate::notify::status(&format!("{p}; reconnecting"));
                last_problem = p;
            }
            Ok(AgentEvent::Rejected { reason }) => {
                let p = format!("refused: {reason}");
                if p != last_problem {
                    warn!("{p}");
                    crate::notify::status(&format!("the router refused this agent: {reason}"));
                    last_problem = p;
                }
            }
            Err(e) => {
                let p = format!("control connection to {}: {e:#}", args.router);
                if p != last_problem {
                    warn!("{p}; reconnecting");
                    last_problem = p;
                }
            }
        }
        let wait = pace.ended(registered, refused);
        if !sys::stop_requested() {
            std::thread::sleep(wait);
        }
    }
    crate::notify::stopping("stopping");
    info!(records = records.len(), "agent stopped");
    let _ = std::fs::remove_file(&args.shim_socket);
    let _ = std::fs::remove_file(hello_path(&args.shim_socket));
    Ok(())
}

/// One control connection, until it ends; returns why it ended.
fn session(
    mut stream: TcpStream,
    s: &mut AgentSession,
    hello: Msg,
    now_ms: &dyn Fn() -> u64,
    shims: &Shims,
    me: Ipv4Addr,
    end_stale: bool,
) -> anyhow::Result<AgentEvent> {
    let mut job: Option<Job> = None;
    // This replica joins: its servers get no input until the state is
    // proven (the router resumes the service's input meanwhile); the
    // records wait here, bounded by what a shim may leave unread.
    let mut hold: Option<Hold> = None;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_millis(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(&ftnet_control::encode(&hello))?;
    let mut dec = Decoder::default();
    // Sealed once the router's Welcome proved the secret (both ways).
    let mut seal = Sealer::default();
    let mut buf = vec![0u8; 256 * 1024];
    let mut out = Vec::new();
    let mut stall = sys::StallWatch::new("agent loop");
    loop {
        stall.lap("events");
        if sys::stop_requested() {
            if s.is_live() && !shims.lock().is_empty() {
                s.lose_order(
                    "the agent is stopping: its server can no longer get the order",
                    &mut out,
                );
                let wire: Vec<u8> = out.drain(..).flat_map(|m| seal.encode(&m)).collect();
                let _ = stream.write_all(&wire);
            }
            return Ok(AgentEvent::RouterLost);
        }
        let mut events = Vec::new();
        // Wait for the router, or for a shim (room for its pending records,
        // its close), at most 10 ms (timers).
        let mut fds = vec![libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        fds.extend(shims.pollfds());
        // SAFETY: `fds` is a valid, writable array of its length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 10) };
        stall.mark("poll");
        if fds[0].revents != 0 {
            match stream.read(&mut buf) {
                Ok(0) => anyhow::bail!("the router closed the connection"),
                Ok(n) => dec.push(&buf[..n]),
                Err(e) if sys::is_transient(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        stall.mark("read");
        let (lost, count) = shims.service();
        stall.mark("shims");
        for why in lost {
            s.lose_order(&why, &mut out);
        }
        s.set_shims(u32::try_from(count).unwrap_or(u32::MAX), &mut out);
        // Every input record of this read goes to the shims in one write.
        let mut recs: Vec<u8> = Vec::new();
        while let Some(m) = dec.next_msg()? {
            if matches!(m, Msg::Welcome { .. }) {
                // The records go out with this: each with where its
                // replica's output stands acknowledged (its SND.UNA).
                s.note_sockets(sockets(&s.records));
            }
            let ev = s.handle(m, now_ms(), &mut out);
            for k in s.take_dropped() {
                info!(
                    client = %format!("{}:{}", k.client, k.cport),
                    port = k.vport,
                    "connection record dropped, not handed to the router: the server has no socket of it any more (it closed here while no router could say so, or the server restarted)"
                );
            }
            if !dec.is_sealed() {
                if let Some(k) = s.frame_keys() {
                    dec.expect_sealed(k.recv);
                    seal.seal(k.send);
                }
            }
            match ev {
                Some(AgentEvent::Input(e, isn)) => {
                    recs.extend_from_slice(&ftnet_control::shim_record(&e, isn))
                }
                Some(ev) => {
                    if let AgentEvent::Checkpoint { join, joiner, .. } = &ev {
                        if *joiner == me {
                            // What came before is not the join's.
                            for why in shims.send(&recs) {
                                s.lose_order(&why, &mut out);
                            }
                            recs.clear();
                            // Its shim must not hand out the joined
                            // connections unordered meanwhile.
                            for why in shims.send(&ftnet_control::shim_hold(true)) {
                                s.lose_order(&why, &mut out);
                            }
                            hold = Some(Hold {
                                join: *join,
                                recs: Vec::new(),
                                overflow: false,
                            });
                        }
                    }
                    events.push(ev);
                }
                None => {}
            }
        }
        stall.mark("handle");
        if !recs.is_empty() {
            match &mut hold {
                Some(h) if h.overflow => {}
                Some(h) if h.recs.len() + recs.len() > SHIM_BUFFER => {
                    // It cannot keep up: its join fails, and its server
                    // (which missed these) is ended as stale.
                    h.overflow = true;
                    h.recs = Vec::new();
                    let why = format!(
                        "the input held for this joiner's server while its state travels exceeded {} MiB: it cannot catch up with this load; it tries again later",
                        SHIM_BUFFER >> 20
                    );
                    match job.as_mut().filter(|j| j.join == h.join) {
                        Some(j) => j.fail(why, &mut out),
                        None => {
                            warn!(join = h.join, "join: {why}");
                            out.push(Msg::StateFailed {
                                join: h.join,
                                reason: why,
                            });
                        }
                    }
                }
                Some(h) => h.recs.extend_from_slice(&recs),
                None => {
                    for why in shims.send(&recs) {
                        s.lose_order(&why, &mut out);
                    }
                }
            }
        }
        stall.mark("send");
        if let Some(j) = &mut job {
            j.tick(shims, now_ms(), &mut out);
        }
        stall.mark("job");
        if let Some(ago) = last_ack_ms(&stream) {
            // The router's host answers even while its process is busy.
            s.router_host_acked(now_ms(), ago);
        }
        events.extend(s.on_timeout(now_ms(), &mut out));
        if !out.is_empty() {
            // One write for all (a router waits for `Stored` before it
            // sends a SYN-ACK).
            let mut wire = Vec::new();
            for m in out.drain(..) {
                wire.extend(seal.encode(&m));
            }
            stream.write_all(&wire)?;
        }
        stall.mark("write");
        for ev in events {
            match ev {
                AgentEvent::Registered {
                    heartbeat,
                    dead_after,
                } => {
                    if let Some(h) = s.hello {
                        write_hello(&shims.path, &h, true);
                    }
                    let order: Vec<String> = s
                        .order
                        .report()
                        .iter()
                        .map(|o| format!("{}:{} at {}", o.vip, o.vport, o.last_seq))
                        .collect();
                    info!(
                        heartbeat_ms = crate::sys::ms(heartbeat),
                        dead_after_ms = crate::sys::ms(dead_after),
                        records = s.records.len(),
                        input_order = %order.join(", "),
                        "registered with the router (both sides proved the shared secret)"
                    );
                    crate::notify::status("registered with the router");
                }
                AgentEvent::Input(..) => {}
                AgentEvent::Checkpoint {
                    join,
                    ports,
                    seq,
                    donor,
                    joiner,
                    ..
                } => {
                    let port = ports.first().copied().unwrap_or(0);
                    if donor == me {
                        info!(join, seq, %joiner, port, "donor of a join: checkpointing the server's state once it applied input event {seq}");
                        job = Some(Job::donor(join, seq, port, now_ms()));
                    } else if joiner == me {
                        info!(join, seq, %donor, port, "joining: receiving the group's state from {donor}");
                        job = Some(Job::joiner(join, port, now_ms()));
                    }
                }
                AgentEvent::State {
                    join,
                    data,
                    last,
                    digest,
                } => {
                    if let Some(j) = &mut job {
                        j.piece(join, &data, last, digest, &mut out);
                    }
                }
                AgentEvent::JoinEnded { join, ok } => {
                    if let Some(h) = hold.take_if(|h| h.join == join) {
                        if ok && !h.overflow {
                            info!(
                                join,
                                bytes = h.recs.len(),
                                "joined: the input held since the checkpoint goes to the server, which catches up"
                            );
                            let mut recs = h.recs;
                            recs.extend_from_slice(&ftnet_control::shim_hold(false));
                            for why in shims.send(&recs) {
                                s.lose_order(&why, &mut out);
                            }
                        }
                    }
                    if let Some(j) = job.take_if(|j| j.join == join) {
                        if ok && j.joiner {
                            info!(join, "joined: this replica serves again with the group's state; its server follows the order");
                            s.order_regained();
                        } else {
                            info!(join, ok, "join ended");
                        }
                    }
                }
                AgentEvent::Restart { reason } if !end_stale => {
                    warn!("the router says this replica's servers are stale ({reason}); they are left running, out of service (start the agent with --end-stale-servers where a supervisor restarts them): restart them with no state to bring the replica back");
                }
                AgentEvent::Restart { reason } => {
                    // The servers' state is behind the group's and serves
                    // nobody: SIGKILL loses nothing, and their supervisor
                    // starts them afresh: those following the order, and
                    // those that lost it and run on in the kernel's order.
                    // Only real process ids (0 or a negative one would
                    // signal whole process groups, this agent's included),
                    // and only processes the shim is still loaded in (a
                    // server that ended by itself may have left its pid to
                    // an unrelated process).
                    let pids: Vec<i32> = shims
                        .stale_pids()
                        .into_iter()
                        .filter(|&p| p > 1 && p != std::process::id() as i32 && runs_shim(p))
                        .collect();
                    for pid in &pids {
                        // SAFETY: kill(2) takes no pointers.
                        let rc = unsafe { libc::kill(*pid, libc::SIGKILL) };
                        if rc != 0 {
                            warn!(
                                pid,
                                "could not end a stale server: {}",
                                std::io::Error::last_os_error()
                            );
                        }
                    }
                    if pids.is_empty() {
                        info!("the router says this replica's servers are stale ({reason}); none runs here");
                    } else {
                        warn!(?pids, "the router says this replica's servers are stale ({reason}): ended them; a supervisor (`ftnet run --supervise`, systemd) starts them afresh, and a fresh server joins with the group's state");
                    }
                }
                other => return Ok(other),
            }
        }
    }
}

/// Whether process `pid` runs with the determinism shim loaded (it is one
/// of this host's ordered servers, not a process that took a freed pid).
fn runs_shim(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libftnet_shim"))
}

/// A joiner's held input ([`session`]'s `hold`).
struct Hold {
    join: u64,
    /// Shim records not given to the servers yet, in their order.
    recs: Vec<u8>,
    /// More than a shim may leave unread came: the join fails, the rest is
    /// dropped (the server is stale and ends).
    overflow: bool,
}

/// How long a donor waits for its server to apply the join's input point.
const JOIN_APPLY_MAX: u64 = 10_000;
/// How long a join's checkpoint or restore may take here.
const STATE_IO_TIMEOUT: Duration = Duration::from_secs(50);

/// This agent's part of a join ([`Msg::Checkpoint`]): as the donor, wait
/// until the server applied the join's input event, checkpoint it and send
/// the state; as the joiner, check that the server is fresh, take the
/// state, restore it and report its digest.
struct Job {
    join: u64,
    /// This agent's replica is the joiner (else the donor).
    joiner: bool,
    port: u16,
    started: u64,
    /// The position query out, and when it went.
    query: Option<(u64, u64)>,
    phase: Phase,
}

/// The donor's checkpoint, in the order its parts are ready.
enum Checkpoint {
    /// Fixed at the join's input point (the server forked).
    Point,
    Bytes(Vec<u8>),
    Digest(String),
}

enum Phase {
    /// Donor: until the server applied event `seq`.
    Applying {
        seq: u64,
    },
    /// Donor: the checkpoint runs: the saved bytes come first (sent at
    /// once, so that the joiner restores while the digest is computed),
    /// then the digest.
    Checkpointing(std::sync::mpsc::Receiver<Result<Checkpoint, String>>),
    /// Joiner: the state arrives (`fresh`: the server took no input yet).
    Receiving {
        buf: Vec<u8>,
        fresh: Option<bool>,
        complete: bool,
    },
    /// Joiner: the restore runs.
    Restoring(std::sync::mpsc::Receiver<Result<String, String>>),
    Done,
}

impl Job {
    fn donor(join: u64, seq: u64, port: u16, now: u64) -> Job {
        Job {
            join,
            joiner: false,
            port,
            started: now,
            query: None,
            phase: Phase::Applying { seq },
        }
    }

    fn joiner(join: u64, port: u16, now: u64) -> Job {
        Job {
            join,
            joiner: true,
            port,
            started: now,
            query: None,
            phase: Phase::Receiving {
                buf: Vec::new(),
                fresh: None,
                complete: false,
            },
        }
    }

    fn fail(&mut self, why: String, out: &mut Vec<Msg>) {
        warn!(join = self.join, "join: {why}");
        out.push(Msg::StateFailed {
            join: self.join,
            reason: why,
        });
        self.phase = Phase::Done;
    }

    /// A piece of the donor's state (joiner).
    fn piece(
        &mut self,
        join: u64,
        data: &str,
        last: bool,
        digest: Option<String>,
        out: &mut Vec<Msg>,
    ) {
        if join != self.join {
            return;
        }
        let Phase::Receiving { buf, complete, .. } = &mut self.phase else {
            return;
        };
        if *complete {
            return;
        }
        match ftnet_control::state_unhex(data) {
            Some(b) => buf.extend_from_slice(&b),
            None => return self.fail("a state piece is not hex".into(), out),
        }
        if last {
            *complete = true;
            info!(join, bytes = buf.len(), donor_digest = ?digest, "joiner: the state arrived");
        }
    }

    /// Ask the shims where they stand, at most every 5 ms; their answer
    /// to the last query once all answered.
    fn position(&mut self, shims: &Shims, now: u64) -> Option<Vec<(Option<u64>, u64)>> {
        if let Some((id, _)) = self.query {
            if let Some(a) = shims.answers(id) {
                self.query = None;
                return Some(a);
            }
        }
        if self.query.is_none_or(|(_, at)| now >= at + 5) {
            let id = self.query.map_or(1, |(id, _)| id + 1);
            shims.query(id);
            self.query = Some((id, now));
        }
        None
    }

    /// Move on as far as it goes now.
    fn tick(&mut self, shims: &Shims, now: u64, out: &mut Vec<Msg>) {
        let port = self.port;
        match &mut self.phase {
            Phase::Applying { seq } => {
                let seq = *seq;
                if shims.lock().is_empty() {
                    self.fail(
                        "no server here follows the input order (none under `ftnet run`)".into(),
                        out,
                    );
                } else if now > self.started + JOIN_APPLY_MAX {
                    self.fail(
                        format!(
                            "the server did not apply input event {seq} within {JOIN_APPLY_MAX} ms"
                        ),
                        out,
                    );
                } else if let Some(a) = self.position(shims, now) {
                    if a.iter()
                        .all(|&(last, queued)| last.unwrap_or(0) >= seq && queued == 0)
                    {
                        let (tx, rx) = std::sync::mpsc::channel();
                        std::thread::spawn(move || {
                            let mut report = |f: crate::state::Fork| match f {
                                crate::state::Fork::Point => {
                                    let _ = tx.send(Ok(Checkpoint::Point));
                                }
                                crate::state::Fork::Saved(bytes, proof) => {
                                    let _ = tx.send(Ok(Checkpoint::Bytes(bytes)));
                                    let _ = tx.send(Ok(Checkpoint::Digest(proof)));
                                }
                            };
                            let r = crate::state::redis_fork(port, STATE_IO_TIMEOUT, &mut report);
                            if let Err(e) = r {
                                let _ = tx.send(Err(e.to_string()));
                            }
                        });
                        self.phase = Phase::Checkpointing(rx);
                    }
                }
            }
            Phase::Checkpointing(rx) => match rx.try_recv() {
                Ok(Ok(Checkpoint::Point)) => {
                    info!(
                        join = self.join,
                        ms = now - self.started,
                        "donor: checkpoint fixed at the join's input point (the server forked); the service's input may resume while it is written and sent"
                    );
                    out.push(Msg::Snapshot { join: self.join });
                }
                Ok(Ok(Checkpoint::Bytes(bytes))) => {
                    info!(
                        join = self.join,
                        bytes = bytes.len(),
                        ms = now - self.started,
                        "donor: checkpoint saved; sending it"
                    );
                    let n = bytes.len().div_ceil(ftnet_control::STATE_CHUNK).max(1);
                    for i in 0..n {
                        let lo = i * ftnet_control::STATE_CHUNK;
                        let hi = (lo + ftnet_control::STATE_CHUNK).min(bytes.len());
                        out.push(Msg::State {
                            join: self.join,
                            data: ftnet_control::state_hex(&bytes[lo..hi]),
                            last: i + 1 == n,
                            digest: None,
                        });
                    }
                }
                Ok(Ok(Checkpoint::Digest(digest))) => {
                    info!(join = self.join, %digest, ms = now - self.started, "donor: checkpoint sent; its proof follows");
                    out.push(Msg::State {
                        join: self.join,
                        data: String::new(),
                        last: true,
                        digest: Some(digest),
                    });
                    self.phase = Phase::Done;
                }
                Ok(Err(e)) => self.fail(format!("checkpoint: {e}"), out),
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
                Err(_) => self.fail("the checkpoint thread died".into(), out),
            },
            Phase::Receiving { fresh: None, .. } => {
                if shims.lock().is_empty() {
                    self.fail(
                        "no server here follows the input order (start it with `ftnet run`)".into(),
                        out,
                    );
                } else if let Some(a) = self.position(shims, now) {
                    if let Some(last) = a.iter().find_map(|p| p.0) {
                        self.fail(format!("this replica's server already took input (up to event {last}): only a fresh server can take the group's state; restart it"), out);
                    } else if let Phase::Receiving { fresh, .. } = &mut self.phase {
                        *fresh = Some(true);
                    }
                }
            }
            Phase::Receiving {
                fresh: Some(_),
                complete: true,
                buf,
            } => {
                let bytes = std::mem::take(buf);
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let r = crate::state::redis_restore_proof(port, &bytes, STATE_IO_TIMEOUT)
                        .map_err(|e| e.to_string());
                    let _ = tx.send(r);
                });
                self.phase = Phase::Restoring(rx);
            }
            Phase::Receiving { .. } => {}
            Phase::Restoring(rx) => match rx.try_recv() {
                Ok(Ok(digest)) => {
                    info!(join = self.join, %digest, ms = now - self.started, "joiner: state restored");
                    out.push(Msg::Restored {
                        join: self.join,
                        digest,
                    });
                    self.phase = Phase::Done;
                }
                Ok(Err(e)) => self.fail(format!("restore: {e}"), out),
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
                Err(_) => self.fail("the restore thread died".into(), out),
            },
            Phase::Done => {}
        }
    }
}

/// The size of `T` as a socket option or address length.
fn socklen_of<T>() -> libc::socklen_t {
    // Socket option values are a few bytes.
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(libc::socklen_t::MAX)
}

#[cfg(test)]
mod tests {

    /// An agent that waited long for its first router (past the fast
    /// tries) registers, and the router dies: the successor is looked for
    /// at the fast pace again (the standby's address is up a few hundred
    /// milliseconds after the loss; a slow attempt that began just before
    /// costs every client that much more).
    #[test]
    fn after_losing_a_registered_router_the_agent_reconnects_fast() {
        let mut p = Pace::new();
        for _ in 0..FAST_TRIES * 2 {
            p.attempt();
            p.failed();
        }
        assert_eq!(
            p.attempt(),
            CONNECT_TIMEOUT,
            "slow once the fast tries are over"
        );
        assert_eq!(p.failed(), BACKOFF_MAX);
        // Connected and registered; then the router fell silent.
        assert_eq!(p.ended(true, false), BACKOFF_MIN);
        for k in 0..FAST_TRIES {
            assert_eq!(p.attempt(), CONNECT_FAST, "attempt {k}");
            assert_eq!(p.failed(), BACKOFF_MIN);
        }
        assert_eq!(p.attempt(), CONNECT_TIMEOUT);
        // A session that never registered changes nothing; a refusal waits
        // the longest.
        let before = p.tries;
        p.ended(false, false);
        assert_eq!(p.tries, before);
        assert_eq!(p.ended(false, true), BACKOFF_MAX);
    }

    use super::*;

    fn records(from: u64, n: u64) -> Vec<u8> {
        let key = ConnKey {
            client: Ipv4Addr::new(198, 18, 1, 2),
            cport: 40000,
            vip: Ipv4Addr::new(198, 19, 0, 1),
            vport: 6379,
        };
        (from..from + n)
            .flat_map(|seq| {
                ftnet_control::shim_record(
                    &ftnet_control::NumberedInput {
                        seq,
                        key,
                        kind: ftnet_control::InputKind::Data {
                            end: ftnet_wire::mod32(seq),
                        },
                    },
                    None,
                )
            })
            .collect()
    }

    /// A server that does not read for a while (far longer than a socket
    /// buffer holds, far longer than the old 50 ms) loses nothing: its
    /// records wait in the agent and arrive whole and in order.
    #[test]
    fn a_busy_shim_gets_every_record_in_order() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut shim = Shim::new(a);
        let (batch, batches) = (4096u64, 200u64); // ~19.7 MB
        for i in 0..batches {
            shim.queue(&records(i * batch, batch)).unwrap();
            shim.service().unwrap();
        }
        assert!(shim.pending() > 0, "the socket cannot hold it all");
        std::thread::sleep(Duration::from_millis(200));
        shim.service().unwrap();
        let want = records(0, batch * batches);
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; want.len()];
            b.read_exact(&mut got).unwrap();
            assert!(got == want, "records arrive whole and in order");
            b
        });
        let t = std::time::Instant::now();
        while shim.pending() > 0 && t.elapsed() < Duration::from_secs(20) {
            shim.service().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(shim.pending(), 0);
        drop(reader.join().unwrap());
    }

    /// Beyond the bound, the server is taken to have lost the order (the
    /// replica leaves), never silently dropped records.
    #[test]
    fn beyond_the_bound_the_order_is_lost() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut shim = Shim::new(a);
        let chunk = vec![0u8; 1 << 20];
        let mut res = Ok(());
        for _ in 0..=(SHIM_BUFFER >> 20) + 8 {
            res = shim.queue(&chunk).and_then(|()| shim.service());
            if res.is_err() {
                break;
            }
        }
        assert!(
            matches!(&res, Err(ShimEnd::Lost(why)) if why.contains("unread")),
            "{res:?}"
        );
    }

    /// What a shim says when it leaves, and its socket closing.
    #[test]
    fn a_shim_leaving_is_noticed_with_its_reason() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut shim = Shim::new(a);
        b.write_all(b"L hole in the router's order (expected 9, got 12)\n")
            .unwrap();
        assert!(matches!(shim.service(), Err(ShimEnd::Lost(w)) if w.contains("hole")));
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut shim = Shim::new(a);
        b.write_all(b"N no ordered listener\n").unwrap();
        drop(b);
        assert!(matches!(shim.service(), Err(ShimEnd::Quiet(_))));
        let (a, b) = UnixStream::pair().unwrap();
        let mut shim = Shim::new(a);
        shim.service().unwrap();
        drop(b);
        assert!(matches!(shim.service(), Err(ShimEnd::Lost(w)) if w.contains("closed")));
        // Through the list: a lost shim is reported and dropped.
        let shims = Shims::default();
        let (a, b) = UnixStream::pair().unwrap();
        shims.lock().push(Shim::new(a));
        assert_eq!(shims.service(), (vec![], 1));
        drop(b);
        let (lost, left) = shims.service();
        assert_eq!((lost.len(), left), (1, 0));
    }

    /// A server whose shim lost the order runs on in the kernel's order,
    /// stale and out of the group: it stays among the servers the router's
    /// `Restart` ends, after its shim left the list (before, only the shims
    /// still connected were, so an ORDER LOST replica never came back). One
    /// that left quietly (nothing to order) is not.
    #[test]
    fn a_server_that_lost_the_order_is_among_those_a_restart_ends() {
        let me = std::process::id() as i32;
        let shims = Shims::default();
        let (a, mut b) = UnixStream::pair().unwrap();
        shims.lock().push(Shim::new(a));
        b.write_all(b"L hole in the router's order (expected 9, got 12)\n")
            .unwrap();
        assert_eq!(shims.service().1, 0, "the lost shim left the list");
        assert_eq!(
            shims.stale_pids(),
            vec![me],
            "its server is still to be ended"
        );
        let quiet = Shims::default();
        let (a, mut b) = UnixStream::pair().unwrap();
        quiet.lock().push(Shim::new(a));
        b.write_all(b"N no ordered listener\n").unwrap();
        drop(b);
        assert_eq!(quiet.service().1, 0);
        assert!(quiet.stale_pids().is_empty());
        // Not this test process: the shim is not loaded in it.
        assert!(!runs_shim(me));
    }
}
