//! `libftnet_shim.so`: loaded with `LD_PRELOAD` into a single-threaded,
//! event-driven server (Redis, nginx with one worker, memcached `-t 1`,
//! asyncio servers) by `ftnet run`. It makes every replica see its input
//! in the same order: the order the router's sequencer gave the client
//! segments of all connections of the service (AR-TCP §4.1's sequencer,
//! FT-TCP §5's select/poll replay).
//!
//! The router numbers every *accept* and every *chunk* of new client bytes
//! (the bytes of one client segment as the router saw it) per service and
//! sends the numbers to each replica's agent; the agent passes them to this
//! shim over a Unix socket (`FTNET_SHIM_SOCKET`). The shim then exposes to
//! the server its input **in that order**:
//!
//! - `epoll_wait` reports, in order, the earliest events the server can
//!   take that have arrived in the local kernel — at most one per
//!   connection, stopping before a connection's second chunk or an event
//!   not yet arrived; the listening socket alone when the next event is an
//!   accept;
//! - `read`/`recv`/`readv` return at most the rest of the one chunk that was
//!   reported for that connection (so one read never merges chunks that
//!   other connections' chunks sat between); any other read of a sequenced
//!   connection gets `EAGAIN`. The server must handle the events of one
//!   `epoll_wait` in the order returned (Redis, nginx and libuv/asyncio
//!   loops do);
//! - `accept`/`accept4` hand out connections in the order of their accept
//!   events, whatever order the kernel queued them in;
//! - `poll`/`select` (for loops built on them: asyncio's poll and select
//!   selectors, older servers) report at most **one** ordered event per
//!   call, because such loops handle what one call reported in an order of
//!   their own (array or descriptor order, or from a random start, as
//!   libevent does); a descriptor the server stops asking input of counts
//!   as not read until it asks again.
//!
//! A server that stops reading one connection (flow control: Redis removes
//! a client's read handler while its output buffer is full or it is
//! blocked) does not stall the others: an event is only *eligible* while
//! its connection is registered for input in some epoll set, so the order
//! passes over it and comes back to it when the server registers it again.
//! The server's registrations are a deterministic function of the input it
//! processed, so every replica passes over the same events.
//!
//! No agent socket makes the shim fall through to plain libc behaviour (and
//! say so once on stderr). Losing the order while following it (the agent's
//! socket closed, a hole in the numbering, a malformed record) is told to the
//! agent (`L why`, then the socket is closed), which reports it to the router:
//! the replica leaves the group at once. Meanwhile the shim withholds
//! sequenced input for [`HOLD`], and only then follows the kernel's order
//! (for connections left with this replica alone). It never unwinds across
//! the FFI boundary. Not supported yet: multi-threaded servers, blocking sockets,
//! timers (a server's timers run at different points of the input on
//! different replicas).

// The interposed functions are libc's own, with libc's contracts (see
// their man pages); each forwards to the real one.
#![allow(clippy::missing_safety_doc)]

mod order;

pub use order::{decode, encode, Ev, Key, Kind, Order, RECORD};

use libc::{c_int, c_void, size_t, sockaddr, socklen_t, ssize_t};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- real libc

macro_rules! real {
    ($name:ident, $cname:literal, fn($($arg:ty),*) -> $ret:ty) => {
        fn $name() -> Option<unsafe extern "C" fn($($arg),*) -> $ret> {
            static P: AtomicUsize = AtomicUsize::new(0);
            let mut p = P.load(Ordering::Relaxed);
            if p == 0 {
                // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no
                // other preconditions; it returns the next definition or null.
                p = unsafe { libc::dlsym(libc::RTLD_NEXT, $cname.as_ptr()) } as usize;
                P.store(p, Ordering::Relaxed);
            }
            if p == 0 {
                None
            } else {
                // SAFETY: the symbol is libc's function of this exact signature.
                Some(unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> $ret>(p) })
            }
        }
    };
}

real!(
    real_read,
    c"read",
    fn(c_int, *mut c_void, size_t) -> ssize_t
);
real!(
    real_recv,
    c"recv",
    fn(c_int, *mut c_void, size_t, c_int) -> ssize_t
);
real!(
    real_readv,
    c"readv",
    fn(c_int, *const libc::iovec, c_int) -> ssize_t
);
real!(
    real_accept,
    c"accept",
    fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int
);
real!(
    real_accept4,
    c"accept4",
    fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int
);
real!(real_close, c"close", fn(c_int) -> c_int);
real!(real_listen, c"listen", fn(c_int, c_int) -> c_int);
real!(
    real_epoll_ctl,
    c"epoll_ctl",
    fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int
);
real!(
    real_poll,
    c"poll",
    fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int
);
real!(
    real_select,
    c"select",
    fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int
);
real!(
    real_epoll_wait,
    c"epoll_wait",
    fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int
);

/// poll(2) for the shim's own use: this library exports `poll`, so a plain
/// call would come back to the interposed one.
fn sys_poll(p: &mut [libc::pollfd], timeout: c_int) -> c_int {
    match real_poll() {
        // SAFETY: `p` is a valid, writable array of its length.
        Some(f) => unsafe { f(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout) },
        None => -1,
    }
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

// ---------------------------------------------------------------- state

/// Set in a forked child (Redis' BGSAVE): the child must not touch the
/// parent's order or its lock (another thread may have held it at the fork).
static IN_CHILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn after_fork_in_child() {
    IN_CHILD.store(true, Ordering::Relaxed);
}

fn in_child() -> bool {
    IN_CHILD.load(Ordering::Relaxed)
}

struct Conn {
    key: Key,
    /// Stream offset the server has read up to (mod 2^32).
    consumed: u32,
}

/// Whether the server reads a sequenced connection or a listener: from its
/// accept (or `listen`) until the server takes it out of its interest
/// (`epoll_ctl` DEL, or MOD without `EPOLLIN`; left out of a `poll`/`select`
/// set that held it before), and again once it puts it back. A connection
/// counts as read before the server first registers it: an asyncio-style
/// loop registers a socket a few iterations after accepting it, and polls
/// without waiting in between. Were its events passed over until then, a
/// replica where a later event of another connection had already arrived
/// would take that one first, and one where it had not would not.
#[derive(Debug, Clone, Copy)]
struct Reads {
    on: bool,
    /// It was in a poll/select set: leaving a later set means "not read".
    polled: bool,
}

impl Default for Reads {
    fn default() -> Self {
        Reads {
            on: true,
            polled: false,
        }
    }
}

#[derive(Default)]
struct State {
    /// Sequencing is on (the agent socket is connected and the order whole).
    on: bool,
    /// Gave up (logged once): plain libc from now on.
    off: bool,
    /// Lost the order while following it: sequenced input is withheld
    /// until then (the agent told the router, which takes this replica
    /// out of the group), and only then follows the kernel's order. Input
    /// taken in another order than the others' while still in the group
    /// could reach a client first.
    hold_until: Option<Instant>,
    path: Option<std::ffi::CString>,
    agent: c_int,
    last_try: Option<Instant>,
    rx: Vec<u8>,
    order: Order,
    /// Sequenced connections the server holds, by fd.
    conns: HashMap<c_int, Conn>,
    /// Connections taken from the kernel's accept queue, not yet handed out.
    pending: HashMap<Key, (c_int, Instant)>,
    /// Loopback connections (the operator's `redis-cli DEBUG DIGEST` on the
    /// host itself) taken from the kernel: (listening fd, fd). They are not
    /// replicated input, so they are handed out at once, unordered.
    local: Vec<(c_int, c_int)>,
    /// Listening sockets: fd → local port.
    listeners: HashMap<c_int, u16>,
    /// epoll registrations: (epfd, fd) → (events, data).
    interest: HashMap<(c_int, c_int), (u32, u64)>,
    /// Whether the server reads each sequenced connection and listener.
    reads: HashMap<c_int, Reads>,
    /// Chunks the last `epoll_wait` reported, by connection (at most one
    /// each): a read of that connection may return that chunk.
    granted: HashMap<Key, u64>,
    /// Connections handed out unordered because no accept event came in
    /// 2 s: one whose accept event comes after all was accepted at another
    /// point of the order than on the other replicas (the order is lost).
    unordered: HashSet<Key>,
}

fn state() -> MutexGuard<'static, State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    let m = S.get_or_init(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        let path = std::env::var_os("FTNET_SHIM_SOCKET").and_then(|p| {
            use std::os::unix::ffi::OsStrExt;
            std::ffi::CString::new(p.as_bytes()).ok()
        });
        Mutex::new(State {
            agent: -1,
            path,
            ..State::default()
        })
    });
    // A panic in the shim's logic is caught at the exported function
    // (`guarded`), possibly with this lock held: take it poisoned or not
    // (after a panic the shim only reports and stops ordering).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a shim that lost the order withholds sequenced input before
