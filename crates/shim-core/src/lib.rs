//! The logic of `libftnet_shim.so` (crates/shim), with no unsafe code and
//! no OS of its own: the shim's state and policy behind the [`Os`] trait,
//! driven by libc in the shim and by a fake in the tests.
//!
//! The shim is loaded with `LD_PRELOAD` into a single-threaded,
//! event-driven server (Redis, nginx with one worker, memcached `-t 1`,
//! asyncio servers) by `ftnet run`. It makes every replica see its input
//! in the same order: the order the router's sequencer gave the client
//! segments of all connections of the service (AR-TCP §4.1's sequencer,
//! FT-TCP §5's select/poll replay).
//!
//! The router numbers every *accept* and every *chunk* of new client bytes
//! (the bytes of one client segment as the router saw it) per service and
//! sends the numbers to each replica's agent; the agent passes them to the
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
//!   events, whatever order the kernel queued them in. An accept names the
//!   client's ISN (where the agent knows it): the same accept said again by
//!   a router that took over is dropped, and a new connection of a key the
//!   server still holds (the client reset the old one and reconnected from
//!   the same port) is taken at its own place, each chunk going to the
//!   latest connection of its key opened before it;
//! - `poll`/`select` (for loops built on them: asyncio's poll and select
//!   selectors, older servers) report at most **one** ordered event per
//!   call, because such loops handle what one call reported in an order of
//!   their own (array or descriptor order, or from a random start, as
//!   libevent does); a descriptor the server stops asking input of counts
//!   as not read until it asks again.
//!
//! Two more records come from the agent. A **join** (kind 3) is the accept
//! of a replica that joins a connection already open on the others: the
//! router made it a fresh connection whose stream starts at the client's
//! stream offset `base`. A shim whose server has that connection drops it,
//! like a repeated accept (its number still counts); any other hands the
//! connection out through `accept` at the join's place in the order, and
//! counts the connection's chunk ends from the client's SYN, as everywhere
//! (what the server has read starts at `base`). A **position query**
//! (kind 4) is not part of the order: no number, never a hole. The shim
//! answers it on the agent's socket with one line, `P <id> <last>
//! <queued>` (the number of the last event received, `-` if none; how
//! many received events the server has not consumed: accepts not handed
//! out, chunks not read to their end), and only from a wait (`epoll_wait`,
//! `poll`, `select`): an event loop has processed what it read before it
//! waits again, so `<queued>` 0 tells the agent that the server has
//! applied every event up to `<last>` (before it checkpoints the server's
//! state). A query read inside a read or an accept is kept for the next
//! wait; a server idle in a wait wakes up for it (the shim waits on the
//! agent's socket too). Chunks of a connection the order never accepted
//! (the shim started after its accept) are dropped: they could never be
//! consumed.
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
//! (for connections left with this replica alone). Not supported yet:
//! multi-threaded servers, blocking sockets.
//!
//! The order also carries the router's **clock ticks** ([`Kind::Tick`]):
//! the server's time ([`Shim::time_us`], for the cdylib's `clock_gettime`,
//! `gettimeofday`, `time`) is the last tick one of its waits reached, and a
//! wait's timeout expires only at a tick, so time and timers fall at the
//! same point of the input on every replica. With the agent's [`Hello`]
//! (the group's seed) the server's random bytes ([`GroupRandom`]) and pid
//! ([`Hello::pid`]) are the same everywhere too.
//!
//! # Panics
//!
//! Each interposed call is one method of [`Shim`] that takes the real call
//! as a closure. The logic runs inside `catch_unwind`; the real call that
//! hands the server its bytes or its connection (`read`, `accept`, ...)
//! runs outside it, at most once: the logic decides (a [`ReadPlan`], an
//! [`AcceptPlan`]), the caller's closure makes the call, and the logic then
//! accounts for what it returned, caught again. A panic (a shim bug) before
//! the call falls through to the real call; a panic after it keeps the
//! call's answer. Either way the shim stays out of the way from then on:
//! the agent is told the order is lost (the router takes this replica out
//! of the group), and TCP input and connections are withheld for [`HOLD`],
//! so that the server answers nobody from input outside the group's order
//! before it is out. A bug never unwinds into the server or aborts it.

#![forbid(unsafe_code)]

mod order;
mod os;
mod state;
#[cfg(test)]
mod tests;

pub use order::{decode, encode, Ev, Key, Kind, Order, Record, RECORD};
pub use os::{ConnectError, Fd, Os};
pub use state::{ACCEPT_WAIT, HEAD_SLOW, HOLD, STAND_IN_AFTER};

use state::{give_up, maybe_nothing_to_order, Conn, Reads, State};

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The clocks whose time comes from the router's ticks (`clock_gettime`'s
/// clock ids; `gettimeofday` and `time` read the real-time clock).
pub fn ticked_clock(id: i32) -> bool {
    matches!(
        id,
        libc::CLOCK_REALTIME
            | libc::CLOCK_REALTIME_COARSE
            | libc::CLOCK_MONOTONIC
            | libc::CLOCK_MONOTONIC_COARSE
            | libc::CLOCK_MONOTONIC_RAW
            | libc::CLOCK_BOOTTIME
            | libc::CLOCK_TAI
    )
}

/// What the agent says of the group's clock and randomness (the hello
/// `ftnet run` passes the server in `FTNET_SHIM_HELLO`, from the agent): the
/// seed of the server's random bytes, whether the order carries clock
/// ticks (then the server's time is theirs), and the time before the first
/// tick (ms since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub seed: [u8; 16],
    pub ticks: bool,
    pub epoch_ms: u64,
}

