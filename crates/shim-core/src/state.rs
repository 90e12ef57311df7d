//! The shim's tables (sequenced connections, listeners, epoll interest,
//! connections taken from the kernel and not handed out) and the policy
//! over them: which events the server may see now, losing the order.

use crate::order::{decode, Ev, Key, Kind, Order, Record, RECORD};
use crate::os::{ConnectError, Fd, Os};
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// How long a shim that lost the order withholds sequenced input before
/// it follows the kernel's order: ample for its agent to tell the router
/// and the router to take the replica out (milliseconds), and bounded, so
/// connections left with this replica alone (never taken from a
/// connection's last replica) carry on.
pub const HOLD: Duration = Duration::from_secs(3);

/// A connection taken from the kernel with no accept event is handed out
/// unordered after this long (rather than never).
pub(crate) const STALE: Duration = Duration::from_secs(2);

/// The head of the order is an accept (or a join) whose connection the
/// kernel has not given the shim: after this long it never will (the
/// client reset it before its handshake finished on this replica, or this
/// replica's packets were lost beyond repair: the replica retransmits its
/// SYN-ACK after 1, 3 and 7 s, and the router answers each with an ACK).
/// The server cannot take the input behind it in the others' order: the
/// order is lost, said loudly, rather than the server waiting for ever.
pub const ACCEPT_WAIT: Duration = Duration::from_secs(10);

/// A connection the client reset before this replica's kernel gave it
/// stands in only this long after the reset came in the order (see
/// [`State::stands_in`]): the router sends the agents its records before it
/// writes the packets they came with, so the order can name a connection,
/// and its reset, before the client's handshake ACK and reset have reached
/// this kernel. Once the reset has, a connection still in SYN-RECEIVED is
/// gone, and one queued is given, reset.
pub const STAND_IN_AFTER: Duration = Duration::from_millis(250);

/// Position queries kept for the next wait at most (the agent asks one at
/// a time; more are dropped, oldest first: it asks again).
const QUERIES_MAX: usize = 1024;

/// Sequenced connections by key and generation.
pub(crate) type ByKey = HashMap<(Key, u64), Fd>;

/// A hasher for maps keyed by the process's own numbers (descriptors, the
/// server's epoll data): a multiply and rotate per word. The shim builds
/// such maps at every wait, where SipHash took most of its time; keys a
/// client chooses (its address and port) stay in SipHash maps.
#[derive(Default, Clone, Copy)]
pub(crate) struct FdHasher(u64);

impl std::hash::Hasher for FdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_i32(&mut self, x: i32) {
        self.write_u64(u64::from(x.cast_unsigned()));
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

/// What the server registered in one epoll set, both ways: a wait maps
/// the kernel's events (their data) to descriptors, and descriptors back
/// to the data the server chose, without a scan of every registration.
#[derive(Debug, Default)]
pub(crate) struct EpollSet {
    /// fd → (events, data).
    pub(crate) of_fd: FdMap<Fd, (u32, u64)>,
    /// data → fd (servers register the fd or a pointer: unique either way).
    pub(crate) fd_of: FdMap<u64, Fd>,
}

impl EpollSet {
    /// `EPOLL_CTL_ADD` or `EPOLL_CTL_MOD` of `fd`.
    pub(crate) fn set(&mut self, fd: Fd, events: u32, data: u64) {
        if let Some((_, old)) = self.of_fd.insert(fd, (events, data)) {
            if self.fd_of.get(&old) == Some(&fd) {
                self.fd_of.remove(&old);
            }
        }
        self.fd_of.insert(data, fd);
    }

    /// `EPOLL_CTL_DEL` of `fd`, or `fd` closed.
    pub(crate) fn remove(&mut self, fd: Fd) {
        if let Some((_, data)) = self.of_fd.remove(&fd) {
            if self.fd_of.get(&data) == Some(&fd) {
                self.fd_of.remove(&data);
            }
        }
    }