/// it follows the kernel's order: ample for its agent to tell the router
/// and the router to take the replica out (milliseconds), and bounded, so
/// connections left with this replica alone (never taken from a
/// connection's last replica) carry on.
const HOLD: Duration = Duration::from_secs(3);

/// Say it once: the shim stops ordering input. Following the order, it
/// tells the agent why (which reports the order lost: the router takes this
/// replica out of the group) and withholds sequenced input for [`HOLD`].
fn give_up(s: &mut State, why: &str) {
    if s.off || s.hold_until.is_some() {
        return;
    }
    let ordering = s.on;
    if ordering {
        eprintln!(
            "ftnet-shim[{}]: ORDER LOST: {why}; told the agent (this replica leaves the group); input withheld for {} s, then it follows the kernel's order (replicas may diverge)",
            std::process::id(),
            HOLD.as_secs()
        );
        s.hold_until = Some(Instant::now() + HOLD);
    } else {
        eprintln!(
            "ftnet-shim[{}]: {why}; input follows the kernel's order (replicas may diverge)",
            std::process::id()
        );
        s.off = true;
    }
    s.on = false;
    detach(s, if ordering { b'L' } else { b'N' }, why);
}

/// Tell the agent why this shim leaves (`L`: it lost the order; `N`: it has
/// nothing to order), one line, then close the socket.
fn detach(s: &mut State, code: u8, why: &str) {
    if s.agent < 0 {
        return;
    }
    let mut line = vec![code, b' '];
    line.extend(why.bytes().filter(|b| *b != b'\n').take(400));
    line.push(b'\n');
    // SAFETY: `line` is readable for its length; MSG_DONTWAIT: never block
    // the server (a full socket loses the line, the close still tells).
    unsafe {
        libc::send(
            s.agent,
            line.as_ptr().cast(),
            line.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if let Some(c) = real_close() {
        // SAFETY: our own fd.
        unsafe { c(s.agent) };
    }
    s.agent = -1;
}

/// A fork-per-connection server's listeners are not ordered: with none
/// left, the shim has nothing to order and leaves the agent quietly.
fn maybe_nothing_to_order(s: &mut State) {
    if s.listeners.is_empty() && s.on && s.conns.is_empty() {
        s.on = false;
        s.off = true;
        detach(
            s,
            b'N',
            "no ordered listener (blocking, fork-per-connection server)",
        );
    }
}

/// The size of `T` as a socket address or option length.
fn socklen_of<T>() -> socklen_t {
    socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(socklen_t::MAX)
}

fn sockname(fd: c_int, peer: bool) -> Option<(u32, u16)> {
    // SAFETY: sockaddr_in is plain old data; all zeroes is a valid value.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = socklen_of::<libc::sockaddr_in>();
    let p = (&mut sa as *mut libc::sockaddr_in).cast::<sockaddr>();
    // SAFETY: `sa` is a writable sockaddr_in of `len` bytes for the call.
    let rc = unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    };
    if rc != 0 || i32::from(sa.sin_family) != libc::AF_INET {
        return None;
    }
    Some((u32::from_be(sa.sin_addr.s_addr), u16::from_be(sa.sin_port)))
}

fn unread(fd: c_int) -> u32 {
    let mut n: c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } < 0 {
        return 0;
    }
    n.max(0) as u32
}