impl Hello {
    /// The hello from its 48 hex digits (the agent's 24-byte record: seed,
    /// kind 7, flags, 48 bits of ms). Allocates nothing: it is read from
    /// the server's first clock call, which may come from inside malloc.
    pub fn from_hex(hex: &[u8]) -> Option<Hello> {
        if hex.len() != 48 {
            return None;
        }
        let mut b = [0u8; 24];
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            let d = |c: u8| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                b'A'..=b'F' => Some(c - b'A' + 10),
                _ => None,
            };
            b[i] = d(pair[0])? << 4 | d(pair[1])?;
        }
        if b[16] != 7 {
            return None;
        }
        let mut seed = [0u8; 16];
        seed.copy_from_slice(&b[..16]);
        let mut t = [0u8; 8];
        t[..6].copy_from_slice(&b[18..24]);
        Some(Hello {
            seed,
            ticks: b[17] & 1 == 1,
            epoch_ms: u64::from_le_bytes(t),
        })
    }

    /// The pid the server sees: the same on every replica.
    pub fn pid(&self) -> i32 {
        let n = u16::from_le_bytes([self.seed[0], self.seed[1]]);
        1000 + i32::from(n % 30_000)
    }
}

/// The server's random bytes: SHA-256 in counter mode under the group's
/// seed, one stream per process (every replica's server draws the same
/// bytes in the same order).
pub struct GroupRandom {
    counter: u64,
    block: [u8; 32],
    used: usize,
}

impl Default for GroupRandom {
    fn default() -> Self {
        Self::new()
    }
}

impl GroupRandom {
    pub const fn new() -> GroupRandom {
        GroupRandom {
            counter: 0,
            block: [0; 32],
            used: 0,
        }
    }

    /// The stream's next `buf.len()` bytes under `seed`.
    pub fn fill(&mut self, seed: &[u8; 16], buf: &mut [u8]) {
        use sha2::{Digest, Sha256};
        for b in buf.iter_mut() {
            if self.used == 0 || self.used >= self.block.len() {
                let mut h = Sha256::new();
                h.update(b"ftnet random v1");
                h.update(seed);
                h.update(self.counter.to_le_bytes());
                self.block.copy_from_slice(&h.finalize());
                self.counter = self.counter.wrapping_add(1);
                self.used = 0;
            }
            *b = self.block[self.used];
            self.used += 1;
        }
    }
}

/// Input readiness in `poll(2)`'s terms.
pub const POLL_INPUT: i16 = libc::POLLIN | libc::POLLRDNORM;

const EPOLLIN: u32 = libc::EPOLLIN as u32;

/// What a read of the server's (`read`, `recv`, `readv`) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPlan {
    /// Not sequenced (or the order is not followed): the real call as asked.
    Pass,
    /// Not this connection's turn: `EAGAIN`, no call.
    WouldBlock,
    /// Every event of the connection is consumed: the call as asked
    /// (expected to read 0), whatever it returns accounted.
    AtEof,
    /// The reported chunk: at most this many bytes, accounted.
    Chunk(usize),
    /// The client reset the connection at this point of the order (the
    /// event's number; none: told before): `ECONNRESET`, no call.
    Reset(Option<u64>),
}

/// What an `accept`/`accept4` of the server's does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptPlan {
    /// Not an ordered listener: the real call.
    Pass,
    /// No connection's turn: `EAGAIN`, no call.
    WouldBlock,
    /// Hand out this connection, already taken from the kernel
    /// (non-blocking, close-on-exec: the caller sets what it asked for),
    /// with its peer's IPv4 address and port as accept(2) reported them
    /// then (`None`: ask getpeername(2)).
    Give(Fd, Option<(u32, u16)>),
}

/// What the ordered `epoll_wait` answers.
enum Waited {
    /// Not ordered: the real call.
    Pass,
    /// The kernel's error (errno set by it).
    Failed(i32),
    /// These events, in this order.
    Events(Vec<libc::epoll_event>),
}

/// The shim: its state, the OS it runs on, and whether it failed.
pub struct Shim<O: Os> {
    os: O,
    state: Mutex<State>,
    /// The logic panicked once: libc from then on.
    panicked: AtomicBool,
    /// Until when TCP input is withheld after a panic.
    panic_hold: Mutex<Option<Instant>>,
    /// The agent's hello (`None`: the host's time, randomness and pid).
    hello: Option<Hello>,
    /// The server's time (µs since the Unix epoch): the last clock tick a
    /// wait consumed (0: none yet).
    vnow: AtomicU64,
    /// The shim left its agent: no more ticks (`State::detached`).
    detached: std::sync::Arc<AtomicBool>,
    /// The thread whose waits follow the order (its id; 0: none waited
    /// yet). Only it sees the group's clock: the server's other threads
    /// (an allocator's background thread, Redis's bio threads) wait with
    /// absolute deadlines on the kernel's clock, and with the group's time
    /// (behind the kernel's in a joiner catching up, or the hello's epoch)
    /// they found every deadline passed and spun.
    order_thread: AtomicI32,
}