    /// The data the server registered `fd` with, if it asks input of it.
    pub(crate) fn input_data(&self, fd: Fd) -> Option<u64> {
        self.of_fd
            .get(&fd)
            .filter(|(ev, _)| ev & (libc::EPOLLIN as u32) != 0)
            .map(|(_, d)| *d)
    }
}

pub(crate) type FdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FdHasher>>;
pub(crate) type FdSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<FdHasher>>;

pub(crate) struct Conn {
    pub(crate) key: Key,
    /// Its generation: the number of the accept (or join) event that
    /// opened it (a key may name two connections, see [`Order`]).
    pub(crate) gen: u64,
    /// Stream offset the server has read up to (mod 2^32).
    pub(crate) consumed: u32,
    /// The server was told of the client's reset ([`Kind::Reset`]): its
    /// reads fail with `ECONNRESET` from then on.
    pub(crate) reset: bool,
    /// Stream offset (mod 2^32) up to which bytes were seen in the kernel
    /// (`consumed` + its unread count, when last asked): they stay there
    /// until the server reads them, so a chunk that ends before it has
    /// arrived without asking the kernel again (`chunk_arrived`; each
    /// event used to cost several `FIONREAD` calls, a quarter of a
    /// sequenced Redis's time).
    pub(crate) arrived: std::cell::Cell<u32>,
}

impl Conn {
    /// Bytes waiting in the kernel (`FIONREAD`), noted in `arrived`.
    fn unread(&self, os: &dyn Os, fd: Fd) -> u32 {
        let unread = os.unread(fd);
        let upto = self.consumed.wrapping_add(unread);
        if (upto.wrapping_sub(self.arrived.get()) as i32) > 0 {
            self.arrived.set(upto);
        }
        unread
    }

    /// Whether bytes wait in the kernel: known from before (`arrived`
    /// beyond what the server read), or asked.
    fn has_unread(&self, os: &dyn Os, fd: Fd) -> bool {
        (self.arrived.get().wrapping_sub(self.consumed) as i32) > 0 || self.unread(os, fd) > 0
    }
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
pub(crate) struct Reads {
    pub(crate) on: bool,
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
pub(crate) struct State {
    /// Sequencing is on (the agent socket is connected and the order whole).
    pub(crate) on: bool,
    /// The last tick consumed before the input began (it did not move the
    /// clock; the clock starts there when the input begins).
    pub(crate) early_tick: Option<u64>,
    /// Gave up (logged once): plain libc from now on.
    pub(crate) off: bool,
    /// Lost the order while following it: sequenced input is withheld
    /// until then (the agent told the router, which takes this replica
    /// out of the group), and only then follows the kernel's order. Input
    /// taken in another order than the others' while still in the group
    /// could reach a client first.
    pub(crate) hold_until: Option<Instant>,
    pub(crate) path: Option<Vec<u8>>,
    pub(crate) agent: Fd,
    last_try: Option<Instant>,
    rx: Vec<u8>,
    /// Position queries read while the server was not waiting (inside a
    /// read or an accept: it may not have processed what it read yet),
    /// answered from its next wait.
    queries: Vec<u64>,
    pub(crate) order: Order,
    /// Sequenced connections the server holds, by fd.
    pub(crate) conns: FdMap<Fd, Conn>,
    /// `conns` by key and generation, kept with it ([`State::add_conn`],
    /// [`State::remove_conn`]): a wait looks events' connections up here
    /// instead of building the map each time.
    keyed: ByKey,
    /// Connections taken from the kernel's accept queue, not yet handed
    /// out, with when they were taken; oldest first where a key repeats
    /// (a client that reset a connection may reuse its port at once: the
    /// order's accepts of that key come in the same order).
    pub(crate) pending: HashMap<Key, VecDeque<(Fd, Instant)>>,
    /// Loopback connections (the operator's `redis-cli DEBUG DIGEST` on the
    /// host itself) taken from the kernel: (listening fd, fd). They are not
    /// replicated input, so they are handed out at once, unordered.
    pub(crate) local: Vec<(Fd, Fd)>,
    /// Listening sockets: fd → local port.
    pub(crate) listeners: FdMap<Fd, u16>,
    /// epoll registrations, per epoll set.
    pub(crate) epolls: FdMap<Fd, EpollSet>,
    /// Whether the server reads each sequenced connection and listener.
    pub(crate) reads: FdMap<Fd, Reads>,
    /// Chunks the last `epoll_wait` reported, by connection (at most one
    /// each): a read of that connection may return that chunk.
    pub(crate) granted: HashMap<Key, u64>,
    /// Connections the client reset before the kernel here gave them (see
    /// [`State::stands_in`]) that were given to the server as stand-ins:
    /// should the kernel give one after all (reset while queued) and no
    /// later accept event of its key take it, it is closed, not handed out
    /// a second time. A later accept of the key forgets it.
    pub(crate) stood_in: HashSet<Key>,
    /// When the client's last reset of each connection key came in the
    /// order (see [`STAND_IN_AFTER`]).
    reset_at: HashMap<Key, Instant>,
    /// Connections handed out unordered because no accept event came in
    /// 2 s: one whose accept event comes after all was accepted at another
    /// point of the order than on the other replicas (the order is lost).
    pub(crate) unordered: HashSet<Key>,
    /// The agent holds the input (`Record::Hold`): no connection is stale
    /// for want of its accept event.
    pub(crate) held_upstream: bool,
    /// The head of the order (its number) has been an accept or join whose
    /// connection the kernel has not given, since then (see [`ACCEPT_WAIT`]).
    head_wait: Option<(u64, Instant)>,
    /// The head of the order the server reads (its number), since when it
    /// has not been given, and whether that was said (see [`HEAD_SLOW`]).
    head_slow: Option<(u64, Instant, bool)>,
    /// When the last event came from the agent.
    last_event_at: Option<Instant>,
    /// When the shim last looked for bytes no event announces
    /// ([`State::unannounced`]), and what it found: by connection, the
    /// server's offset then, since when, and whether that was said.
    unannounced_at: Option<Instant>,
    unannounced: FdMap<Fd, (u32, Instant, bool)>,
    /// The shim left its agent (the order lost, or nothing to order): no
    /// more clock ticks come. Shared with [`crate::Shim`], whose clock
    /// reads it without this state's lock.
    pub(crate) detached: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The head of the order has not been given to the server for this long:
/// the shim says once what it waits for (the router takes a replica out
/// whose server makes no progress for a few seconds; this line says why).
pub const HEAD_SLOW: Duration = Duration::from_secs(1);

/// Say it once: the shim stops ordering input. Following the order, it
/// tells the agent why (which reports the order lost: the router takes this
/// replica out of the group) and withholds sequenced input for [`HOLD`].
pub(crate) fn give_up(s: &mut State, os: &dyn Os, why: &str) {
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
        s.hold_until = Some(os.now() + HOLD);
    } else {
        eprintln!(
            "ftnet-shim[{}]: {why}; input follows the kernel's order (replicas may diverge)",
            std::process::id()
        );
        s.off = true;
    }
    s.on = false;
    detach(s, os, if ordering { b'L' } else { b'N' }, why);
}

/// Tell the agent why this shim leaves (`L`: it lost the order; `N`: it has
/// nothing to order), one line, then close the socket. Never blocks the
/// server: a full socket loses the line, the close still tells.
fn detach(s: &mut State, os: &dyn Os, code: u8, why: &str) {
    // No more clock ticks come: the server's clock is the kernel's again.
    s.detached.store(true, std::sync::atomic::Ordering::Release);
    if s.agent < 0 {
        return;
    }
    let mut line = vec![code, b' '];
    line.extend(why.bytes().filter(|b| *b != b'\n').take(400));
    line.push(b'\n');
    os.send(s.agent, &line);
    os.close(s.agent);
    s.agent = -1;
    s.queries.clear();
}

/// A fork-per-connection server's listeners are not ordered: with none
/// left, the shim has nothing to order and leaves the agent quietly.
pub(crate) fn maybe_nothing_to_order(s: &mut State, os: &dyn Os) {
    if s.listeners.is_empty() && s.on && s.conns.is_empty() {
        s.on = false;
        s.off = true;
        detach(
            s,
            os,
            b'N',
            "no ordered listener (blocking, fork-per-connection server)",
        );
    }
}

impl State {
    pub(crate) fn new(path: Option<Vec<u8>>) -> State {
        State {
            agent: -1,
            path,
            ..State::default()
        }
    }