/// The peer's FIN is in: every byte of the connection has arrived. (A
/// router that took over cannot tell a replica's acknowledgment of the
/// client's FIN from one of a byte, so its first chunk may end one past
/// the data: such a chunk is complete once the FIN is in.)
fn peer_closed(fd: c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    let n = sys_poll(std::slice::from_mut(&mut p), 0);
    n == 1 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

impl State {
    /// Sequenced input is withheld (the order was lost, see [`HOLD`]).
    fn held(&mut self) -> bool {
        match self.hold_until {
            Some(t) if Instant::now() >= t => {
                self.hold_until = None;
                self.off = true;
                eprintln!(
                    "ftnet-shim[{}]: input now follows the kernel's order",
                    std::process::id()
                );
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Connect to the agent (at most every 100 ms) and read what it sent.
    fn pump(&mut self) {
        if self.held() || self.off {
            return;
        }
        if self.agent < 0 {
            let Some(path) = self.path.clone() else {
                return;
            };
            if self
                .last_try
                .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
            {
                return;
            }
            self.last_try = Some(Instant::now());
            // SAFETY: plain socket(2).
            let fd = unsafe {
                libc::socket(
                    libc::AF_UNIX,
                    libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                )
            };
            if fd < 0 {
                return;
            }
            // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
            let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
            sa.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).unwrap_or_default();
            let bytes = path.as_bytes();
            if bytes.len() >= sa.sun_path.len() {
                give_up(self, "FTNET_SHIM_SOCKET path too long");
                return;
            }
            for (d, s) in sa.sun_path.iter_mut().zip(bytes) {
                *d = *s as libc::c_char;
            }
            let len = socklen_of::<libc::sockaddr_un>();
            // SAFETY: `sa` is a valid sockaddr_un for the call.
            if unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_un).cast(), len) } != 0 {
                if let Some(c) = real_close() {
                    // SAFETY: our own fd.
                    unsafe { c(fd) };
                }
                return;
            }
            self.agent = fd;
            self.on = true;
            eprintln!(
                "ftnet-shim[{}]: connected to the agent; input follows the router's order",
                std::process::id()
            );
        }
        let Some(rd) = real_read() else { return };
        // Read everything the agent sent: it buffers what does not fit the
        // socket, and waits for room.
        let mut buf = [0u8; 1024 * RECORD];
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { rd(self.agent, buf.as_mut_ptr().cast(), buf.len()) };
            if n == 0
                || (n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN))
            {
                give_up(self, "lost the agent's socket");
                return;
            }
            if n < 0 {
                break;
            }
            self.rx.extend_from_slice(&buf[..n as usize]);
            let whole = self.rx.len() / RECORD * RECORD;
            let rx = std::mem::take(&mut self.rx);
            self.rx = rx[whole..].to_vec();
            for rec in rx[..whole].chunks_exact(RECORD) {
                let mut r = [0u8; RECORD];
                r.copy_from_slice(rec);
                let Some(ev) = decode(&r) else {
                    give_up(self, "malformed record from the agent");
                    return;
                };
                // Only this server's services.
                if !self.listeners.values().any(|p| *p == ev.key.vport) {
                    continue;
                }
                if ev.kind == Kind::Accept && self.unordered.remove(&ev.key) {
                    give_up(
                        self,
                        &format!(
                            "the accept event of the connection from port {} came after it was handed out unordered",
                            ev.key.cport
                        ),
                    );
                    return;
                }
                if let Err(g) = self.order.push(ev) {
                    give_up(
                        self,
                        &format!(
                            "hole in the router's order (expected {}, got {})",
                            g.expected, g.got
                        ),
                    );
                    return;
                }
            }
        }
    }

    /// Take every connection the kernel has queued on sequenced listeners.
    fn drain_accepts(&mut self) {
        if !self.on {
            return;
        }
        let Some(acc) = real_accept4() else { return };
        let fds: Vec<c_int> = self.listeners.keys().copied().collect();
        for l in fds {
            if is_blocking(l) {
                // See `accept_common`: a fork-per-connection server.
                self.listeners.remove(&l);
                self.reads.remove(&l);
                maybe_nothing_to_order(self);
                continue;
            }
            loop {
                // The server's listening socket may be blocking: only accept
                // what is already queued.
                let mut p = libc::pollfd {
                    fd: l,
                    events: libc::POLLIN,
                    revents: 0,
                };
                if sys_poll(std::slice::from_mut(&mut p), 0) <= 0 {
                    break;
                }
                // SAFETY: null address pointers are allowed by accept4(2).
                let fd = unsafe {
                    acc(
                        l,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    )
                };
                if fd < 0 {
                    break;
                }
                match (sockname(fd, true), sockname(fd, false)) {
                    (Some((client, _)), Some(_)) if client >> 24 == 127 => self.local.push((l, fd)),
                    (Some((client, cport)), Some((_, vport))) => {
                        self.pending.insert(
                            Key {
                                client,
                                cport,
                                vport,
                            },
                            (fd, Instant::now()),
                        );
                    }
                    _ => {
                        if let Some(c) = real_close() {
                            // SAFETY: our own fd, never handed out.
                            unsafe { c(fd) };
                        }
                    }
                }
            }
        }
    }

    /// Does the server read `fd` (see `Reads`)?
    fn reads(&self, fd: c_int) -> bool {
        self.reads.get(&fd).is_some_and(|r| r.on)
    }

    /// A poll/select call asked for input on the descriptors `asked` says:
    /// that is the server's interest now.
    fn note_poll_set(&mut self, asked: &dyn Fn(c_int) -> bool) {
        for (fd, r) in self.reads.iter_mut() {
            if asked(*fd) {
                *r = Reads {
                    on: true,
                    polled: true,
                };
            } else if r.polled {
                r.on = false;
            }
        }
    }

    /// Does the shim decide `fd`'s input readiness (a sequenced connection
    /// or listener while the order is followed)?
    fn gated(&self, fd: c_int) -> bool {
        (self.on || self.hold_until.is_some())
            && (self.conns.contains_key(&fd) || self.listeners.contains_key(&fd))
    }

    /// Input readiness a wait call reports on top of the kernel's for the
    /// descriptors the shim does not order, given which descriptors this
    /// call asks input of. Returns the listeners with a connection to hand
    /// out unordered (loopback; sequencing off; no accept event after 2 s),
    /// and the ordered events' descriptors in the order the server must
    /// handle them: at most `limit`, each connection's chunk granted to
    /// its next read.
    fn give_input(
        &mut self,
        asks: &dyn Fn(c_int) -> bool,
        limit: usize,
    ) -> (Vec<c_int>, Vec<c_int>) {
        let mut unordered: Vec<c_int> = Vec::new();
        let mut ordered: Vec<c_int> = Vec::new();
        let listener_of = |s: &State, port: u16| {
            s.listeners
                .iter()
                .find(|(_, p)| **p == port)
                .map(|(f, _)| *f)
        };
        if !self.on && self.hold_until.is_none() && !self.pending.is_empty() {
            // Whatever was taken from the kernel must still be announced.
            unordered.extend(self.listeners.keys().copied());
        }
        // Loopback connections wait for nobody.
        unordered.extend(self.local.iter().map(|(l, _)| *l));
        if self.on {
            if let Some(k) = self.stale_pending(None) {
                unordered.extend(listener_of(self, k.vport));
            } else {
                let batch = self.batch();
                self.granted.clear();
                for e in batch.iter().take(limit) {
                    let fd = match e.kind {
                        Kind::Accept => listener_of(self, e.key.vport),
                        Kind::Data { .. } => self.fd_of(&e.key),
                    };
                    let Some(fd) = fd.filter(|f| asks(*f)) else {
                        break;
                    };
                    if let Kind::Data { .. } = e.kind {
                        self.granted.insert(e.key, e.seq);
                    }
                    ordered.push(fd);
                }
            }
        }
        unordered.retain(|f| asks(*f));
        unordered.sort_unstable();
        unordered.dedup();
        (unordered, ordered)
    }

    /// The event the server may see now, if it is there in the kernel too.
    fn exposed(&self) -> Option<Ev> {
        let by_key: HashMap<Key, c_int> = self.conns.iter().map(|(fd, c)| (c.key, *fd)).collect();
        let head = self.order.head(|e| match e.kind {
            Kind::Accept => self
                .listeners
                .iter()
                .any(|(fd, p)| *p == e.key.vport && self.reads(*fd)),
            Kind::Data { .. } => by_key.get(&e.key).is_some_and(|fd| self.reads(*fd)),
        })?;
        let ready = match head.kind {
            Kind::Accept => self.pending.contains_key(&head.key),
            Kind::Data { end } => match by_key
                .get(&head.key)
                .and_then(|fd| Some((*fd, self.conns.get(fd)?)))
            {
                Some((fd, c)) => {
                    let want = end.wrapping_sub(c.consumed);
                    (want as i32) <= 0 || unread(fd) >= want || peer_closed(fd)
                }
                None => false,
            },
        };
        ready.then_some(head)
    }

    /// The events the server may see now, in order: from the start of the
    /// order, every eligible event that has arrived, at most one per
    /// connection, stopping at the first eligible event that has not
    /// arrived or whose connection is already in the batch (its chunk must
    /// wait for that connection's earlier one). An accept is exposed alone.
    /// Reported together, they are processed in the same order as one by
    /// one: the server handles the events of one `epoll_wait` in the order
    /// returned, and reads one chunk per reported event.
    fn batch(&self) -> Vec<Ev> {
        let by_key: HashMap<Key, c_int> = self.conns.iter().map(|(fd, c)| (c.key, *fd)).collect();
        let mut out: Vec<Ev> = Vec::new();
        for e in self.order.iter() {
            match e.kind {
                Kind::Accept => {
                    let eligible = self
                        .listeners
                        .iter()
                        .any(|(fd, p)| *p == e.key.vport && self.reads(*fd));
                    if !eligible {
                        continue;
                    }
                    if out.is_empty() && self.pending.contains_key(&e.key) {
                        out.push(*e);
                    }
                    break;
                }
                Kind::Data { end } => {
                    let Some(&fd) = by_key.get(&e.key) else {
                        continue;
                    };
                    if !self.reads(fd) {
                        continue;
                    }
                    if out.iter().any(|x| x.key == e.key) {
                        break;
                    }
                    let Some(c) = self.conns.get(&fd) else { break };
                    let want = end.wrapping_sub(c.consumed);
                    if (want as i32) > 0 && unread(fd) < want && !peer_closed(fd) {
                        break;
                    }
                    out.push(*e);
                }
            }
        }
        out
    }

    /// A connection whose events are all consumed and that the kernel marks
    /// readable with nothing to read: EOF or an error, which the server may
    /// see (when is not part of the order).
    fn at_eof(&self, fd: c_int) -> bool {
        self.conns
            .get(&fd)
            .is_some_and(|c| !self.order.pending_for(&c.key))
            && unread(fd) == 0
    }

    /// A connection taken from the kernel that never got an accept event
    /// (its connection predates the shim, or the router does not sequence
    /// it): handed out unordered after 2 s rather than never.
    fn stale_pending(&self, port: Option<u16>) -> Option<Key> {
        self.pending
            .iter()
            .find(|(k, (_, t))| {
                port.is_none_or(|p| k.vport == p)
                    && t.elapsed() > Duration::from_secs(2)
                    && !self.order.pending_for(k)
            })
            .map(|(k, _)| *k)
    }

    fn fd_of(&self, key: &Key) -> Option<c_int> {
        self.conns
            .iter()
            .find(|(_, c)| c.key == *key)
            .map(|(fd, _)| *fd)
    }
}