impl<O: Os> Shim<O> {
    /// A shim whose agent listens at `agent_path` (`FTNET_SHIM_SOCKET`);
    /// none: plain libc behaviour. `hello`: what the agent said of the
    /// group's clock (`FTNET_SHIM_HELLO`).
    pub fn new(os: O, agent_path: Option<Vec<u8>>, hello: Option<Hello>) -> Self {
        let state = State::new(agent_path);
        let detached = state.detached.clone();
        Shim {
            os,
            state: Mutex::new(state),
            detached,
            panicked: AtomicBool::new(false),
            panic_hold: Mutex::new(None),
            hello,
            vnow: AtomicU64::new(0),
            order_thread: AtomicI32::new(0),
        }
    }

    /// The calling thread's wait follows the order: it is the thread that
    /// sees the group's clock from now on.
    fn follows_order_here(&self) {
        self.order_thread.store(self.os.thread(), Ordering::Relaxed);
    }

    /// Does the calling thread see the group's clock? The thread whose
    /// waits follow the order, or before any such wait the process's first
    /// thread (where a server reads the clock as it starts: Redis seeds its
    /// generators from it).
    fn clock_thread(&self) -> bool {
        match self.order_thread.load(Ordering::Relaxed) {
            0 => self.os.initial_thread(),
            t => self.os.thread() == t,
        }
    }

    // ------------------------------------------------- time, randomness, pid

    /// The time the server sees (µs since the Unix epoch) on a clock the
    /// router's ticks drive ([`ticked_clock`]); `None`: the kernel's (no
    /// ticks, a forked child, a panic, or the order given up: no more
    /// ticks come). The last tick a wait consumed, or the hello's epoch
    /// before the first.
    pub fn time_us(&self) -> Option<u64> {
        let h = self.hello?;
        // Never this state's lock: the server's other threads (and its
        // allocator, from inside malloc) read the clock too.
        if !h.ticks
            || self.os.in_child()
            || self.panicked()
            || self.detached.load(Ordering::Acquire)
            || !self.clock_thread()
        {
            return None;
        }
        let v = self.vnow.load(Ordering::Acquire);
        Some(if v == 0 {
            h.epoch_ms.saturating_mul(1000)
        } else {
            v
        })
    }

    /// A clock tick consumed by a wait: the server's time moves to it
    /// (never back: a router that took over may run a little behind).
    fn tick_to(&self, at_us: u64) {
        self.vnow.fetch_max(at_us, Ordering::AcqRel);
    }

    /// The time a wait's timeout counts from, when the ticks drive it.
    fn wait_clock(&self) -> Option<u64> {
        let h = self.hello?;
        if !h.ticks || self.detached.load(Ordering::Acquire) {
            return None;
        }
        let v = self.vnow.load(Ordering::Acquire);
        Some(if v == 0 {
            h.epoch_ms.saturating_mul(1000)
        } else {
            v
        })
    }

    /// In the ticks' time (`vdeadline`: a wait with a timeout), a wait that
    /// cannot give the head of the order (not among what it `asks`) ends at
    /// once, as a timeout of 0 would have: the same on every replica,
    /// whether or not the head's bytes have arrived.
    fn stuck(&self, s: &State, vdeadline: Option<u64>, asks: &dyn Fn(Fd) -> bool) -> bool {
        vdeadline.is_some() && !self.detached.load(Ordering::Acquire) && s.head_unasked(asks)
    }

    /// The clock ticks at the head of what the server reads; true when the
    /// wait ends there, with nothing ordered in its answer.
    ///
    /// A wait with a timeout (`vdeadline`, in the ticks' time) consumes one
    /// tick and ends at it, whether its timeout expired or not: what the
    /// server does once per loop turn (Redis's `beforeSleep` with its fast
    /// expiry cycle) then runs right after each tick, the same point of the
    /// input on every replica. Had the wait gone on to give the events
    /// after the tick, that work would run after however many of them had
    /// arrived by then; had it consumed every tick that had arrived, the
    /// server's timers would fire after a number of ticks its own timing
    /// chose. A wait without a timeout lets ticks pass (the server runs
    /// nothing until it returns).
    ///
    /// Until the input begins (the first accept, join or chunk the server
    /// consumes) ticks do not move the clock, which stays at the hello's
    /// time; when the input's first event is at the head, the clock moves
    /// to the last tick before it (and a wait with a timeout ends there,
    /// as at a tick). The replicas' servers start at different times and
    /// see different first ticks: moved by them, each would set its
    /// periodic timers (Redis's cron and slow expiry) to a phase of its
    /// own, and run them at different points of the input for good.
    fn consume_ticks(&self, s: &mut State, vdeadline: Option<u64>) -> bool {
        let timed = vdeadline.is_some();
        while let Some(t) = s.take_tick() {
            if let Some(t) = t {
                self.tick_to(t);
            }
            if timed {
                return true;
            }
        }
        match s.input_starts() {
            Some(t) => {
                self.tick_to(t);
                timed
            }
            None => false,
        }
    }

    pub fn os(&self) -> &O {
        &self.os
    }