    /// Sequenced input is withheld (the order was lost, see [`HOLD`]).
    pub(crate) fn held(&mut self, os: &dyn Os) -> bool {
        match self.hold_until {
            Some(t) if os.now() >= t => {
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

    /// Connect to the agent (at most every 100 ms) and read what it sent,
    /// from inside a call that is not a wait (a read, an accept, `listen`):
    /// position queries are kept for the next wait.
    pub(crate) fn pump(&mut self, os: &dyn Os) {
        self.pump_records(os, false);
    }

    /// [`State::pump`] from a wait (`epoll_wait`, `poll`, `select`): the
    /// server has processed everything it read (an event loop handles what
    /// it read before it waits again), so position queries are answered
    /// now — those kept from earlier calls first, then each one read, as it
    /// is read (its `<last>` is the last event before it on the socket).
    pub(crate) fn pump_at_wait(&mut self, os: &dyn Os) {
        self.pump_records(os, true);
    }

    /// Answer a position query on the agent's socket: `P <id> <last>
    /// <queued>`, `<last>` the number of the last event received (`-`:
    /// none yet), `<queued>` how many received events the server has not
    /// consumed (an accept is consumed when the connection is handed out,
    /// a chunk when the server has read up to its end). Connections taken
    /// from the kernel whose accept event has not come are not events, and
    /// loopback ones are not ordered: neither counts. Never blocks: a full
    /// socket loses the line (the agent asks again).
    fn answer(&self, os: &dyn Os, id: u64) {
        if self.agent < 0 {
            return;
        }
        let last = self
            .order
            .last_seq()
            .map_or_else(|| "-".to_string(), |n| n.to_string());
        let line = format!("P {id} {last} {}\n", self.order.len());
        os.send(self.agent, line.as_bytes());
    }

    fn pump_records(&mut self, os: &dyn Os, at_wait: bool) {
        if self.held(os) || self.off {
            return;
        }
        if self.agent < 0 {
            let Some(path) = self.path.clone() else {
                return;
            };
            let now = os.now();
            if self
                .last_try
                .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_millis(100))
            {
                return;
            }
            self.last_try = Some(now);
            match os.connect_agent(&path) {
                Ok(fd) => self.agent = fd,
                Err(ConnectError::Failed) => return,
                Err(ConnectError::PathTooLong) => {
                    give_up(self, os, "FTNET_SHIM_SOCKET path too long");
                    return;
                }
            }
            self.on = true;
            eprintln!(
                "ftnet-shim[{}]: connected to the agent; input follows the router's order",
                std::process::id()
            );
        }
        if at_wait {
            for id in std::mem::take(&mut self.queries) {
                self.answer(os, id);
            }
        }
        // Read everything the agent sent: it buffers what does not fit the
        // socket, and waits for room.
        let mut buf = [0u8; 1024 * RECORD];
        loop {
            let n = match os.read(self.agent, &mut buf) {
                Ok(0) => {
                    give_up(self, os, "lost the agent's socket");
                    return;
                }
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                Err(_) => {
                    give_up(self, os, "lost the agent's socket");
                    return;
                }
            };
            self.rx.extend_from_slice(&buf[..n.min(buf.len())]);
            let whole = self.rx.len() / RECORD * RECORD;
            let rx = std::mem::take(&mut self.rx);
            self.rx = rx[whole..].to_vec();
            for rec in rx[..whole].chunks_exact(RECORD) {
                let mut r = [0u8; RECORD];
                r.copy_from_slice(rec);
                let ev = match decode(&r) {
                    Some(Record::Event(ev)) => ev,
                    // Not an event: no number, never a hole.
                    Some(Record::Query { id }) if at_wait => {
                        self.answer(os, id);
                        continue;
                    }
                    Some(Record::Hold { on }) => {
                        self.held_upstream = on;
                        continue;
                    }

                    Some(Record::Query { id }) => {
                        if self.queries.len() >= QUERIES_MAX {
                            self.queries.remove(0);
                        }
                        self.queries.push(id);
                        continue;
                    }
                    None => {
                        give_up(self, os, "malformed record from the agent");
                        return;
                    }
                };
                // Only this server's services.
                if !self.listeners.values().any(|p| *p == ev.key.vport) {
                    continue;
                }
                if ev.kind.stream_base().is_some() && self.unordered.remove(&ev.key) {
                    give_up(
                        self,
                        os,
                        &format!(
                            "the accept (or join) event of the connection from port {} came after it was handed out unordered",
                            ev.key.cport
                        ),
                    );
                    return;
                }
                self.last_event_at = Some(os.now());
                if matches!(ev.kind, Kind::Reset) {
                    if self.reset_at.len() >= 4096 {
                        let now = os.now();
                        self.reset_at
                            .retain(|_, t| now.saturating_duration_since(*t) < ACCEPT_WAIT);
                    }
                    self.reset_at.insert(ev.key, os.now());
                }
                if let Err(g) = self.order.push(ev) {
                    give_up(
                        self,
                        os,
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
    pub(crate) fn drain_accepts(&mut self, os: &dyn Os) {
        if !self.on {
            return;
        }
        let fds: Vec<Fd> = self.listeners.keys().copied().collect();
        for l in fds {
            if os.is_blocking(l) {
                // See `Shim::accept_plan`: a fork-per-connection server.
                self.listeners.remove(&l);
                self.reads.remove(&l);
                maybe_nothing_to_order(self, os);
                continue;
            }
            // The server's listening socket may be blocking: only accept
            // what is already queued.
            while let Some((fd, peer)) = os.accept_queued(l) {
                match (peer, os.local_addr(fd)) {
                    (Some((client, _)), Some(_)) if client >> 24 == 127 => self.local.push((l, fd)),
                    (Some((client, cport)), Some((_, vport))) => {
                        let key = Key {
                            client,
                            cport,
                            vport,
                        };
                        // (One of a key whose server was given a stand-in
                        // may be a later connection of the key, the
                        // client's port used again, whose accept event
                        // has not come yet: it waits like any other, and
                        // only if no accept event takes it is it dropped
                        // as the stood-in connection's late copy,
                        // `Shim::accept_plan`.)
                        self.pending
                            .entry(key)
                            .or_default()
                            .push_back((fd, os.now()));
                    }
                    // Not IPv4: never handed out.
                    _ => os.close(fd),
                }
            }
        }
    }

    /// Does the server read `fd` (see `Reads`)?
    pub(crate) fn reads(&self, fd: Fd) -> bool {
        self.reads.get(&fd).is_some_and(|r| r.on)
    }

    /// A poll/select call asked for input on the descriptors `asked` says:
    /// that is the server's interest now.
    pub(crate) fn note_poll_set(&mut self, asked: &dyn Fn(Fd) -> bool) {
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
    pub(crate) fn gated(&self, fd: Fd) -> bool {
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
    pub(crate) fn give_input(
        &mut self,
        os: &dyn Os,
        asks: &dyn Fn(Fd) -> bool,
        limit: usize,
    ) -> (Vec<Fd>, Vec<Fd>) {
        let mut unordered: Vec<Fd> = Vec::new();
        let mut ordered: Vec<Fd> = Vec::new();
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
            self.check_head_wait(os);
        }
        if self.on {
            if let Some(k) = self.stale_pending(os, None) {
                unordered.extend(listener_of(self, k.vport));
            } else {
                let batch = self.batch(os);
                if let Some(why) = self.slow_head(os, &batch) {
                    eprintln!("ftnet-shim[{}]: {why}", std::process::id());
                }
                for why in self.unannounced(os) {
                    eprintln!("ftnet-shim[{}]: {why}", std::process::id());
                }
                self.granted.clear();
                for e in batch.iter().take(limit) {
                    let fd = match e.kind {
                        Kind::Accept { .. } | Kind::Join { .. } => listener_of(self, e.key.vport),
                        Kind::Data { .. } | Kind::Reset => self.event_fd(e),
                        // A batch stops before a tick.
                        Kind::Tick { .. } => None,
                    };
                    let Some(fd) = fd.filter(|f| asks(*f)) else {
                        break;
                    };
                    if let Kind::Data { .. } | Kind::Reset = e.kind {
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

    /// Has the chunk of `fd` that ends at `end` arrived in the kernel?
    fn chunk_arrived(&self, os: &dyn Os, fd: Fd, c: &Conn, end: u32) -> bool {
        let want = end.wrapping_sub(c.consumed);
        // A chunk already read up to its end (offsets mod 2^32), or seen
        // in the kernel already.
        if (want as i32) <= 0 || (end.wrapping_sub(c.arrived.get()) as i32) <= 0 {
            return true;
        }
        c.unread(os, fd) >= want || os.peer_closed(fd)
    }

    /// The event the server may see now, if it is there in the kernel too.
    pub(crate) fn exposed(&self, os: &dyn Os) -> Option<Ev> {
        let head = self.head()?;
        let ready = match head.kind {
            Kind::Tick { .. } => true,
            Kind::Reset => self.event_fd(&head).is_some(),
            Kind::Accept { .. } | Kind::Join { .. } => {
                self.pending.contains_key(&head.key) || self.stands_in(os, &head)
            }
            Kind::Data { end } => self
                .event_fd(&head)
                .and_then(|fd| Some((fd, self.conns.get(&fd)?)))
                .is_some_and(|(fd, c)| self.chunk_arrived(os, fd, c, end)),
        };
        ready.then_some(head)
    }

    /// Accept (or join) `e` is of a connection the kernel here has not
    /// given, and the client reset it before sending anything: a replica
    /// still in SYN-RECEIVED when the reset came (its handshake's last ACK
    /// lost, or its accept queue full) dropped it, so the kernel never
    /// will. The server is given a stand-in instead (a TCP socket connected
    /// to nothing, whose reads fail with `ECONNRESET` at the reset event):
    /// it sees what the servers of the replicas that got the connection
    /// see, an accept and then the reset, and the order goes on.
    pub(crate) fn stands_in(&self, os: &dyn Os, e: &Ev) -> bool {
        !self.pending.contains_key(&e.key)
            && self.order.reset_before_input(e)
            && self
                .reset_at
                .get(&e.key)
                .is_some_and(|t| os.now().saturating_duration_since(*t) >= STAND_IN_AFTER)
    }

    /// The earliest event of the order the server reads (arrived or not).
    fn head(&self) -> Option<Ev> {
        self.order.head(|e| match e.kind {
            // The clock is everybody's.
            Kind::Tick { .. } => true,
            Kind::Accept { .. } | Kind::Join { .. } => self
                .listeners
                .iter()
                .any(|(fd, p)| *p == e.key.vport && self.reads(*fd)),
            Kind::Data { .. } | Kind::Reset => self.event_fd(e).is_some_and(|fd| self.reads(fd)),
        })
    }

    /// The sequenced connections the server holds, by key and generation.
    #[cfg(test)]
    pub(crate) fn by_key(&self) -> &ByKey {
        &self.keyed
    }

    /// The server holds a sequenced connection on `fd` from now on (one
    /// the shim did not see closed before is forgotten).
    pub(crate) fn add_conn(&mut self, fd: Fd, c: Conn) {
        let slot = (c.key, c.gen);
        if let Some(old) = self.conns.insert(fd, c) {
            if self.keyed.get(&(old.key, old.gen)) == Some(&fd) {
                self.keyed.remove(&(old.key, old.gen));
            }
        }
        self.keyed.insert(slot, fd);
    }

    /// The server closed `fd`: its sequenced connection, if it was one.
    pub(crate) fn remove_conn(&mut self, fd: Fd) -> Option<Conn> {
        let c = self.conns.remove(&fd)?;
        if self.keyed.get(&(c.key, c.gen)) == Some(&fd) {
            self.keyed.remove(&(c.key, c.gen));
        }
        Some(c)
    }

    /// The connection a chunk event is for.
    fn event_fd(&self, e: &Ev) -> Option<Fd> {
        let gen = self.order.gen_of(e)?;
        self.keyed.get(&(e.key, gen)).copied()
    }

    /// What the head of the order has waited for since [`HEAD_SLOW`] ago,
    /// once per head: its connection not given by the kernel, its chunk not
    /// all arrived, or nothing (the server has not taken it).
    pub(crate) fn slow_head(&mut self, os: &dyn Os, batch: &[Ev]) -> Option<String> {
        // The oldest event not consumed: the head the server reads, or one
        // passed over (its connection not read, or not known).
        let Some(h) = self.order.iter().next().copied() else {
            self.head_slow = None;
            return None;
        };
        let now = os.now();
        let since = match self.head_slow {
            Some((seq, since, _)) if seq == h.seq => since,
            _ => {
                self.head_slow = Some((h.seq, now, false));
                return None;
            }
        };
        if self.head_slow.is_some_and(|(_, _, said)| said)
            || now.saturating_duration_since(since) < HEAD_SLOW
        {
            return None;
        }
        self.head_slow = Some((h.seq, since, true));
        // Only now (once per head): whether the server reads it.
        let read = self.head().is_some_and(|e| e.seq == h.seq);
        let what = match h.kind {
            Kind::Tick { .. } => "a clock tick: the server has not waited since it came".to_string(),
            _ if !read => match self.event_fd(&h) {
                _ if h.kind.stream_base().is_some() => {
                    "passed over: the server does not read its listener".to_string()
                }
                Some(fd) => format!("passed over: the server does not read its connection (fd {fd})"),
                None => "passed over: the server has no connection of its key and generation".to_string(),
            },
            Kind::Accept { .. } | Kind::Join { .. } if !self.pending.contains_key(&h.key) => {
                "its connection has not come from the kernel".to_string()
            }
            Kind::Accept { .. } | Kind::Join { .. } => {
                "its connection came from the kernel; the server has not accepted it".to_string()
            }
            Kind::Data { end } => match self
                .event_fd(&h)
                .and_then(|fd| Some((fd, self.conns.get(&fd)?)))
            {
                Some((fd, c)) => format!(
                    "its chunk ends at {end}, the server read up to {}, {} byte(s) are in the kernel{}{}",
                    c.consumed,
                    os.unread(fd),
                    if os.peer_closed(fd) { ", the client closed" } else { "" },
                    if batch.first().is_some_and(|b| b.seq == h.seq) {
                        "; offered to the server, not read"
                    } else {
                        ""
                    }
                ),
                None => "its connection is not known".to_string(),
            },
            Kind::Reset => "the client's reset: the server has not read it".to_string(),
        };
        Some(format!(
            "input held for {} ms at event {} ({} of {}:{}): {what}; {} event(s) behind it",
            now.saturating_duration_since(since).as_millis(),
            h.seq,
            match h.kind {
                Kind::Accept { .. } => "accept",
                Kind::Join { .. } => "join",
                Kind::Data { .. } => "chunk",
                Kind::Tick { .. } => "tick",
                Kind::Reset => "reset",
            },
            std::net::Ipv4Addr::from(h.key.client),
            h.key.cport,
            self.order.len().saturating_sub(1),
        ))
    }

    /// Bytes that wait in the kernel on a sequenced connection with no event
    /// of the order for them, for [`HEAD_SLOW`] (looked for once per
    /// [`HEAD_SLOW`]: a byte count per connection): said once each. The
    /// server never sees them until their chunk's event comes; its replica
    /// acknowledges them and answers nothing, and is taken out as stalled
    /// after a few seconds. Whether events still come (the order is late
    /// on its way from the router) or not (none was sent for them) says
    /// where they are missing.
    pub(crate) fn unannounced(&mut self, os: &dyn Os) -> Vec<String> {
        let now = os.now();
        if self
            .unannounced_at
            .is_some_and(|t| now.saturating_duration_since(t) < HEAD_SLOW)
        {
            return Vec::new();
        }
        self.unannounced_at = Some(now);
        let announced: HashSet<(Key, u64)> = self
            .order
            .iter()
            .filter_map(|e| Some((e.key, self.order.gen_of(e)?)))
            .collect();
        let mut said = Vec::new();
        let mut seen = FdMap::default();
        for (&fd, c) in &self.conns {
            if announced.contains(&(c.key, c.gen)) {
                continue;
            }
            let unread = os.unread(fd);
            if unread == 0 {
                continue;
            }
            let (since, told) = match self.unannounced.get(&fd) {
                Some(&(at, since, told)) if at == c.consumed => (since, told),
                _ => (now, false),
            };
            let tell = !told && now.saturating_duration_since(since) >= HEAD_SLOW;
            if tell {
                said.push(format!(
                    "{unread} byte(s) of the connection from {}:{} (fd {fd}) have waited in the kernel for {} ms past stream offset {} with no event of the order for them; the last event (number {}) came {}",
                    std::net::Ipv4Addr::from(c.key.client),
                    c.key.cport,
                    now.saturating_duration_since(since).as_millis(),
                    c.consumed,
                    self.order
                        .last_seq()
                        .map_or_else(|| "none".to_string(), |n| n.to_string()),
                    self.last_event_at.map_or_else(
                        || "never".to_string(),
                        |t| format!("{} ms ago", now.saturating_duration_since(t).as_millis())
                    ),
                ));
            }
            seen.insert(fd, (c.consumed, since, told || tell));
        }
        self.unannounced = seen;
        said
    }

    /// Give up the order when its head has been an accept (or join) whose
    /// connection the kernel has not given for [`ACCEPT_WAIT`].
    fn check_head_wait(&mut self, os: &dyn Os) {
        let stuck = self.head().filter(|e| {
            e.kind.stream_base().is_some()
                && !self.pending.contains_key(&e.key)
                && !self.stands_in(os, e)
        });
        let Some(e) = stuck else {
            self.head_wait = None;
            return;
        };
        let now = os.now();
        match self.head_wait {
            Some((seq, since)) if seq == e.seq => {
                if now.saturating_duration_since(since) >= ACCEPT_WAIT {
                    self.head_wait = None;
                    give_up(
                        self,
                        os,
                        &format!(
                            "the connection from {}:{} (event {}, its {}) has not reached this server in {} s: the client reset it before its handshake finished here, or this replica's packets were lost; the input behind it cannot be taken in the others' order",
                            std::net::Ipv4Addr::from(e.key.client),
                            e.key.cport,
                            e.seq,
                            if matches!(e.kind, Kind::Accept { .. }) { "accept" } else { "join" },
                            ACCEPT_WAIT.as_secs()
                        ),
                    );
                }
            }
            _ => self.head_wait = Some((e.seq, now)),
        }
    }

    /// The events the server may see now, in order: from the start of the
    /// order, every eligible event that has arrived, at most one per
    /// connection, stopping at the first eligible event that has not
    /// arrived or whose connection is already in the batch (its chunk must
    /// wait for that connection's earlier one). An accept is exposed alone.
    /// Reported together, they are processed in the same order as one by
    /// one: the server handles the events of one `epoll_wait` in the order
    /// returned, and reads one chunk per reported event.
    pub(crate) fn batch(&self, os: &dyn Os) -> Vec<Ev> {
        let mut out: Vec<Ev> = Vec::new();
        for e in self.order.iter() {
            match e.kind {
                Kind::Accept { .. } | Kind::Join { .. } => {
                    let eligible = self
                        .listeners
                        .iter()
                        .any(|(fd, p)| *p == e.key.vport && self.reads(*fd));
                    if !eligible {
                        continue;
                    }
                    if out.is_empty()
                        && (self.pending.contains_key(&e.key) || self.stands_in(os, e))
                    {
                        out.push(*e);
                    }
                    break;
                }
                // A chunk, or the client's reset (which is always there).
                Kind::Data { .. } | Kind::Reset => {
                    let Some(fd) = self.event_fd(e) else {
                        continue;
                    };
                    if !self.reads(fd) {
                        continue;
                    }
                    if out.iter().any(|x| x.key == e.key) {
                        break;
                    }
                    let Some(c) = self.conns.get(&fd) else { break };
                    if let Kind::Data { end } = e.kind {
                        if !self.chunk_arrived(os, fd, c, end) {
                            break;
                        }
                    }
                    out.push(*e);
                }
                // The server handles what it got before the clock moves.
                Kind::Tick { .. } => break,
            }
        }
        out
    }

    /// The head of what the server reads is an event this wait cannot give
    /// (its descriptor is not among those the call asks input of: a
    /// connection asyncio has accepted but not registered yet, another
    /// epoll set's): the wait cannot move the order on.
    pub(crate) fn head_unasked(&self, asks: &dyn Fn(Fd) -> bool) -> bool {
        let Some(h) = self.head() else {
            return false;
        };
        let fd = match h.kind {
            Kind::Tick { .. } => return false,
            Kind::Accept { .. } | Kind::Join { .. } => self
                .listeners
                .iter()
                .find(|(f, p)| **p == h.key.vport && self.reads(**f))
                .map(|(f, _)| *f),
            Kind::Data { .. } | Kind::Reset => self.event_fd(&h),
        };
        fd.is_some_and(|f| !asks(f))
    }

    /// The clock tick at the head of what the server reads, consumed (the
    /// caller, a wait, moves the server's clock to it): `Some(Some(time))`,
    /// or `Some(None)` for one before the input began (it does not move
    /// the clock: see [`crate::Shim`]'s clock); `None` if the head is no
    /// tick.
    pub(crate) fn take_tick(&mut self) -> Option<Option<u64>> {
        let h = self.head()?;
        let Kind::Tick { at_us } = h.kind else {
            return None;
        };
        let began = self.order.input_began();
        self.order.consumed(h.seq);
        if !began {
            self.early_tick = Some(at_us);
        }
        Some(began.then_some(at_us))
    }

    /// The input begins at the head of the order (an accept, a join or a
    /// chunk, before any was consumed): the last tick before it, which the clock
    /// starts at (`None` if there was none, or the input began already).
    pub(crate) fn input_starts(&mut self) -> Option<u64> {
        if self.order.input_began() {
            return None;
        }
        let h = self.head()?;
        if matches!(h.kind, Kind::Tick { .. }) {
            return None;
        }
        self.early_tick.take()
    }

    /// A connection whose events are all consumed and that the kernel marks
    /// readable with nothing to read: EOF or an error, which the server may
    /// see (when is not part of the order).
    pub(crate) fn at_eof(&self, os: &dyn Os, fd: Fd) -> bool {
        self.conns.get(&fd).is_some_and(|c| {
            // The kernel's count first: a scan of the order for the
            // connection's events is long while a joiner catches up. Bytes
            // seen in the kernel before are there until the server reads
            // them (a reset does not take them away either): no need to
            // ask again (the kernel marks readable every connection with
            // bytes waiting for their turn, at every wait).
            c.reset || (!c.has_unread(os, fd) && !self.order.pending_for(&c.key, c.gen))
        })
    }

    /// A connection taken from the kernel that never got an accept event
    /// (its connection predates the shim, or the router does not sequence
    /// it): handed out unordered after 2 s rather than never.
    pub(crate) fn stale_pending(&self, os: &dyn Os, port: Option<u16>) -> Option<Key> {
        if self.held_upstream {
            return None;
        }
        let now = os.now();
        self.pending
            .iter()
            .find(|(k, q)| {
                port.is_none_or(|p| k.vport == p)
                    && q.front()
                        .is_some_and(|(_, t)| now.saturating_duration_since(*t) > STALE)
                    && !self.order.pending_for_key(k)
            })
            .map(|(k, _)| *k)
    }

    /// Take the oldest connection of `key` taken from the kernel and not
    /// handed out.
    pub(crate) fn take_pending(&mut self, key: &Key) -> Option<Fd> {
        let q = self.pending.get_mut(key)?;
        let fd = q.pop_front().map(|(fd, _)| fd);
        if q.is_empty() {
            self.pending.remove(key);
        }
        fd
    }
}