// ---------------------------------------------------------------- interposed calls

/// How many bytes a read of sequenced `fd` may return now: `Some(n)` with
/// `n > 0` for the exposed chunk, `Some(0)` to pass through (EOF), `None`
/// for EAGAIN. Not sequenced: `Some(usize::MAX)`.
fn read_budget(fd: c_int) -> Option<usize> {
    if in_child() {
        return Some(usize::MAX);
    }
    let mut s = state();
    if s.hold_until.is_some() && s.conns.contains_key(&fd) && s.held() {
        return None;
    }
    if !s.on || !s.conns.contains_key(&fd) {
        return Some(usize::MAX);
    }
    s.pump();
    if s.hold_until.is_some() {
        return None;
    }
    if !s.on {
        return Some(usize::MAX);
    }
    let key = s.conns.get(&fd).map(|c| c.key);
    // This connection's next chunk, if it was reported by the last
    // epoll_wait (granted) or is the head of the order now.
    let next = key.and_then(|k| s.order.iter().find(|e| e.key == k).copied());
    if let (
        Some(k),
        Some(Ev {
            seq,
            kind: Kind::Data { end },
            ..
        }),
    ) = (key, next)
    {
        let ok = s.granted.get(&k) == Some(&seq) || s.exposed().is_some_and(|h| h.seq == seq);
        if let Some(c) = s.conns.get(&fd).filter(|_| ok) {
            let left = end.wrapping_sub(c.consumed);
            if (left as i32) > 0 {
                return Some(left as usize);
            }
        }
    }
    if s.at_eof(fd) {
        return Some(0);
    }
    None
}

/// Account `n` bytes read from sequenced `fd`.
fn consumed(fd: c_int, n: ssize_t) {
    if n <= 0 {
        return;
    }
    let mut s = state();
    let Some(c) = s.conns.get_mut(&fd) else {
        return;
    };
    // Offsets in the client's stream are modulo 2^32 (RFC 9293 §3.4).
    #[allow(clippy::cast_possible_truncation)]
    let n32 = n as u32;
    c.consumed = c.consumed.wrapping_add(n32);
    let (key, at) = (c.key, c.consumed);
    // Every chunk of this connection that ends at or before `at` is done.
    while let Some(e) = s.order.head(|e| e.key == key) {
        match e.kind {
            Kind::Data { end } if (end.wrapping_sub(at) as i32) <= 0 => {
                s.order.consumed(e.seq);
                if s.granted.get(&key) == Some(&e.seq) {
                    s.granted.remove(&key);
                }
            }
            _ => break,
        }
    }
}

/// The shim's `read`; the exported one wraps it ([`guarded`]).
unsafe fn read_logic(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    #[cfg(test)]
    tests::maybe_fail();
    // SAFETY: `buf` is writable for `count` bytes (read(2)'s contract, the caller's); every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let Some(rd) = real_read() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    match read_budget(fd) {
        None => {
            set_errno(libc::EAGAIN);
            -1
        }
        Some(usize::MAX) => rd(fd, buf, count),
        Some(b) => {
            // b == 0: at EOF (expected to read 0); any byte that still
            // slipped in is accounted so the offsets stay right.
            let n = rd(fd, buf, if b == 0 { count } else { count.min(b) });
            consumed(fd, n);
            n
        }
    }
    }
}

/// The shim's `recv`; the exported one wraps it ([`guarded`]).
unsafe fn recv_logic(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: `buf` is writable for `len` bytes (recv(2)'s contract, the caller's); every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let Some(rv) = real_recv() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    match read_budget(fd) {
        None => {
            set_errno(libc::EAGAIN);
            -1
        }
        Some(usize::MAX) => rv(fd, buf, len, flags),
        Some(b) => {
            let n = rv(fd, buf, if b == 0 { len } else { len.min(b) }, flags);
            if flags & libc::MSG_PEEK == 0 {
                consumed(fd, n);
            }
            n
        }
    }
    }
}

/// The shim's `readv`; the exported one wraps it ([`guarded`]).
unsafe fn readv_logic(fd: c_int, iov: *const libc::iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: `iov` points to `iovcnt` iovecs of writable buffers (readv(2)'s contract, the caller's); it is read only when not null and `iovcnt` > 0; every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let Some(rv) = real_readv() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    match read_budget(fd) {
        None => {
            set_errno(libc::EAGAIN);
            -1
        }
        Some(usize::MAX) => rv(fd, iov, iovcnt),
        Some(b) => {
            if b == 0 || iov.is_null() || iovcnt <= 0 {
                return rv(fd, iov, iovcnt);
            }
            // Shorten the vector to the budget.
            let src = std::slice::from_raw_parts(iov, iovcnt as usize);
            let mut left = b;
            let mut v = Vec::with_capacity(src.len());
            for x in src {
                if left == 0 {
                    break;
                }
                let l = x.iov_len.min(left);
                v.push(libc::iovec {
                    iov_base: x.iov_base,
                    iov_len: l,
                });
                left -= l;
            }
            let n = rv(fd, v.as_ptr(), c_int::try_from(v.len()).unwrap_or(c_int::MAX));
            consumed(fd, n);
            n
        }
    }
    }
}