    /// The logic panicked (and the shim stays out of the way).
    pub fn panicked(&self) -> bool {
        self.panicked.load(Ordering::Acquire)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic in the logic is caught (`catch`), possibly with this lock
        // held: take it poisoned or not (after a panic the shim only reports
        // and stops ordering).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ------------------------------------------------------------ panics

    /// Run `logic`, unless the shim panicked before; `None` if it did or
    /// does now (reported once, see [`Shim::after_panic`]).
    fn catch<R>(&self, call: &str, logic: impl FnOnce() -> R) -> Option<R> {
        if self.panicked() {
            return None;
        }
        match catch_unwind(AssertUnwindSafe(logic)) {
            Ok(r) => Some(r),
            Err(_) => {
                self.after_panic(call);
                None
            }
        }
    }

    /// Once: stop ordering, tell the agent, withhold TCP input for [`HOLD`].
    fn after_panic(&self, call: &str) {
        if self.panicked.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let mut s = self.state();
            if s.on {
                self.set_panic_hold(Some(self.os.now() + HOLD));
            }
            give_up(
                &mut s,
                &self.os,
                &format!("the shim failed inside {call} (a bug; the panic is printed above)"),
            );
        }));
    }

    /// Withhold TCP input after a panic until `until` (none: not at all).
    pub fn set_panic_hold(&self, until: Option<Instant>) {
        *self.panic_hold.lock().unwrap_or_else(|p| p.into_inner()) = until;
    }

    /// After a panic, while the hold lasts: is `fd` a TCP socket (whose input
    /// or connections the server must not get)?
    pub fn withheld(&self, fd: Fd) -> bool {
        let until = *self.panic_hold.lock().unwrap_or_else(|p| p.into_inner());
        until.is_some_and(|t| self.os.now() < t) && self.os.is_tcp(fd)
    }

    /// The real call's answer, or `EAGAIN` while TCP input is withheld
    /// after a panic.
    fn pass_or_hold<R: From<i8>>(&self, fd: Fd, real: impl FnOnce() -> R) -> R {
        if self.withheld(fd) {
            self.os.set_errno(libc::EAGAIN);
            return R::from(-1);
        }
        real()
    }

    fn would_block<R: From<i8>>(&self) -> R {
        self.os.set_errno(libc::EAGAIN);
        R::from(-1)
    }

    // ------------------------------------------------------------ calls

    /// `read`, `recv` or `readv` (`call`) of `fd`. `real(limit)` is the real
    /// call with at most `limit` bytes (none: as many as the server asked);
    /// it runs at most once, outside the caught logic. `peek`: `MSG_PEEK`,
    /// nothing consumed.
    pub fn read(
        &self,
        call: &str,
        fd: Fd,
        peek: bool,
        real: impl FnOnce(Option<usize>) -> isize,
    ) -> isize {
        let Some(plan) = self.catch(call, || self.read_plan(fd)) else {
            return self.pass_or_hold(fd, || real(None));
        };
        let limit = match plan {
            ReadPlan::Pass => return real(None),
            ReadPlan::WouldBlock => return self.would_block(),
            ReadPlan::Reset(seq) => {
                if let (Some(seq), false) = (seq, peek) {
                    let _ = self.catch(call, || self.reset_told(fd, seq));
                }
                self.os.set_errno(libc::ECONNRESET);
                return -1;
            }
            ReadPlan::AtEof => None,
            ReadPlan::Chunk(b) => Some(b),
        };
        let n = real(limit);
        if !peek {
            // A panic here is reported and libc follows from the next call
            // on; these bytes are the server's already: never read again.
            let _ = self.catch(call, || self.read_done(fd, n));
        }
        n
    }

    /// `accept` or `accept4` (`call`) on `fd`. `real()` is the real call;
    /// `give(cfd)` hands the server `cfd` as the real call would have
    /// (its address, its flags). Each runs at most once, outside the
    /// caught logic.
    pub fn accept(
        &self,
        call: &str,
        fd: Fd,
        real: impl FnOnce() -> i32,
        give: impl FnOnce(Fd, Option<(u32, u16)>) -> i32,
    ) -> i32 {
        match self.catch(call, || self.accept_plan(fd)) {
            None => self.pass_or_hold(fd, real),
            Some(AcceptPlan::Pass) => real(),
            Some(AcceptPlan::WouldBlock) => self.would_block(),
            Some(AcceptPlan::Give(cfd, peer)) => give(cfd, peer),
        }
    }

    /// `listen`: the real call, then a listener to order.
    pub fn listen(&self, fd: Fd, real: impl FnOnce() -> i32) -> i32 {
        let rc = real();
        if rc == 0 {
            let _ = self.catch("listen", || self.listened(fd));
        }
        rc
    }

    /// `close`: forget `fd`, then the real call.
    pub fn close(&self, fd: Fd, real: impl FnOnce() -> i32) -> i32 {
        let _ = self.catch("close", || self.closing(fd));
        real()
    }

    /// `epoll_ctl`: the real call, then the interest it registered (`ev`:
    /// the event the server passed, if any).
    pub fn epoll_ctl(
        &self,
        epfd: Fd,
        op: i32,
        fd: Fd,
        ev: Option<libc::epoll_event>,
        real: impl FnOnce() -> i32,
    ) -> i32 {
        let rc = real();
        if rc == 0 {
            let _ = self.catch("epoll_ctl", || self.epoll_ctl_done(epfd, op, fd, ev));
        }
        rc
    }

    /// `epoll_wait` in the router's order. `deliver(events)` copies the
    /// answer to the server's buffer (at most `max`) and returns its length;
    /// `real()` is the real call as the server made it.
    pub fn epoll_wait(
        &self,
        epfd: Fd,
        max: i32,
        timeout_ms: i32,
        deliver: impl FnOnce(&[libc::epoll_event]) -> i32,
        real: impl FnOnce() -> i32,
    ) -> i32 {
        // The kernel's last answer to the logic's own waits: after a panic
        // it is what the server gets, not a second wait (which would miss
        // what an edge-triggered registration reported in the first).
        let mut seen: Vec<libc::epoll_event> = Vec::new();
        match self.catch("epoll_wait", || {
            self.ordered_epoll_wait(epfd, max, timeout_ms, &mut seen)
        }) {
            None if !seen.is_empty() => deliver(&seen),
            None | Some(Waited::Pass) => real(),
            Some(Waited::Failed(n)) => n,
            Some(Waited::Events(out)) => deliver(&out),
        }
    }

    /// `poll` (or `select`, converted) in the router's order: `Some(n)`
    /// with `fds`' `revents` set, or `None` when the real call answers
    /// (not ordered, or the shim failed). `poll(2)` is level-triggered: a
    /// real call after a panic loses nothing.
    pub fn poll(&self, call: &str, fds: &mut [libc::pollfd], timeout_ms: i32) -> Option<i32> {
        self.catch(call, || {
            let asked = fds
                .iter()
                .filter(|p| p.fd >= 0 && p.events & POLL_INPUT != 0)
                .map(|p| p.fd);
            if !self.ordered_wait_applies(asked) {
                return None;
            }
            self.follows_order_here();
            Some(self.ordered_poll(fds, timeout_ms))
        })
        .flatten()
    }

    // ------------------------------------------------------------ logic

    /// How a read of `fd` may go now.
    pub fn read_plan(&self, fd: Fd) -> ReadPlan {
        let os = &self.os;
        if os.in_child() {
            return ReadPlan::Pass;
        }
        let mut s = self.state();
        if s.hold_until.is_some() && s.conns.contains_key(&fd) && s.held(os) {
            return ReadPlan::WouldBlock;
        }
        if !s.on || !s.conns.contains_key(&fd) {
            return ReadPlan::Pass;
        }
        s.pump(os);
        if s.hold_until.is_some() {
            return ReadPlan::WouldBlock;
        }
        if !s.on {
            return ReadPlan::Pass;
        }
        let key = s.conns.get(&fd).map(|c| (c.key, c.gen));
        // This connection's next chunk, if it was reported by the last
        // epoll_wait (granted) or is the head of the order now.
        let next = key.and_then(|(k, g)| {
            s.order
                .iter()
                .find(|e| e.key == k && s.order.gen_of(e) == Some(g))
                .copied()
        });
        let key = key.map(|(k, _)| k);
        if s.conns.get(&fd).is_some_and(|c| c.reset) {
            return ReadPlan::Reset(None);
        }
        if let (
            Some(k),
            Some(Ev {
                seq,
                kind: Kind::Reset,
                ..
            }),
        ) = (key, next)
        {
            if s.granted.get(&k) == Some(&seq) || s.exposed(os).is_some_and(|h| h.seq == seq) {
                return ReadPlan::Reset(Some(seq));
            }
        }
        if let (
            Some(k),
            Some(Ev {
                seq,
                kind: Kind::Data { end },
                ..
            }),
        ) = (key, next)
        {
            let ok = s.granted.get(&k) == Some(&seq) || s.exposed(os).is_some_and(|h| h.seq == seq);
            if let Some(c) = s.conns.get(&fd).filter(|_| ok) {
                let left = end.wrapping_sub(c.consumed);
                // Bytes left of the chunk (offsets mod 2^32).
                if (left as i32) > 0 {
                    return ReadPlan::Chunk(left as usize);
                }
            }
        }
        if s.at_eof(os, fd) {
            return ReadPlan::AtEof;
        }
        ReadPlan::WouldBlock
    }

    /// Account `n` bytes read from sequenced `fd` (the answer of the real
    /// call a [`ReadPlan::Chunk`] or [`ReadPlan::AtEof`] made).
    pub fn read_done(&self, fd: Fd, n: isize) {
        #[cfg(test)]
        tests::fail_point("read_done");
        if n <= 0 {
            return;
        }
        let mut s = self.state();
        let s = &mut *s;
        let Some(c) = s.conns.get_mut(&fd) else {
            return;
        };
        // Offsets in the client's stream are modulo 2^32 (RFC 9293 §3.4).
        #[allow(clippy::cast_possible_truncation)]
        let n32 = n as u32;
        c.consumed = c.consumed.wrapping_add(n32);
        let (key, gen, at) = (c.key, c.gen, c.consumed);
        // Every chunk of this connection that ends at or before `at` is done.
        while let Some(e) = s
            .order
            .head(|e| e.key == key && s.order.gen_of(e) == Some(gen))
        {
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

    /// The server was told of the client's reset (event `seq`) on `fd`.
    fn reset_told(&self, fd: Fd, seq: u64) {
        let mut s = self.state();
        let s = &mut *s;
        s.order.consumed(seq);
        if let Some(c) = s.conns.get_mut(&fd) {
            c.reset = true;
            if s.granted.get(&c.key) == Some(&seq) {
                s.granted.remove(&c.key);
            }
        }
    }

    /// How an accept on `fd` may go now.
    pub fn accept_plan(&self, fd: Fd) -> AcceptPlan {
        let os = &self.os;
        if os.in_child() {
            return AcceptPlan::Pass;
        }
        // A blocking listening socket belongs to a server that blocks in
        // accept(2) and (like socat, inetd) forks a process per connection:
        // connections do not share a process, so there is no cross-connection
        // order to keep. Such listeners are left alone.
        if os.is_blocking(fd) {
            let mut s = self.state();
            s.listeners.remove(&fd);
            s.reads.remove(&fd);
            maybe_nothing_to_order(&mut s, os);
            return AcceptPlan::Pass;
        }
        let mut s = self.state();
        if !s.listeners.contains_key(&fd) {
            return AcceptPlan::Pass;
        }
        s.pump(os);
        s.drain_accepts(os);
        if let Some(i) = s.local.iter().position(|(l, _)| *l == fd) {
            let (_, cfd) = s.local.remove(i);
            return AcceptPlan::Give(cfd, None);
        }
        if s.held(os) {
            return AcceptPlan::WouldBlock;
        }
        if !s.on {
            // Hand out what was already taken from the kernel, then plain accept.
            let Some(&k) = s.pending.keys().next() else {
                return AcceptPlan::Pass;
            };
            return match s.take_pending(&k) {
                Some(cfd) => AcceptPlan::Give(cfd, Some((k.client, k.cport))),
                None => AcceptPlan::WouldBlock,
            };
        }
        let port = s.listeners.get(&fd).copied().unwrap_or(0);
        // A connection that never got an accept event (the router's sequencer
        // is off for it, or it predates this shim) is handed out after 2 s,
        // unordered, rather than never.
        if let Some(k) = s.stale_pending(os, Some(port)) {
            let Some(cfd) = s.take_pending(&k) else {
                return AcceptPlan::WouldBlock;
            };
            if s.stood_in.contains(&k) && os.peer_closed(cfd) {
                // The kernel gave it after its server was given a stand-in
                // for it (see `State::stands_in`): reset, it is no news.
                s.stood_in.remove(&k);
                os.close(cfd);
                return AcceptPlan::WouldBlock;
            }
            eprintln!("ftnet-shim[{}]: connection from port {} has no accept event after 2 s; handed out unordered", std::process::id(), k.cport);
            if s.unordered.len() >= 65536 {
                s.unordered.clear();
            }
            s.unordered.insert(k);
            return AcceptPlan::Give(cfd, Some((k.client, k.cport)));
        }
        let head = s.exposed(os);
        match head.and_then(|e| Some((e, e.kind.stream_base()?))) {
            Some((e @ Ev { seq, key, .. }, base)) if key.vport == port => {
                let cfd = match s.take_pending(&key) {
                    Some(cfd) => {
                        // This accept's own connection: one of its key
                        // stood in for before is in the past.
                        s.stood_in.remove(&key);
                        cfd
                    }
                    None if s.stands_in(os, &e) => {
                        let Some(cfd) = os.stand_in() else {
                            return AcceptPlan::WouldBlock;
                        };
                        eprintln!(
                            "ftnet-shim[{}]: the connection from {}:{} (event {seq}) was reset by its client before this replica's kernel gave it; the server gets a stand-in that reads as reset, as the others' servers see it",
                            std::process::id(),
                            std::net::Ipv4Addr::from(key.client),
                            key.cport
                        );
                        if s.stood_in.len() >= 65536 {
                            s.stood_in.clear();
                        }
                        s.stood_in.insert(key);
                        cfd
                    }
                    None => return AcceptPlan::WouldBlock,
                };
                s.order.consumed(seq);
                // A joined connection's stream starts at its base: chunk
                // ends are offsets of the client's whole stream.
                s.add_conn(
                    cfd,
                    Conn {
                        key,
                        gen: seq,
                        consumed: base,
                        reset: false,
                        arrived: std::cell::Cell::new(base),
                    },
                );
                s.reads.insert(cfd, Reads::default());
                AcceptPlan::Give(cfd, Some((key.client, key.cport)))
            }
            _ => AcceptPlan::WouldBlock,
        }
    }

    /// `fd` listens: a listener to order, if the shim follows an agent.
    fn listened(&self, fd: Fd) {
        let os = &self.os;
        if os.in_child() {
            return;
        }
        if let Some((_, port)) = os.local_addr(fd) {
            let mut s = self.state();
            if s.path.is_some() && !s.off {
                s.listeners.insert(fd, port);
                s.reads.insert(fd, Reads::default());
                // Connect to the agent now: a server blocked in accept(2)
                // or select(2) may not call us again before clients come.
                s.pump(os);
            }
        }
    }

    /// The server closes `fd`: forget it (and its pending events).
    fn closing(&self, fd: Fd) {
        if self.os.in_child() {
            return;
        }
        let mut s = self.state();
        if let Some(c) = s.remove_conn(fd) {
            s.order.close(c.key, c.gen);
        }
        s.listeners.remove(&fd);
        s.reads.remove(&fd);
        s.epolls.remove(&fd);
        for set in s.epolls.values_mut() {
            set.remove(fd);
        }
    }

    fn epoll_ctl_done(&self, epfd: Fd, op: i32, fd: Fd, ev: Option<libc::epoll_event>) {
        if self.os.in_child() {
            return;
        }
        let mut s = self.state();
        match (op, ev) {
            (libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD, Some(e)) => {
                let (events, data) = (e.events, e.u64);
                s.epolls.entry(epfd).or_default().set(fd, events, data);
                if let Some(r) = s.reads.get_mut(&fd) {
                    r.on = events & EPOLLIN != 0;
                }
            }
            (libc::EPOLL_CTL_DEL, _) => {
                if let Some(set) = s.epolls.get_mut(&epfd) {
                    set.remove(fd);
                }
                if let Some(r) = s.reads.get_mut(&fd) {
                    r.on = false;
                }
            }
            _ => {}
        }
    }

    /// Milliseconds left until `deadline`, at most 100 (none: 100).
    fn left_ms(&self, deadline: Option<Instant>) -> i32 {
        deadline.map_or(100, |d| {
            let left = d.saturating_duration_since(self.os.now()).as_millis();
            i32::try_from(left.min(100)).unwrap_or(100)
        })
    }

    fn deadline(&self, timeout_ms: i32) -> Option<Instant> {
        let ms = u64::try_from(timeout_ms).ok()?;
        Some(self.os.now() + Duration::from_millis(ms))
    }

    /// A wait's deadline: on this host's clock, or (when the router's
    /// ticks drive the server's clock) in the ticks' time, µs.
    /// Both are given: the real one applies once no more ticks can come
    /// (the shim left its agent, see [`Shim::real_deadline`]).
    fn deadlines(&self, timeout_ms: i32) -> (Option<Instant>, Option<u64>) {
        let real = self.deadline(timeout_ms);
        match self.wait_clock() {
            Some(now) => (
                real,
                u64::try_from(timeout_ms)
                    .ok()
                    .map(|ms| now.saturating_add(ms.saturating_mul(1000))),
            ),
            None => (real, None),
        }
    }

    /// The real deadline a wait for news may sleep to (none while ticks
    /// end the wait: they come on the agent's socket, which wakes it).
    fn wait_deadline(&self, deadline: Option<Instant>, vdeadline: Option<u64>) -> Option<Instant> {
        if vdeadline.is_some() && !self.detached.load(Ordering::Acquire) {
            None
        } else {
            deadline
        }
    }

    /// Has a wait's real deadline passed, where it applies: without ticks,
    /// or once they stopped (the shim left its agent mid-wait)?
    fn real_deadline(&self, deadline: Option<Instant>, vdeadline: Option<u64>) -> bool {
        (vdeadline.is_none() || self.detached.load(Ordering::Acquire))
            && deadline.is_some_and(|d| self.os.now() >= d)
    }

    fn ordered_epoll_wait(
        &self,
        epfd: Fd,
        max: i32,
        timeout_ms: i32,
        seen: &mut Vec<libc::epoll_event>,
    ) -> Waited {
        let os = &self.os;
        if os.in_child() {
            return Waited::Pass;
        }
        {
            let s = self.state();
            if s.listeners.is_empty() || s.off || s.path.is_none() || max <= 0 {
                return Waited::Pass;
            }
        }
        let max = usize::try_from(max).unwrap_or(0);
        let (deadline, vdeadline) = self.deadlines(timeout_ms);
        let mut tmp = vec![libc::epoll_event { events: 0, u64: 0 }; max];
        loop {
            let n = os.epoll_wait(epfd, &mut tmp, 0);
            let Ok(got) = usize::try_from(n) else {
                return Waited::Failed(n);
            };
            let got = &tmp[..got.min(max)];
            seen.clear();
            seen.extend_from_slice(got);
            let mut out: Vec<libc::epoll_event> = Vec::with_capacity(max);
            let expired;
            {
                let mut s = self.state();
                s.pump_at_wait(os);
                s.drain_accepts(os);
                // The clock moves at the ticks the server reaches; its
                // timeout expires only at one (the same point of the input
                // on every replica), and then nothing ordered comes with it.
                let ticked = self.consume_ticks(&mut s, vdeadline);
                // This epoll set's registrations, taken out of the state
                // while the wait uses them (it changes none) and put back
                // below.
                let set = s.epolls.remove(&epfd).unwrap_or_default();
                for e in got {
                    let (mask, data) = (e.events, e.u64);
                    match set.fd_of.get(&data) {
                        Some(&fd) if s.gated(fd) => {
                            // Input readiness of sequenced sockets is the shim's to give;
                            // keep writability and errors.
                            let mut m = mask & !EPOLLIN;
                            if mask & EPOLLIN != 0 && s.conns.contains_key(&fd) && s.at_eof(os, fd)
                            {
                                m |= EPOLLIN;
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
                let data_of = |f: Fd| set.input_data(f);
                let asks = |f: Fd| set.input_data(f).is_some();
                if set.of_fd.iter().any(|(f, (ev, _))| {
                    ev & EPOLLIN != 0 && (s.conns.contains_key(f) || s.listeners.contains_key(f))
                }) {
                    self.follows_order_here();
                }
                expired = ticked || self.stuck(&s, vdeadline, &asks);
                let (unordered, ordered) = if expired {
                    (Vec::new(), Vec::new())
                } else {
                    // One ordered event per wait, as `poll` gives: what a
                    // server does once per loop turn (Redis's beforeSleep:
                    // its fast expiry cycle) then runs between the same
                    // events on every replica. A batch of all the events
                    // that have arrived would end where this replica's
                    // timing put it.
                    s.give_input(os, &asks, 1)
                };
                for data in unordered.into_iter().filter_map(data_of) {
                    if !out.iter().any(|o| o.u64 == data) {
                        out.push(libc::epoll_event {
                            events: EPOLLIN,
                            u64: data,
                        });
                    }
                }
                // The ordered events in their order, ahead of everything else.
                for (at, data) in ordered.into_iter().filter_map(data_of).enumerate() {
                    match out.iter().position(|o| o.u64 == data) {
                        Some(i) => {
                            let mut o = out.remove(i);
                            o.events |= EPOLLIN;
                            out.insert(at, o);
                        }
                        None => out.insert(
                            at,
                            libc::epoll_event {
                                events: EPOLLIN,
                                u64: data,
                            },
                        ),
                    }
                }
                out.truncate(max);
                s.epolls.insert(epfd, set);
            }
            // A zero timeout never waits: the server only asked what is
            // there now.
            if !out.is_empty()
                || expired
                || timeout_ms == 0
                || self.real_deadline(deadline, vdeadline)
            {
                return Waited::Events(out);
            }
            // Nothing to give yet. Wait for the order (the agent's socket) or the
            // kernel (the epoll set). When the set is readable only because of
            // sequenced sockets whose turn has not come, only the order can
            // change that: wait on the agent alone, briefly.
            let agent = self.state().agent;
            self.wait_for_news(
                agent,
                n > 0,
                &[libc::pollfd {
                    fd: epfd,
                    events: libc::POLLIN,
                    revents: 0,
                }],
                self.left_ms(self.wait_deadline(deadline, vdeadline)),
            );
        }
    }

    /// Nothing to give yet: wait for the order (the agent's socket) or the
    /// kernel (`kernel`: what the server waits on). When the kernel already
    /// reported something but only for sequenced sockets whose turn has not
    /// come (`busy`), only the order can change that: wait on the agent alone,
    /// briefly.
    fn wait_for_news(&self, agent: Fd, busy: bool, kernel: &[libc::pollfd], left_ms: i32) {
        let agent_fd = libc::pollfd {
            fd: agent,
            events: libc::POLLIN,
            revents: 0,
        };
        if busy {
            if agent >= 0 {
                self.os.poll(&mut [agent_fd], left_ms.min(1));
            } else {
                self.os.sleep(Duration::from_micros(200));
            }
        } else {
            // A negative fd is ignored by poll(2).
            let mut p = Vec::with_capacity(kernel.len() + 1);
            p.push(agent_fd);
            p.extend(kernel.iter().map(|k| libc::pollfd { revents: 0, ..*k }));
            self.os.poll(&mut p, left_ms);
        }
    }

    /// Does a wait on these descriptors need the order (it asks input of a
    /// sequenced connection or listener)?
    fn ordered_wait_applies(&self, mut asked_input: impl Iterator<Item = Fd>) -> bool {
        if self.os.in_child() {
            return false;
        }
        let s = self.state();
        if s.listeners.is_empty() || s.off || s.path.is_none() {
            return false;
        }
        asked_input.any(|fd| s.conns.contains_key(&fd) || s.listeners.contains_key(&fd))
    }

    /// `poll(2)` in the router's order, for `poll` and `select` servers. At most
    /// one ordered event per call: such loops handle what one call reported in
    /// an order of their own (array or descriptor order, or from a random
    /// start, as libevent does), so two ordered events in one answer could be
    /// handled in another order than the router's.
    fn ordered_poll(&self, user: &mut [libc::pollfd], timeout_ms: i32) -> i32 {
        let os = &self.os;
        let (deadline, vdeadline) = self.deadlines(timeout_ms);
        let mut tmp = user.to_vec();
        loop {
            for (t, u) in tmp.iter_mut().zip(user.iter()) {
                *t = libc::pollfd { revents: 0, ..*u };
            }
            let n = os.poll(&mut tmp, 0);
            if n < 0 {
                return n;
            }
            let agent;
            let expired;
            {
                let mut s = self.state();
                s.pump_at_wait(os);
                s.drain_accepts(os);
                let ticked = self.consume_ticks(&mut s, vdeadline);
                let asked: state::FdSet<Fd> = user
                    .iter()
                    .filter(|p| p.fd >= 0 && p.events & POLL_INPUT != 0)
                    .map(|p| p.fd)
                    .collect();
                s.note_poll_set(&|f| asked.contains(&f));
                for t in tmp.iter_mut().filter(|t| t.fd >= 0 && s.gated(t.fd)) {
                    // Input readiness of sequenced sockets is the shim's to give.
                    let kernel_in = t.revents & POLL_INPUT;
                    t.revents &= !POLL_INPUT;
                    if kernel_in != 0 && s.conns.contains_key(&t.fd) && s.at_eof(os, t.fd) {
                        t.revents |= kernel_in;
                    }
                }
                expired = ticked || self.stuck(&s, vdeadline, &|f| asked.contains(&f));
                let (unordered, ordered) = if expired {
                    (Vec::new(), Vec::new())
                } else {
                    s.give_input(os, &|f| asked.contains(&f), 1)
                };
                for fd in unordered.into_iter().chain(ordered) {
                    for t in tmp.iter_mut().filter(|t| t.fd == fd) {
                        t.revents |= t.events & POLL_INPUT;
                    }
                }
                agent = s.agent;
            }
            let ready = tmp.iter().filter(|t| t.revents != 0).count();
            // A zero timeout never waits: the server only asked what is
            // there now.
            let expired = expired || timeout_ms == 0 || self.real_deadline(deadline, vdeadline);
            if ready > 0 || expired {
                for (u, t) in user.iter_mut().zip(tmp.iter()) {
                    u.revents = t.revents;
                }
                return i32::try_from(ready).unwrap_or(i32::MAX);
            }
            self.wait_for_news(
                agent,
                n > 0,
                user,
                self.left_ms(self.wait_deadline(deadline, vdeadline)),
            );
        }
    }
}