unsafe fn accept_common(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
    four: bool,
) -> c_int {
    // SAFETY: `addr`/`len` are null or valid as accept(2) requires (passed on from the caller of accept/accept4); every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let pass = || {
        if four {
            real_accept4().map_or(-1, |f| f(fd, addr, len, flags))
        } else {
            real_accept().map_or(-1, |f| f(fd, addr, len))
        }
    };
    if in_child() {
        return pass();
    }
    // A blocking listening socket belongs to a server that blocks in
    // accept(2) and (like socat, inetd) forks a process per connection:
    // connections do not share a process, so there is no cross-connection
    // order to keep. Such listeners are left alone.
    if is_blocking(fd) {
        let mut s = state();
        s.listeners.remove(&fd);
        s.reads.remove(&fd);
        maybe_nothing_to_order(&mut s);
        drop(s);
        return pass();
    }
    match try_accept(fd, addr, len, flags, &pass) {
        Some(r) => r,
        None => {
            set_errno(libc::EAGAIN);
            -1
        }
    }
    }
}

fn is_blocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no pointer.
    unsafe { libc::fcntl(fd, libc::F_GETFL) & libc::O_NONBLOCK == 0 }
}

/// One attempt: `Some(result)` to return, `None` when no connection's turn has come.
unsafe fn try_accept(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
    pass: &dyn Fn() -> c_int,
) -> Option<c_int> {
    // SAFETY: `addr`/`len` are null or valid as accept(2) requires (passed on from the caller of accept/accept4); every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let mut s = state();
    if !s.listeners.contains_key(&fd) {
        drop(s);
        return Some(pass());
    }
    s.pump();
    s.drain_accepts();
    if let Some(i) = s.local.iter().position(|(l, _)| *l == fd) {
        let (_, cfd) = s.local.remove(i);
        drop(s);
        return Some(finish_accept(cfd, addr, len, flags));
    }
    if s.held() {
        return None;
    }
    if !s.on {
        // Hand out what was already taken from the kernel, then plain accept.
        let Some((&k, _)) = s.pending.iter().next() else {
            drop(s);
            return Some(pass());
        };
        let (cfd, _) = s.pending.remove(&k).unwrap_or((-1, Instant::now()));
        return Some(finish_accept(cfd, addr, len, flags));
    }
    let port = s.listeners.get(&fd).copied().unwrap_or(0);
    // A connection that never got an accept event (the router's sequencer
    // is off for it, or it predates this shim) is handed out after 2 s,
    // unordered, rather than never.
    if let Some(k) = s.stale_pending(Some(port)) {
        let (cfd, _) = s.pending.remove(&k).unwrap_or((-1, Instant::now()));
        eprintln!("ftnet-shim[{}]: connection from port {} has no accept event after 2 s; handed out unordered", std::process::id(), k.cport);
        if s.unordered.len() >= 65536 {
            s.unordered.clear();
        }
        s.unordered.insert(k);
        return Some(finish_accept(cfd, addr, len, flags));
    }
    match s.exposed() {
        Some(Ev {
            seq,
            key,
            kind: Kind::Accept,
        }) if key.vport == port => {
            let (cfd, _) = s.pending.remove(&key)?;
            s.order.consumed(seq);
            s.conns.insert(cfd, Conn { key, consumed: 0 });
            s.reads.insert(cfd, Reads::default());
            drop(s);
            Some(finish_accept(cfd, addr, len, flags))
        }
        _ => None,
    }
    }
}

/// Give the caller `cfd` as accept4 would have: its address and flags.
unsafe fn finish_accept(
    cfd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: `addr`/`len` are null or valid as getpeername(2) requires (passed on from the caller of accept/accept4); `cfd` is a descriptor this process owns; every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    if cfd < 0 {
        set_errno(libc::EAGAIN);
        return -1;
    }
    if !addr.is_null() && !len.is_null() {
        libc::getpeername(cfd, addr, len);
    }
    // We accepted non-blocking and close-on-exec; give the caller what it asked for.
    if flags & libc::SOCK_NONBLOCK == 0 {
        let fl = libc::fcntl(cfd, libc::F_GETFL);
        libc::fcntl(cfd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    if flags & libc::SOCK_CLOEXEC == 0 {
        libc::fcntl(cfd, libc::F_SETFD, 0);
    }
    cfd
    }
}

/// The shim's `accept`; the exported one wraps it ([`guarded`]).
unsafe fn accept_logic(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: `addr`/`len` are null or valid as accept(2) requires (the caller's contract); every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    accept_common(fd, addr, len, 0, false)
    }
}

/// The shim's `accept4`; the exported one wraps it ([`guarded`]).
unsafe fn accept4_logic(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: `addr`/`len` are null or valid as accept4(2) requires (the caller's contract); every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    accept_common(fd, addr, len, flags, true)
    }
}

/// The shim's `listen`; the exported one wraps it ([`guarded`]).
unsafe fn listen_logic(fd: c_int, backlog: c_int) -> c_int {
    // SAFETY: no pointer arguments; libc's listen gets the caller's arguments; every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let Some(l) = real_listen() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    let rc = l(fd, backlog);
    if rc == 0 && !in_child() {
        if let Some((_, port)) = sockname(fd, false) {
            let mut s = state();
            if s.path.is_some() && !s.off {
                s.listeners.insert(fd, port);
                s.reads.insert(fd, Reads::default());
                // Connect to the agent now: a server blocked in accept(2)
                // or select(2) may not call us again before clients come.
                s.pump();
            }
        }
    }
    rc
    }
}

/// The shim's `close`; the exported one wraps it ([`guarded`]).
unsafe fn close_logic(fd: c_int) -> c_int {
    // SAFETY: no pointer arguments; libc's close gets the caller's argument; every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    if !in_child() {
        let mut s = state();
        if let Some(c) = s.conns.remove(&fd) {
            s.order.close(c.key);
        }
        s.listeners.remove(&fd);
        s.reads.remove(&fd);
        s.interest.retain(|(e, f), _| *f != fd && *e != fd);
    }
    real_close().map_or(-1, |c| c(fd))
    }
}

/// The shim's `epoll_ctl`; the exported one wraps it ([`guarded`]).
unsafe fn epoll_ctl_logic(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    // SAFETY: `ev` is null or points to an epoll_event (epoll_ctl(2)'s contract, the caller's); it is read unaligned; every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let Some(ctl) = real_epoll_ctl() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    let rc = ctl(epfd, op, fd, ev);
    if rc == 0 && !in_child() {
        let mut s = state();
        match op {
            libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD if !ev.is_null() => {
                let e = std::ptr::read_unaligned(ev);
                s.interest.insert((epfd, fd), (e.events, e.u64));
                if let Some(r) = s.reads.get_mut(&fd) {
                    r.on = e.events & libc::EPOLLIN as u32 != 0;
                }
            }
            libc::EPOLL_CTL_DEL => {
                s.interest.remove(&(epfd, fd));
                if let Some(r) = s.reads.get_mut(&fd) {
                    r.on = false;
                }
            }
            _ => {}
        }
    }
    rc
    }
}

/// The shim's `epoll_wait`; the exported one wraps it ([`guarded`]).
unsafe fn epoll_wait_logic(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: `events` is writable for `max` events (epoll_wait(2)'s contract, the caller's); at most `max` are written; every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let Some(wait) = real_epoll_wait() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    if in_child() {
        return wait(epfd, events, max, timeout);
    }
    {
        let s = state();
        if s.listeners.is_empty() || s.off || s.path.is_none() || max <= 0 {
            drop(s);
            return wait(epfd, events, max, timeout);
        }
    }
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let mut tmp = vec![libc::epoll_event { events: 0, u64: 0 }; max as usize];
    loop {
        let n = wait(epfd, tmp.as_mut_ptr(), max, 0);
        if n < 0 {
            return n;
        }
        let mut out: Vec<libc::epoll_event> = Vec::with_capacity(max as usize);
        {
            let mut s = state();
            s.pump();
            s.drain_accepts();
            // data → fd for this epoll set (servers register the fd or a pointer; unique either way).
            let fd_of: HashMap<u64, c_int> = s
                .interest
                .iter()
                .filter(|((e, _), _)| *e == epfd)
                .map(|((_, f), (_, d))| (*d, *f))
                .collect();
            for e in &tmp[..n as usize] {
                let (mask, data) = (e.events, e.u64);
                match fd_of.get(&data) {
                    Some(&fd) if s.gated(fd) => {
                        // Input readiness of sequenced sockets is the shim's to give;
                        // keep writability and errors.
                        let mut m = mask & !(libc::EPOLLIN as u32);
                        if mask & libc::EPOLLIN as u32 != 0
                            && s.conns.contains_key(&fd)
                            && s.at_eof(fd)
                        {
                            m |= libc::EPOLLIN as u32;
                        }
                        if m != 0 {
                            out.push(libc::epoll_event {
                                events: m,
                                u64: data,
                            });
                        }
                    }
                    _ => out.push(libc::epoll_event {
                        events: mask,
                        u64: data,
                    }),
                }
            }
            // fd → data of what this epoll set asks input of.
            let input: HashMap<c_int, u64> = s
                .interest
                .iter()
                .filter(|((e, _), (ev, _))| *e == epfd && ev & libc::EPOLLIN as u32 != 0)
                .map(|((_, f), (_, d))| (*f, *d))
                .collect();
            let data_of = |f: c_int| input.get(&f).copied();
            let (unordered, ordered) = s.give_input(&|f| input.contains_key(&f), max as usize);
            for data in unordered.into_iter().filter_map(data_of) {
                if !out.iter().any(|o| o.u64 == data) {
                    out.push(libc::epoll_event {
                        events: libc::EPOLLIN as u32,
                        u64: data,
                    });
                }
            }
            // The ordered events in their order, ahead of everything else.
            for (at, data) in ordered.into_iter().filter_map(data_of).enumerate() {
                match out.iter().position(|o| o.u64 == data) {
                    Some(i) => {
                        let mut o = out.remove(i);
                        o.events |= libc::EPOLLIN as u32;
                        out.insert(at, o);
                    }
                    None => out.insert(
                        at,
                        libc::epoll_event {
                            events: libc::EPOLLIN as u32,
                            u64: data,
                        },
                    ),
                }
            }
            out.truncate(max as usize);
        }
        if !out.is_empty() {
            std::ptr::copy_nonoverlapping(out.as_ptr(), events, out.len());
            return c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return 0;
        }
        // Nothing to give yet. Wait for the order (the agent's socket) or the
        // kernel (the epoll set). When the set is readable only because of
        // sequenced sockets whose turn has not come, only the order can
        // change that: wait on the agent alone, briefly.
        let agent = state().agent;
        let left_ms = deadline.map_or(100, |d| {
            d.saturating_duration_since(Instant::now())
                .as_millis()
                .min(100) as c_int
        });
        wait_for_news(
            agent,
            n > 0,
            &[libc::pollfd {
                fd: epfd,
                events: libc::POLLIN,
                revents: 0,
            }],
            left_ms,
        );
    }
    }
}

/// Nothing to give yet: wait for the order (the agent's socket) or the
/// kernel (`kernel`: what the server waits on). When the kernel already
/// reported something but only for sequenced sockets whose turn has not
/// come (`busy`), only the order can change that: wait on the agent alone,
/// briefly.
fn wait_for_news(agent: c_int, busy: bool, kernel: &[libc::pollfd], left_ms: c_int) {
    let agent_fd = libc::pollfd {
        fd: agent,
        events: libc::POLLIN,
        revents: 0,
    };
    if busy {
        if agent >= 0 {
            sys_poll(&mut [agent_fd], left_ms.min(1));
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    } else {
        // A negative fd is ignored by poll(2).
        let mut p = Vec::with_capacity(kernel.len() + 1);
        p.push(agent_fd);
        p.extend(kernel.iter().map(|k| libc::pollfd { revents: 0, ..*k }));
        sys_poll(&mut p, left_ms);
    }
}

const POLL_INPUT: libc::c_short = libc::POLLIN | libc::POLLRDNORM;

/// Does a wait on these descriptors need the order (it asks input of a
/// sequenced connection or listener)?
fn ordered_wait_applies(asked_input: impl Iterator<Item = c_int>) -> bool {
    if in_child() {
        return false;
    }
    let s = state();
    if s.listeners.is_empty() || s.off || s.path.is_none() {
        return false;
    }
    let mut asked_input = asked_input;
    asked_input.any(|fd| s.conns.contains_key(&fd) || s.listeners.contains_key(&fd))
}

/// `poll(2)` in the router's order, for `poll` and `select` servers. At most
/// one ordered event per call: such loops handle what one call reported in
/// an order of their own (array or descriptor order, or from a random
/// start, as libevent does), so two ordered events in one answer could be
/// handled in another order than the router's.
fn ordered_poll(user: &mut [libc::pollfd], timeout: c_int) -> c_int {
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let mut tmp = user.to_vec();
    loop {
        for (t, u) in tmp.iter_mut().zip(user.iter()) {
            *t = libc::pollfd { revents: 0, ..*u };
        }
        let n = sys_poll(&mut tmp, 0);
        if n < 0 {
            return n;
        }
        let agent;
        {
            let mut s = state();
            s.pump();
            s.drain_accepts();
            let asked: HashSet<c_int> = user
                .iter()
                .filter(|p| p.fd >= 0 && p.events & POLL_INPUT != 0)
                .map(|p| p.fd)
                .collect();
            s.note_poll_set(&|f| asked.contains(&f));
            for t in tmp.iter_mut().filter(|t| t.fd >= 0 && s.gated(t.fd)) {
                // Input readiness of sequenced sockets is the shim's to give.
                let kernel_in = t.revents & POLL_INPUT;
                t.revents &= !POLL_INPUT;
                if kernel_in != 0 && s.conns.contains_key(&t.fd) && s.at_eof(t.fd) {
                    t.revents |= kernel_in;
                }
            }
            let (unordered, ordered) = s.give_input(&|f| asked.contains(&f), 1);
            for fd in unordered.into_iter().chain(ordered) {
                for t in tmp.iter_mut().filter(|t| t.fd == fd) {
                    t.revents |= t.events & POLL_INPUT;
                }
            }
            agent = s.agent;
        }
        let ready = tmp.iter().filter(|t| t.revents != 0).count();
        let expired = deadline.is_some_and(|d| Instant::now() >= d);
        if ready > 0 || expired {
            for (u, t) in user.iter_mut().zip(tmp.iter()) {
                u.revents = t.revents;
            }
            return c_int::try_from(ready).unwrap_or(c_int::MAX);
        }
        let left_ms = deadline.map_or(100, |d| {
            d.saturating_duration_since(Instant::now())
                .as_millis()
                .min(100) as c_int
        });
        wait_for_news(agent, n > 0, user, left_ms);
    }
}

/// The shim's `poll`; the exported one wraps it ([`guarded`]).
unsafe fn poll_logic(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: `fds` points to `nfds` pollfds (poll(2)'s contract, the caller's); it is used only when not null; every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let Some(real) = real_poll() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    if fds.is_null() || nfds == 0 || nfds > 1 << 20 {
        return real(fds, nfds, timeout);
    }
    let user = std::slice::from_raw_parts_mut(fds, usize::try_from(nfds).unwrap_or(0));
    let asked = user
        .iter()
        .filter(|p| p.fd >= 0 && p.events & POLL_INPUT != 0)
        .map(|p| p.fd);
    if !ordered_wait_applies(asked) {
        return real(fds, nfds, timeout);
    }
    ordered_poll(user, timeout)
    }
}

/// `select(2)` as `poll(2)`: readable = `POLLIN`, writable = `POLLOUT`,
/// exceptional = `POLLPRI`; the sets are rewritten with what is ready and
/// `timeout` with the time left, as Linux does.
/// The shim's `select`; the exported one wraps it ([`guarded`]).
unsafe fn select_logic(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: the fd_set pointers are null or valid for `nfds` descriptors and `timeout` is null or valid (select(2)'s contract, the caller's); every libc call below gets pointers into these or
    // into live local buffers of the lengths it is given.
    unsafe {
    let Some(real) = real_select() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    let setsize = c_int::try_from(libc::FD_SETSIZE).unwrap_or(c_int::MAX);
    if !(0..=setsize).contains(&nfds) || rd.is_null() {
        return real(nfds, rd, wr, ex, timeout);
    }
    let isset = |set: *mut libc::fd_set, fd: c_int| !set.is_null() && libc::FD_ISSET(fd, set);
    let asked = (0..nfds).filter(|&fd| isset(rd, fd));
    if !ordered_wait_applies(asked) {
        return real(nfds, rd, wr, ex, timeout);
    }
    let mut pfds: Vec<libc::pollfd> = (0..nfds)
        .filter_map(|fd| {
            let mut events = 0;
            if isset(rd, fd) {
                events |= libc::POLLIN;
            }
            if isset(wr, fd) {
                events |= libc::POLLOUT;
            }
            if isset(ex, fd) {
                events |= libc::POLLPRI;
            }
            (events != 0).then_some(libc::pollfd {
                fd,
                events,
                revents: 0,
            })
        })
        .collect();
    let ms = if timeout.is_null() {
        -1
    } else {
        let t = &*timeout;
        let ms = t.tv_sec.max(0).saturating_mul(1000) + (t.tv_usec.max(0) + 999) / 1000;
        c_int::try_from(ms).unwrap_or(c_int::MAX)
    };
    let t0 = Instant::now();
    let n = ordered_poll(&mut pfds, ms);
    if n < 0 {
        return n;
    }
    if pfds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        set_errno(libc::EBADF);
        return -1;
    }
    for set in [rd, wr, ex] {
        if !set.is_null() {
            libc::FD_ZERO(set);
        }
    }
    let mut count = 0;
    for p in &pfds {
        let r = p.revents;
        let mut mark = |set: *mut libc::fd_set, yes: bool| {
            if yes && !set.is_null() {
                libc::FD_SET(p.fd, set);
                count += 1;
            }
        };
        mark(
            rd,
            p.events & libc::POLLIN != 0 && r & (POLL_INPUT | libc::POLLHUP | libc::POLLERR) != 0,
        );
        mark(
            wr,
            p.events & libc::POLLOUT != 0
                && r & (libc::POLLOUT | libc::POLLWRNORM | libc::POLLERR) != 0,
        );
        mark(ex, p.events & libc::POLLPRI != 0 && r & libc::POLLPRI != 0);
    }
    if !timeout.is_null() {
        let left = Duration::from_millis(ms.max(0) as u64).saturating_sub(t0.elapsed());
        (*timeout).tv_sec = left.as_secs() as libc::time_t;
        (*timeout).tv_usec = left.subsec_micros() as libc::suseconds_t;
    }
    count
    }
}

// ---------------------------------------------------------------- exports
//
// Every function the shim exports is a thin wrapper: it runs the shim's
// logic inside `catch_unwind` and, if that panics (a shim bug), it falls
// through to libc — for this call and every later one. A bug in the shim
// never unwinds into (undefined behaviour) or aborts the server it is
// loaded into. It fails safe, loudly: the panic is printed, the agent is
// told the order is lost (the router takes this replica out of the group),
// and for `HOLD` the server gets no TCP input or connection, so that it
// answers nobody from input outside the group's order before it is out.

static PANICKED: AtomicBool = AtomicBool::new(false);

/// Until when (ms on the shim's monotonic clock) TCP input is withheld
/// after a panic; 0: not at all.
static PANIC_HOLD_UNTIL_MS: AtomicU64 = AtomicU64::new(0);

fn clock_ms() -> u64 {
    static T0: OnceLock<Instant> = OnceLock::new();
    let t0 = *T0.get_or_init(Instant::now);
    u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Run `logic`; on a panic (or once one happened) run `libc` instead.
fn guarded<R>(name: &str, logic: impl FnOnce() -> R, libc: impl FnOnce() -> R) -> R {
    if PANICKED.load(Ordering::Acquire) {
        return libc();
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(logic)) {
        Ok(r) => r,
        Err(_) => {
            after_panic(name);
            libc()
        }
    }
}

/// Once: stop ordering, tell the agent, withhold TCP input for [`HOLD`].
fn after_panic(name: &str) {
    if PANICKED.swap(true, Ordering::AcqRel) {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        let mut s = state();
        if s.on {
            let until = clock_ms().saturating_add(u64::try_from(HOLD.as_millis()).unwrap_or(0));
            PANIC_HOLD_UNTIL_MS.store(until, Ordering::Release);
        }
        give_up(
            &mut s,
            &format!("the shim failed inside {name} (a bug; the panic is printed above)"),
        );
    });
}

/// After a panic, while the hold lasts: is `fd` a TCP socket (whose input
/// or connections the server must not get)?
fn withheld(fd: c_int) -> bool {
    if clock_ms() >= PANIC_HOLD_UNTIL_MS.load(Ordering::Acquire) {
        return false;
    }
    let mut proto: c_int = 0;
    let mut len = socklen_of::<c_int>();
    // SAFETY: `proto` and `len` are live locals of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PROTOCOL,
            (&raw mut proto).cast(),
            &raw mut len,
        )
    };
    rc == 0 && proto == libc::IPPROTO_TCP
}

/// libc's answer, or EAGAIN while TCP input is withheld after a panic.
fn pass_or_hold<R: From<i8>>(fd: c_int, libc: impl FnOnce() -> R) -> R {
    if withheld(fd) {
        set_errno(libc::EAGAIN);
        return R::from(-1);
    }
    libc()
}

fn enosys<R: From<i8>>() -> R {
    set_errno(libc::ENOSYS);
    R::from(-1)
}

/// # Safety
/// read(2)'s contract: `buf` is writable for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    guarded(
        "read",
        // SAFETY: the caller's arguments, under read(2)'s contract.
        || unsafe { read_logic(fd, buf, count) },
        || {
            pass_or_hold(fd, || {
                // SAFETY: as above.
                real_read().map_or_else(enosys, |f| unsafe { f(fd, buf, count) })
            })
        },
    )
}

/// # Safety
/// recv(2)'s contract: `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    guarded(
        "recv",
        // SAFETY: the caller's arguments, under recv(2)'s contract.
        || unsafe { recv_logic(fd, buf, len, flags) },
        || {
            pass_or_hold(fd, || {
                // SAFETY: as above.
                real_recv().map_or_else(enosys, |f| unsafe { f(fd, buf, len, flags) })
            })
        },
    )
}

/// # Safety
/// readv(2)'s contract: `iov` points to `iovcnt` iovecs of writable buffers.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, iovcnt: c_int) -> ssize_t {
    guarded(
        "readv",
        // SAFETY: the caller's arguments, under readv(2)'s contract.
        || unsafe { readv_logic(fd, iov, iovcnt) },
        || {
            pass_or_hold(fd, || {
                // SAFETY: as above.
                real_readv().map_or_else(enosys, |f| unsafe { f(fd, iov, iovcnt) })
            })
        },
    )
}

/// # Safety
/// accept(2)'s contract: `addr` and `len` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    guarded(
        "accept",
        // SAFETY: the caller's arguments, under accept(2)'s contract.
        || unsafe { accept_logic(fd, addr, len) },
        || {
            pass_or_hold(fd, || {
                // SAFETY: as above.
                real_accept().map_or_else(enosys, |f| unsafe { f(fd, addr, len) })
            })
        },
    )
}

/// # Safety
/// accept4(2)'s contract: `addr` and `len` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    guarded(
        "accept4",
        // SAFETY: the caller's arguments, under accept4(2)'s contract.
        || unsafe { accept4_logic(fd, addr, len, flags) },
        || {
            pass_or_hold(fd, || {
                // SAFETY: as above.
                real_accept4().map_or_else(enosys, |f| unsafe { f(fd, addr, len, flags) })
            })
        },
    )
}

/// # Safety
/// listen(2) has no pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    guarded(
        "listen",
        // SAFETY: no pointers.
        || unsafe { listen_logic(fd, backlog) },
        // SAFETY: no pointers.
        || real_listen().map_or_else(enosys, |f| unsafe { f(fd, backlog) }),
    )
}

/// # Safety
/// close(2) has no pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    guarded(
        "close",
        // SAFETY: no pointers.
        || unsafe { close_logic(fd) },
        // SAFETY: no pointers.
        || real_close().map_or_else(enosys, |f| unsafe { f(fd) }),
    )
}

/// # Safety
/// epoll_ctl(2)'s contract: `ev` is null or points to an epoll_event.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    guarded(
        "epoll_ctl",
        // SAFETY: the caller's arguments, under epoll_ctl(2)'s contract.
        || unsafe { epoll_ctl_logic(epfd, op, fd, ev) },
        // SAFETY: as above.
        || real_epoll_ctl().map_or_else(enosys, |f| unsafe { f(epfd, op, fd, ev) }),
    )
}

/// # Safety
/// epoll_wait(2)'s contract: `events` is writable for `max` events.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    guarded(
        "epoll_wait",
        // SAFETY: the caller's arguments, under epoll_wait(2)'s contract.
        || unsafe { epoll_wait_logic(epfd, events, max, timeout) },
        // SAFETY: as above.
        || real_epoll_wait().map_or_else(enosys, |f| unsafe { f(epfd, events, max, timeout) }),
    )
}

/// # Safety
/// poll(2)'s contract: `fds` points to `nfds` pollfds.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    guarded(
        "poll",
        // SAFETY: the caller's arguments, under poll(2)'s contract.
        || unsafe { poll_logic(fds, nfds, timeout) },
        // SAFETY: as above.
        || real_poll().map_or_else(enosys, |f| unsafe { f(fds, nfds, timeout) }),
    )
}

/// # Safety
/// select(2)'s contract: the sets and `timeout` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    guarded(
        "select",
        // SAFETY: the caller's arguments, under select(2)'s contract.
        || unsafe { select_logic(nfds, rd, wr, ex, timeout) },
        // SAFETY: as above.
        || real_select().map_or_else(enosys, |f| unsafe { f(nfds, rd, wr, ex, timeout) }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static FAIL: Cell<bool> = const { Cell::new(false) };
    }

    /// The shim's logic panics on this thread's next call (a stand-in for
    /// any bug in it).
    pub(super) fn maybe_fail() {
        if FAIL.with(|f| f.replace(false)) {
            panic!("shim bug (test)");
        }
    }

    fn pipe_with(bytes: &[u8]) -> [c_int; 2] {
        let mut p = [0; 2];
        // SAFETY: `p` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: `bytes` is readable for its length.
        let n = unsafe { libc::write(p[1], bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(usize::try_from(n).unwrap(), bytes.len());
        p
    }

    /// A panic inside the shim never crosses into the server: the exported
    /// `read` returns what libc's would (without `catch_unwind` the panic
    /// would abort this process: the test harness reports the crash), and
    /// from then on the shim stays out of the way.
    #[test]
    fn a_panic_in_the_shim_falls_through_to_libc() {
        let p = pipe_with(b"hi");
        let mut buf = [0u8; 8];
        FAIL.with(|f| f.set(true));
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { read(p[0], buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(n, 2);
        assert_eq!(&buf[..2], b"hi");
        assert!(PANICKED.load(Ordering::Acquire));
        assert!(!FAIL.with(Cell::get), "the logic ran and panicked");
        // Later calls go straight to libc.
        // SAFETY: as above.
        let n = unsafe { libc::write(p[1], b"yo".as_ptr().cast(), 2) };
        assert_eq!(n, 2);
        FAIL.with(|f| f.set(true));
        // SAFETY: as above.
        let n = unsafe { read(p[0], buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(n, 2);
        assert!(FAIL.with(Cell::get), "the logic no longer runs");
        FAIL.with(|f| f.set(false));
        for fd in p {
            // SAFETY: our descriptors.
            unsafe { libc::close(fd) };
        }
    }

    /// While the hold after a panic lasts, TCP sockets are withheld (the
    /// server must not answer input outside the order before the replica is
    /// out of the group); other descriptors are not.
    #[test]
    fn after_a_panic_tcp_input_is_withheld_for_the_hold() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let p = pipe_with(b"x");
        use std::os::fd::AsRawFd;
        let saved = PANIC_HOLD_UNTIL_MS.load(Ordering::Acquire);
        PANIC_HOLD_UNTIL_MS.store(clock_ms() + 60_000, Ordering::Release);
        assert!(withheld(c.as_raw_fd()));
        assert!(withheld(l.as_raw_fd()));
        assert!(!withheld(p[0]));
        PANIC_HOLD_UNTIL_MS.store(clock_ms().saturating_sub(1), Ordering::Release);
        assert!(!withheld(c.as_raw_fd()), "the hold ends");
        PANIC_HOLD_UNTIL_MS.store(saved, Ordering::Release);
        for fd in p {
            // SAFETY: our descriptors.
            unsafe { libc::close(fd) };
        }
    }
}
