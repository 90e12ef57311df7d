//! A replica leaves and joins again with the group's state (issue 15,
//! `Params::join`): `Router::join_replica` at a random point of the
//! workload, with the simulated agents answering the router's
//! `AgentMsg::Checkpoint`.
//!
//! The plan: the replica leaves (the run's crash, or its server is marked
//! down with `Router::replica_failed` while it keeps running); later one or
//! more attempts bring it back. For all but a `Stale` attempt a **fresh
//! server** takes the replica's place: a new smoltcp host at the same
//! address, listening on the service port (one socket per connection the
//! router may open to it), with none of the old sockets, and an agent that
//! starts afresh. The agents' part:
//!
//! * **State** of the echo server ([`Host::app_state`]): per client port,
//!   every byte the server read of that connection (open or closed; a
//!   connection that brought no input is no state). The simulated servers
//!   read each connection as it arrives, not in the sequencer's order
//!   across connections (no shim), so the state is keyed by connection
//!   rather than one interleaved log. Its **digest** is FNV-1a (64 bit)
//!   over port, length and bytes of each connection in port order.
//! * **Donor** (`checkpoint_taken`): `agent_us.0` after the request, its
//!   server must stand exactly at input event `seq`: every connection's
//!   bytes are the client's up to the last chunk numbered at or before
//!   `seq` (checked, for every serving replica, against the client's
//!   streams and the numbered input). `DonorRefuses`: an error instead.
//! * **Joiner** (`state_restored`), `agent_us.1` later: a fresh server that
//!   took no input loads the donor's state and reports its digest
//!   (`FreshCorrupt`: one byte altered, so the digest differs); a stale
//!   server that already took input is refused, as the real agent does.
//!   A restored connection's bytes are the server's state of it; when the
//!   router's join SYN for that connection is accepted the socket's bytes
//!   continue them ([`crate::host::ServerSock::joined_at`]).
//!
//! The router tries a failed join again by itself (`JoinFailed::
//! retry_in_ms`); the sim's agents answer its retries as the same servers
//! would (a server that restored state in the failed attempt has taken
//! input, and is refused), and the plan ends with the router's last word.
//!
//! Checked, besides every invariant of the run (exact echo at the client,
//! no reset, every live replica's streams — the joiner's restored bytes
//! plus what its socket read must be the client's whole stream —, the
//! order at each agent — a joiner's fresh agent gets every number from
//! its `Join` events on —, FIN agreement with the joiner's leg):
//!
//! * each call's answer: `join_replica` of a serving replica is refused
//!   (`AlreadyMember`), of a down one accepted, and a second call during a
//!   join is refused (`CannotJoin`);
//! * at the checkpoint every serving replica stands exactly at event `seq`
//!   (no input past the pause reached a server);
//! * while the input is paused every segment the client gets (but a SYN or
//!   RST) has a zero window; a healthy replica evicted as `Stalled` while
//!   the router held the client's segment with the bytes it waits for is
//!   the router's fault, not the simulated stack's;
//! * `Joined` only for an attempt whose agents answered the truth, at the
//!   checkpoint's `seq`, with exactly the connections open and not closing
//!   at the checkpoint (their Accept numbered by then, no FIN of the
//!   client's forwarded; the echo servers close only after it): the joiner
//!   got a join SYN for each (from the client's address and port, at the
//!   client's ISN + `base`) and a `Join { base }` input event for each,
//!   `base` = the bytes of the client's stream every server had read; the
//!   joiner's socket of each starts at `base` (its server held the first
//!   `base` bytes restored); no ACK it gets on them is below its ISN + 1;
//!   and when the router added it, every output byte the other replicas
//!   had sent on them had reached the router (the router maps the joiner's
//!   first byte where the output it received ends);
//! * the joiner gets no first SYN, and no segment but a RST, of a
//!   connection it is not part of while it is down or joining; after
//!   `Joined` it gets every new connection; it is never evicted once
//!   admitted (the healthy-eviction check);
//! * a failed attempt fails for the reason its agents' answers call for
//!   (digests differ, the donor's or the joiner's error); with true answers
//!   only because output stirred during the pause or, on a lossy network,
//!   the service did not come to rest in time; after a failure the replica
//!   is down, part of no connection, and its fresh server accepted none.

use crate::host::{App, Host};
use crate::params::{Inject, JoinAttempt, JoinLeave, JoinPlan};
use crate::{host, replica_ip, Middle, Sim, CLIENT_IP};
use ftnet_core::{AgentMsg, Event, InputKind, Instant, MemberState, MembershipError};
use ftnet_wire::{ipv4, tcp};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

const SERVICE: &str = "echo";

/// How long a replica's server takes to restart, µs: longer than any packet
/// is in flight (link delay and reordering, at most 3.5 ms in the seeds).
pub(crate) const RESTART_US: u64 = 5_000;

/// How late the router's announced retry of a failed join may start, µs.
const RETRY_SLACK_US: u64 = 1_000_000;

/// What became of one join attempt (`Report::joins`).
#[derive(Debug, Clone, PartialEq)]
pub struct JoinOutcome {
    pub attempt: JoinAttempt,
    /// The router's own retry of a failed attempt (the agents answer as
    /// before: a server that already took input is refused).
    pub retry: bool,
    /// The agents answered the truth: the join must succeed (but for a
    /// service that does not come to rest in time on a lossy network).
    pub honest: bool,
    /// `Ok(connections joined)`, or the router's reason.
    pub result: Result<usize, String>,
    pub pause_ms: u64,
    /// From the join's start to its end (`Joined::join_ms`; the pause for
    /// a failed one).
    pub join_ms: u64,
    /// Segments with a zero window the client got during the pause.
    pub zero_windows: u64,
}

/// An agent's answer, due at a time.
#[derive(Debug)]
enum Action {
    /// The donor's agent checkpoints its server.
    Checkpoint { join: u64 },
    /// The joiner's agent restores `state` (the donor's) into its server.
    Restore {
        join: u64,
        state: BTreeMap<u16, Vec<u8>>,
    },
}

/// The router's checkpoint request, and what the sim saw then.
#[derive(Debug, Clone)]
struct Checkpoint {
    seq: u64,
    donor: usize,
    /// The connections open and not closing: client port → `base`, the
    /// bytes of the client's stream numbered up to `seq`.
    open: BTreeMap<u16, u32>,
    /// Output a serving replica had sent on an open connection that had
    /// not reached the router when the router added the joiner (its first
    /// join SYN; lost, or in flight): (replica, client port, bytes).
    unseen: Vec<(usize, u16, u32)>,
}

#[derive(Debug)]
struct Attempt {
    kind: JoinAttempt,
    id: u64,
    /// Started by the router itself after a failed attempt
    /// (`Event::JoinFailed::retry_in_ms`), not by the sim.
    retry: bool,
    /// Why the router must refuse it, from what the agents answered: the
    /// digests differ, the donor's error, the joiner's error (`None`: both
    /// answered the truth, or not yet).
    expect: Option<&'static str>,
    checkpoint: Option<Checkpoint>,
    /// Join SYNs the router sent the joiner: client port → sequence number.
    syns: BTreeMap<u16, u32>,
    /// `Join { base }` input events for the joiner: client port → base.
    join_events: BTreeMap<u16, u32>,
    /// Evictions of the joiner announced during the attempt.
    evicted: Vec<String>,
    /// A live join: connections whose first SYN the (held) joiner got
    /// after the input resumed.
    live_new: BTreeSet<u16>,
    zero_windows: u64,
}

impl Attempt {
    /// Join `id` of the `kind` of server planned (`retry`: the router's own).
    fn new(kind: JoinAttempt, id: u64, retry: bool) -> Attempt {
        Attempt {
            kind,
            id,
            retry,
            expect: None,
            checkpoint: None,
            syns: BTreeMap::new(),
            join_events: BTreeMap::new(),
            evicted: Vec::new(),
            live_new: BTreeSet::new(),
            zero_windows: 0,
        }
    }
}

pub(crate) struct JoinSim {
    pub plan: JoinPlan,
    inject: Inject,
    /// No loss, duplication or reordering: a `Fresh` join must succeed.
    perfect: bool,
    /// Per client port: the end of the highest byte (or FIN) the client
    /// sent, and the window scale the router's SYN-ACK announced.
    client_hi: HashMap<u16, u32>,
    client_scale: HashMap<u16, u8>,
    /// When the replica left (the crash, or the mark-down call).
    left_at: Option<u64>,
    /// The router took it out of service (`ReplicaDown`).
    out: bool,
    /// When it did (virtual time of that step).
    out_at: Option<u64>,
    /// The next attempt (index) and when it is due.
    next: usize,
    next_at: Option<u64>,
    /// When the fresh server of the attempt due starts.
    restart_at: Option<u64>,
    cur: Option<Attempt>,
    /// The input is paused (between `JoinStarted` and the join's end, or
    /// its `JoinResumed` when it is live).
    paused: bool,
    /// A live join's input resumed (`JoinResumed`) and it has not ended:
    /// the joiner, held, gets every new connection.
    resumed: bool,
    /// The router announced that it tries the failed join again.
    retry_due: bool,
    /// When it said it would (µs).
    retry_at: u64,
    /// The kind of the last attempt (a retry of the router's has the same
    /// servers).
    last_kind: Option<JoinAttempt>,
    pending: Vec<(u64, Action)>,
    late_ports: VecDeque<u16>,
    pub outcomes: Vec<JoinOutcome>,
    /// Per client port: the client's ISN (from the first SYN the router
    /// forwarded) and whether the replica was admitted by then.
    first_syn: HashMap<u16, (u32, bool)>,
    /// A fresh server took the replica's place (its crash no longer
    /// excuses its evictions; its agent started afresh).
    pub replaced: bool,
    /// Admitted (`Joined`).
    joined: bool,
    /// Admitted: the first input number its fresh agent gets (its `Join`
    /// events come right after the checkpoint's event).
    pub joined_from: Option<u64>,
    /// Connections it joined: client port → base.
    joined_ports: BTreeMap<u16, u32>,
    /// Connections whose first SYN the router forwarded after it was
    /// admitted (it got the SYN).
    after: BTreeSet<u16>,
    /// Client bytes the router forwarded while the input was paused (a
    /// retransmission of bytes already sent passes): (replica, client port,
    /// seq, length).
    passed: Vec<(usize, u16, u32, u32)>,
    /// Per (replica, client port): the end of the highest data of the
    /// replica that reached the router (its sequence space).
    delivered_end: HashMap<(usize, u16), u32>,
    /// Client segments with bytes or a FIN that reached the router while
    /// the input was paused: (client port, seq, length with the FIN, when).
    held: Vec<(u16, u32, u32, u64)>,
    /// Connections whose client FIN the router forwarded to a replica.
    fin_fwd: BTreeSet<u16>,
    /// Joined connections whose socket was checked when accepted.
    verified: BTreeSet<u16>,
    /// When a live attempt last failed (µs): in that step the router may
    /// have resumed and failed it at once, sending the joiner what it
    /// releases (SYNs, segments) and then its RSTs.
    failed_at: Option<u64>,
    /// Connections a failed live attempt had added the joiner to: the
    /// router may still send it a bare segment there (the handshake's ACK
    /// in the step its failure takes it out again).
    unjoined: BTreeSet<u16>,
    /// Per client port, the ISN of the joiner's connection (its SYN-ACK
    /// to a join SYN, as it reached the router).
    joiner_isn: HashMap<u16, u32>,
    finished: bool,
    /// One line per step, for a failure message.
    done: Vec<String>,
}

/// FNV-1a, 64 bit, over each connection's port, length and bytes, in port
/// order: the digest of an echo server's state.
pub(crate) fn digest(state: &BTreeMap<u16, Vec<u8>>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= u64::from(x);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for (p, v) in state {
        eat(&p.to_be_bytes());
        eat(&(v.len() as u64).to_be_bytes());
        eat(v);
    }
    format!("{h:016x}")
}

impl JoinSim {
    /// The client emits `data` (whether or not it gets through).
    pub(crate) fn client_emitted(&mut self, data: &[u8]) {
        let Ok(ip) = ipv4::Packet::new_checked(data) else {
            return;
        };
        let Ok(s) = tcp::Segment::new_checked(ip.payload()) else {
            return;
        };
        let end = s.seq().0.wrapping_add(s.seq_len());
        let e = self.client_hi.entry(s.src_port()).or_insert(end);
        if (end.wrapping_sub(*e) as i32) > 0 {
            *e = end;
        }
    }

    pub fn new(plan: &JoinPlan, inject: Inject, perfect: bool) -> JoinSim {
        JoinSim {
            plan: plan.clone(),
            inject,
            perfect,
            client_hi: HashMap::new(),
            client_scale: HashMap::new(),
            left_at: None,
            out: false,
            out_at: None,
            next: 0,
            next_at: None,
            restart_at: None,
            cur: None,
            paused: false,
            resumed: false,
            retry_due: false,
            retry_at: 0,
            last_kind: None,
            pending: Vec::new(),
            late_ports: VecDeque::new(),
            outcomes: Vec::new(),
            first_syn: HashMap::new(),
            replaced: false,
            joined: false,
            joined_from: None,
            joined_ports: BTreeMap::new(),
            after: BTreeSet::new(),
            joiner_isn: HashMap::new(),
            verified: BTreeSet::new(),
            unjoined: BTreeSet::new(),
            failed_at: None,
            fin_fwd: BTreeSet::new(),
            held: Vec::new(),
            delivered_end: HashMap::new(),
            passed: Vec::new(),
            finished: false,
            done: Vec::new(),
        }
    }

    pub fn set_late_ports(&mut self, ports: Vec<u16>) {
        self.late_ports = ports.into();
    }

    /// Every attempt made and ended.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// When the plan next needs the sim (an attempt, an agent's answer).
    pub fn next_due(&self) -> Option<u64> {
        let a = if self.cur.is_none() {
            self.restart_at.or(self.next_at)
        } else {
            None
        };
        let b = self
            .pending
            .iter()
            .map(|x| x.0)
            .chain(
                (self.retry_due && self.cur.is_none())
                    .then_some(self.retry_at + RETRY_SLACK_US + 1),
            )
            .min();
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The replica's agent started afresh (a fresh server joined): its
    /// numbers need not start at 1.
    pub fn fresh_agent(&self, i: usize) -> bool {
        i == self.plan.replica && self.replaced
    }

    /// Replica `i` must hold the whole stream of the connection from port
    /// `p` (invariant 2): the joiner only where it joined (its restored
    /// bytes and its socket's) or got the first SYN; out of the group, none.
    pub fn must_hold(&self, i: usize, p: u16) -> bool {
        if i != self.plan.replica {
            return true;
        }
        self.joined && (self.joined_ports.contains_key(&p) || self.after.contains(&p))
    }

    /// The replica's crash no longer excuses anything: a fresh server is
    /// there.
    pub fn excused_crash(&self, i: usize) -> bool {
        !(i == self.plan.replica && self.replaced)
    }

    /// A packet of replica `i` reached the router: the joiner's SYN-ACK to
    /// a join SYN gives its ISN.
    pub fn replica_sent(&mut self, i: usize, data: &[u8]) {
        let Ok(ip) = ipv4::Packet::new_checked(data) else {
            return;
        };
        let Ok(s) = tcp::Segment::new_checked(ip.payload()) else {
            return;
        };
        if s.payload_len() > 0 {
            let end = s.seq().0.wrapping_add(ftnet_wire::len32(s.payload_len()));
            let e = self.delivered_end.entry((i, s.dst_port())).or_insert(end);
            if (end.wrapping_sub(*e) as i32) > 0 {
                *e = end;
            }
        }
        if i != self.plan.replica || !self.replaced || self.joined && self.cur.is_none() {
            return;
        }
        let joining = self
            .cur
            .as_ref()
            .and_then(|c| c.checkpoint.as_ref())
            .is_some_and(|cp| cp.open.contains_key(&s.dst_port()));
        if s.syn() && s.flags() & tcp::flags::ACK != 0 && joining {
            self.joiner_isn.insert(s.dst_port(), s.seq().0);
        }
    }

    /// A packet of the client reached the router at `now`: while the
    /// input is paused, the router holds it.
    pub fn client_sent(&mut self, now: u64, data: &[u8]) {
        if !self.paused {
            return;
        }
        let Ok(ip) = ipv4::Packet::new_checked(data) else {
            return;
        };
        let Ok(s) = tcp::Segment::new_checked(ip.payload()) else {
            return;
        };
        let len = ftnet_wire::len32(s.payload_len()) + u32::from(s.fin());
        if len > 0 {
            self.held.push((s.src_port(), s.seq().0, len, now));
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} (left at {:?}, out {}, replaced {}, joined {} {:?}, after {:?})",
            self.done.join("; "),
            self.left_at,
            self.out,
            self.replaced,
            self.joined,
            self.joined_ports,
            self.after
        )
    }

    fn line(&mut self, s: String) {
        self.done.push(s);
    }
}

/// The client port, sequence number, flags and payload length of a TCP
/// segment from the client's address (as the router sends it to a
/// replica).
fn from_client(data: &[u8]) -> Option<(u16, u32, u8, u32)> {
    let ip = ipv4::Packet::new_checked(data).ok()?;
    if ip.protocol() != ipv4::PROTO_TCP || ip.src() != CLIENT_IP {
        return None;
    }
    let s = tcp::Segment::new_checked(ip.payload()).ok()?;
    Some((
        s.src_port(),
        s.seq().0,
        s.flags(),
        ftnet_wire::len32(s.payload_len()),
    ))
}

/// The ACK field of a TCP segment.
fn ack_of(data: &[u8]) -> Option<u32> {
    let ip = ipv4::Packet::new_checked(data).ok()?;
    let s = tcp::Segment::new_checked(ip.payload()).ok()?;
    Some(s.ack().0)
}

impl Sim {
    fn js(&mut self) -> &mut JoinSim {
        self.join.as_mut().expect("a join plan")
    }

    fn router(&mut self) -> Result<&mut ftnet_core::Router, String> {
        match &mut self.middle {
            Middle::Router(r) => Ok(r),
            Middle::Forward => Err("harness: a join plan without the router".into()),
        }
    }

    fn state_of(&self, i: usize) -> Option<(MemberState, usize)> {
        let Middle::Router(r) = &self.middle else {
            return None;
        };
        r.status()
            .services
            .iter()
            .flat_map(|s| s.replicas.iter())
            .find(|x| x.addr == replica_ip(i))
            .map(|x| (x.state, x.connections))
    }

    /// Start the next late connection `after_us` from now.
    fn join_late_conn(&mut self, after_us: Option<u64>, why: &str) {
        let Some(d) = after_us else {
            return;
        };
        let Some(port) = self.js().late_ports.pop_front() else {
            return;
        };
        let at = self.now + d;
        if let host::App::Client { conns, .. } = &mut self.hosts[0].app {
            if let Some(k) = conns.iter_mut().find(|k| k.port == port) {
                k.start_at = Some(at);
            }
        }
        self.log(format!(
            "{:>10} JOIN late connection from port {port} ({why}) starts at {at}",
            self.now
        ));
    }

    /// The plan's next step, if due: the leave, an attempt, an agent's
    /// answer.
    pub(crate) fn maybe_join(&mut self) -> Result<(), String> {
        if self.join.is_none() || self.router_down.is_some() {
            return Ok(());
        }
        let now = self.now;
        let (i, leave, leave_at) = {
            let j = self.js();
            (j.plan.replica, j.plan.leave, j.plan.leave_at)
        };
        if self.js().left_at.is_none() {
            let left = match leave {
                JoinLeave::Crash => self.crashed.is_some_and(|c| c.0 == i),
                JoinLeave::MarkDown => {
                    let (acked, total) = self.acked_total();
                    acked as f64 >= leave_at * total as f64
                }
            };
            if !left {
                return Ok(());
            }
            self.js().left_at = Some(now);
            if leave == JoinLeave::MarkDown {
                self.join_mark_down(i)?;
            }
            let j = self.js();
            j.next_at = Some(now + j.plan.attempts[0].0);
            let d = j.plan.conn_down_us;
            self.join_late_conn(d, "while the replica is out");
        }
        self.join_sockets_check()?;
        let j = self.js();
        if j.retry_due && j.cur.is_none() && now > j.retry_at + RETRY_SLACK_US {
            return Err(format!(
                "join: the router said it would try the failed join of replica{i} again at {} us, and has not by {now} us",
                j.retry_at
            ));
        }
        if self.js().cur.is_none() && !self.js().finished {
            if let Some(at) = self.js().next_at {
                if at <= now {
                    self.join_attempt(i)?;
                }
            }
        }
        loop {
            let now = self.now;
            let due = self
                .js()
                .pending
                .iter()
                .enumerate()
                .filter(|(_, (t, _))| *t <= now)
                .min_by_key(|(k, (t, _))| (*t, *k))
                .map(|(k, _)| k);
            let Some(k) = due else {
                return Ok(());
            };
            let (_, a) = self.js().pending.remove(k);
            self.join_action(a)?;
        }
    }

    /// Each connection the joiner joined, once its server accepted it,
    /// starts where the client's stream stood: its server held the
    /// connection's first `base` bytes (restored), its socket's first byte
    /// is the client's byte at `base`.
    fn join_sockets_check(&mut self) -> Result<(), String> {
        let j = self.js();
        if !j.joined || j.verified.len() == j.joined_ports.len() {
            return Ok(());
        }
        let i = j.plan.replica;
        let ports: Vec<(u16, u32)> = j
            .joined_ports
            .iter()
            .filter(|(p, _)| !j.verified.contains(p))
            .map(|(p, b)| (*p, *b))
            .collect();
        let h = &self.hosts[1 + i];
        let by = h.by_peer();
        let mut ok = Vec::new();
        for (p, base) in ports {
            let Some(k) = by.get(&p) else { continue };
            let base = base as usize;
            if k.joined_at.unwrap_or(0) != base {
                return Err(format!(
                    "join: replica{i} joined the connection from port {p} at client offset {base}, but its server held {:?} bytes of that connection's state when it accepted it: it did not hold the group's state",
                    k.joined_at
                ));
            }
            ok.push(p);
        }
        self.js().verified.extend(ok);
        Ok(())
    }

    /// The replica's server loses the input order (it keeps running); a
    /// join while it still serves is refused first, on some plans.
    fn join_mark_down(&mut self, i: usize) -> Result<(), String> {
        let now = self.now;
        let ip = replica_ip(i);
        if self.js().plan.refused_first
            && self.state_of(i).map(|s| s.0) == Some(MemberState::Serving)
        {
            let got = self.router()?.join_replica(Instant(now), SERVICE, ip);
            let want = MembershipError::AlreadyMember {
                service: SERVICE.into(),
                replica: ip.to_string(),
                state: MemberState::Serving,
            };
            if got != Err(want.clone()) {
                return Err(format!(
                    "join: join_replica of serving replica{i} answered {got:?}, expected {want:?}"
                ));
            }
            self.log(format!(
                "{now:>10} JOIN of serving replica{i} refused: {got:?}"
            ));
            self.drain_middle()?;
        }
        let n = self.router()?.replica_failed(Instant(now), ip);
        self.log(format!(
            "{now:>10} JOIN PLAN: replica{i} marked down (replica_failed: {n} service(s)); its server keeps running"
        ));
        self.js()
            .line(format!("replica{i} marked down at {now} us ({n})"));
        self.drain_middle()
    }

    /// Attempt `next`: the old server stops where a fresh one will take
    /// its place (a restart takes [`RESTART_US`], longer than any packet
    /// to it is in flight, so that the fresh server gets none meant for
    /// the old one), then `join_replica`.
    fn join_attempt(&mut self, i: usize) -> Result<(), String> {
        let now = self.now;
        let ip = replica_ip(i);
        let (k, kind, leave) = {
            let j = self.js();
            (j.next, j.plan.attempts[j.next].1, j.plan.leave)
        };
        if self.js().restart_at.is_none() {
            if k == 0 && leave == JoinLeave::Crash {
                // The crashed host's agent is silent: the control plane
                // says so.
                let n = self.router()?.host_lost(Instant(now), ip);
                self.log(format!(
                    "{now:>10} JOIN PLAN: host_lost(replica{i}) took it out of {n} service(s)"
                ));
                self.drain_middle()?;
            }
            if kind != JoinAttempt::Stale {
                self.hosts[1 + i].alive = false;
                self.hosts[1 + i].dev.rx.clear();
                self.js().restart_at = Some(now + RESTART_US);
                self.log(format!(
                    "{now:>10} JOIN PLAN: replica{i}'s server stops; a fresh one starts at {}",
                    now + RESTART_US
                ));
                return Ok(());
            }
        }
        if kind != JoinAttempt::Stale {
            if self.js().restart_at.is_some_and(|t| t > now) {
                return Ok(());
            }
            self.js().restart_at = None;
            // A fresh server at the replica's address, listening; its
            // agent starts afresh.
            let h = 1 + i;
            let listeners = match &self.hosts[0].app {
                App::Client { conns, .. } => conns.len() + 2,
                _ => 2,
            };
            // A live joiner also takes the connections opened while it is
            // held (a real kernel's backlog takes them; here one listening
            // socket each).
            let listeners = listeners
                + if self.js().plan.live {
                    self.js().plan.late_conns()
                } else {
                    0
                };
            let old = &self.hosts[h];
            let fresh = Host::server(
                old.name.clone(),
                ip,
                old.params.clone(),
                self.seed ^ 0x6a6f_696e ^ ((k as u64 + 1) << 40),
                crate::PORT,
                listeners,
            );
            self.hosts[h] = fresh;
            self.watch[h] = crate::Watch::default();
            self.agents.remove(&ip);
            self.js().replaced = true;
            self.log(format!(
                "{now:>10} JOIN PLAN: a fresh server replaces replica{i} ({listeners} listening sockets)"
            ));
        }
        let before = self.state_of(i);
        let got = self.router()?.join_replica(Instant(now), SERVICE, ip);
        if before.map(|s| s.0) != Some(MemberState::Down) || got.is_err() {
            return Err(format!(
                "join: join_replica of replica{i} (attempt {k}, {kind:?}) answered {got:?}; the router had it {before:?} (a down replica of a stateful service under the sequencer may join)"
            ));
        }
        let id = got.unwrap_or_default();
        // A second call while it joins is refused.
        let again = self.router()?.join_replica(Instant(now), SERVICE, ip);
        if !matches!(&again, Err(MembershipError::CannotJoin { why, .. }) if why.contains("joining already"))
        {
            return Err(format!(
                "join: a second join_replica of replica{i} during join {id} answered {again:?}, expected CannotJoin (joining already)"
            ));
        }
        self.log(format!(
            "{now:>10} JOIN replica{i} attempt {k} ({kind:?}): join {id}"
        ));
        {
            let j = self.js();
            j.cur = Some(Attempt::new(kind, id, false));
            j.next += 1;
            j.next_at = None;
            j.retry_due = false;
            j.last_kind = Some(kind);
            j.line(format!("attempt {k} {kind:?} join {id} at {now} us"));
        }
        let d = self.js().plan.conn_pause_us;
        self.join_late_conn(d, "during the join");
        self.drain_middle()
    }

    /// An agent's answer is due.
    fn join_action(&mut self, a: Action) -> Result<(), String> {
        let now = self.now;
        let (i, kind, cp) = {
            let j = self.js();
            let Some(cur) = &j.cur else {
                return Ok(());
            };
            let id = match &a {
                Action::Checkpoint { join } | Action::Restore { join, .. } => *join,
            };
            if cur.id != id {
                return Ok(());
            }
            let Some(cp) = cur.checkpoint.clone() else {
                return Ok(());
            };
            (j.plan.replica, cur.kind, cp)
        };
        match a {
            Action::Checkpoint { join } => {
                let d = cp.donor;
                let state = self.hosts[1 + d].app_state();
                self.stands_at(cp.seq, i)?;
                let unsent = self.hosts[1 + d].output_pending();
                if unsent > 0 {
                    // The real adapter refuses a server whose replies wait
                    // in its output buffers; the kernel's send queue is
                    // covered by the router's probe of SND.NXT once the
                    // client's window is open. The simulated echo server
                    // holds output back in both places.
                    if let Some(c) = &mut self.js().cur {
                        c.expect = Some("the donor: ");
                    }
                    self.log(format!(
                        "{now:>10} JOIN agent of replica{d} (donor): checkpoint refused, {unsent} byte(s) of output not sent"
                    ));
                    self.router()?.checkpoint_taken(
                        Instant(now),
                        join,
                        Err(format!(
                            "its server holds {unsent} byte(s) of output it has not sent"
                        )),
                    );
                    return self.drain_middle();
                }
                if kind == JoinAttempt::DonorRefuses {
                    if let Some(c) = &mut self.js().cur {
                        c.expect = Some("the donor: ");
                    }
                    let why = "the donor's server has session state a new connection would lack"
                        .to_string();
                    self.log(format!(
                        "{now:>10} JOIN agent of replica{d} (donor): checkpoint refused"
                    ));
                    self.router()?
                        .checkpoint_taken(Instant(now), join, Err(why));
                    return self.drain_middle();
                }
                let dg = digest(&state);
                self.log(format!(
                    "{now:>10} JOIN agent of replica{d} (donor): checkpoint at event {} digest {dg} ({} connection(s) of state)",
                    cp.seq,
                    state.len()
                ));
                if self.js().plan.live {
                    // The point is fixed (the real one forks here).
                    self.router()?.checkpoint_point(Instant(now), join);
                }
                self.router()?.checkpoint_taken(Instant(now), join, Ok(dg));
                let at = now + self.js().plan.agent_us.1;
                self.js()
                    .pending
                    .push((at, Action::Restore { join, state }));
                self.drain_middle()
            }
            Action::Restore { join, mut state } => {
                let h = 1 + i;
                // The real agent restores only into a server that took no
                // input yet (a stale server, or one that restored state in an
                // earlier attempt, must be restarted first).
                let took = self.hosts[h].took_input();
                if kind == JoinAttempt::Stale && !took {
                    return Err(format!(
                        "harness: the stale server of replica{i} took no input"
                    ));
                }
                let (answer, expect) = if took {
                    (
                        Err("its server already took input: restart it with no state".to_string()),
                        Some("the joiner: its server already took input"),
                    )
                } else if kind == JoinAttempt::FreshCorrupt {
                    match state.values_mut().find(|v| !v.is_empty()) {
                        Some(v) => {
                            let last = v.len() - 1;
                            v[last] ^= 0x01;
                        }
                        None => {
                            state.insert(0, vec![0x2a]);
                        }
                    }
                    self.hosts[h].restore(state);
                    (
                        Ok(digest(&self.hosts[h].app_state())),
                        Some("differs from the donor's"),
                    )
                } else if self.js().inject == Inject::JoinRestoreSkipped {
                    (Ok(digest(&state)), None)
                } else {
                    self.hosts[h].restore(state);
                    (Ok(digest(&self.hosts[h].app_state())), None)
                };
                if let Some(c) = &mut self.js().cur {
                    c.expect = expect;
                }
                self.log(format!(
                    "{now:>10} JOIN agent of replica{i} (joiner, {kind:?}): restore {answer:?}"
                ));
                self.router()?.state_restored(Instant(now), join, answer);
                self.drain_middle()
            }
        }
    }

    /// Output each serving replica sent on the connections open at the
    /// checkpoint that has not reached the router: the router adds the
    /// joiner (maps its first byte) where the output it received ends.
    fn unseen_output(&self, joiner: usize) -> Vec<(usize, u16, u32)> {
        let Some(j) = &self.join else {
            return Vec::new();
        };
        let Some(cp) = j.cur.as_ref().and_then(|c| c.checkpoint.as_ref()) else {
            return Vec::new();
        };
        let mut unseen = Vec::new();
        for h in 1..self.hosts.len() {
            if h - 1 == joiner
                || !self.hosts[h].alive
                || self.state_of(h - 1).map(|s| s.0) != Some(MemberState::Serving)
            {
                continue;
            }
            for p in cp.open.keys() {
                let sent = self.watch[h].data_out.get(p).and_then(|v| {
                    v.iter()
                        .map(|(seq, len, _)| seq.wrapping_add(*len))
                        .reduce(|a, b| if (b.wrapping_sub(a) as i32) > 0 { b } else { a })
                });
                let got = j.delivered_end.get(&(h - 1, *p)).copied();
                if let (Some(sent), Some(got)) = (sent, got) {
                    let n = sent.wrapping_sub(got) as i32;
                    if n > 0 {
                        unseen.push((h - 1, *p, n.unsigned_abs()));
                    }
                }
            }
        }
        unseen
    }

    /// A healthy replica evicted as `Stalled` waits for a client octet that
    /// reached the router while a join paused the input: the router held
    /// the client's (re)transmission of it, and then blamed the replica.
    pub(crate) fn held_by_pause(&self, h: usize, ev: &Event) -> Option<String> {
        let j = self.join.as_ref().filter(|j| j.paused)?;
        let Event::Evicted { conn, .. } = ev else {
            return None;
        };
        let cport = crate::member::conn_port(conn)?;
        let next = *self.watch[h].ack_out.get(&cport)?;
        let &(_, seq, len, at) = j
            .held
            .iter()
            .find(|(p, seq, len, _)| *p == cport && next.wrapping_sub(*seq) < *len)?;
        // Not if the router passed a copy of that octet on to it.
        let passed = j
            .passed
            .iter()
            .any(|&(r, p, s, l)| r == h - 1 && p == cport && next.wrapping_sub(s) < l);
        if passed {
            return None;
        }
        Some(format!(
            "{} waits for client octet {next} of the connection from port {cport}; the client's segment carrying it (seq {seq}, {len} bytes) reached the router at {at} us while a join paused the service's input, and was held, so the replica could not catch up",
            self.hosts[h].name
        ))
    }

    /// Every serving replica's server stands exactly at input event `seq`:
    /// each connection's bytes are the client's up to the last chunk
    /// numbered at or before `seq`.
    fn stands_at(&self, seq: u64, joiner: usize) -> Result<(), String> {
        let truth = self.numbered_at(seq);
        let data: HashMap<u16, &[u8]> = match &self.hosts[0].app {
            App::Client { conns, .. } => conns.iter().map(|k| (k.port, &k.data[..])).collect(),
            _ => HashMap::new(),
        };
        for h in 1..self.hosts.len() {
            if h - 1 == joiner
                || !self.hosts[h].alive
                || self.state_of(h - 1).map(|s| s.0) != Some(MemberState::Serving)
            {
                continue;
            }
            let state = self.hosts[h].app_state();
            for (p, bytes) in &state {
                let end = truth.get(p).copied().unwrap_or(0) as usize;
                let want = data.get(p).map(|d| &d[..end.min(d.len())]);
                if want != Some(&bytes[..]) {
                    return Err(format!(
                        "join: at the checkpoint (input event {seq}) {} read {} bytes of the connection from port {p}, the chunks numbered up to then end at {end}: it does not stand at event {seq}",
                        self.hosts[h].name,
                        bytes.len()
                    ));
                }
            }
            for (p, end) in &truth {
                if *end > 0 && !state.contains_key(p) {
                    return Err(format!(
                        "join: at the checkpoint (input event {seq}) {} has no state of the connection from port {p}, whose chunks numbered up to then end at {end}",
                        self.hosts[h].name
                    ));
                }
            }
        }
        Ok(())
    }

    /// Per client port, where the chunks numbered at or before `seq` end
    /// (0 for a connection only accepted).
    fn numbered_at(&self, seq: u64) -> BTreeMap<u16, u32> {
        let mut m = BTreeMap::new();
        for e in &self.agent_msgs {
            if let AgentMsg::Input {
                seq: n, key, kind, ..
            } = e
            {
                if *n > seq {
                    continue;
                }
                let v = m.entry(key.cport).or_insert(0u32);
                if let InputKind::Data { end } = kind {
                    *v = (*v).max(*end);
                }
            }
        }
        m
    }

    /// The client ports of the connections whose Accept was numbered at
    /// or before `seq`.
    fn accepted_at(&self, seq: u64) -> BTreeSet<u16> {
        self.agent_msgs
            .iter()
            .filter_map(|e| match e {
                AgentMsg::Input {
                    seq: n,
                    key,
                    kind: InputKind::Accept,
                    ..
                } if *n <= seq => Some(key.cport),
                _ => None,
            })
            .collect()
    }

    /// The router tries a failed join again by itself (join `id`); the
    /// agents answer as they did (the same servers).
    fn join_retry_started(&mut self, id: u64) {
        let now = self.now;
        let j = self.js();
        let kind = j.last_kind.unwrap_or(JoinAttempt::Fresh);
        j.retry_due = false;
        j.cur = Some(Attempt::new(kind, id, true));
        j.line(format!("router retry {kind:?} join {id} at {now} us"));
        self.log(format!(
            "{now:>10} JOIN the router tries again: join {id} ({kind:?} servers)"
        ));
    }

    /// A message for the agents: the checkpoint request, the joiner's
    /// `Join` input events.
    pub(crate) fn join_agent_msg(&mut self, m: &AgentMsg) -> Result<(), String> {
        if self.join.is_none() {
            return Ok(());
        }
        let i = self.js().plan.replica;
        let ip = replica_ip(i);
        match m {
            AgentMsg::Checkpoint {
                join,
                seq,
                donor,
                joiner,
                ..
            } => {
                // A retry of the router's may ask before its `JoinStarted`
                // is seen (messages come before events).
                if self.js().cur.is_none() && self.js().retry_due && *joiner == ip {
                    self.join_retry_started(*join);
                }
                let cur_id = self.js().cur.as_ref().map(|c| c.id);
                if cur_id != Some(*join) || *joiner != ip {
                    return Err(format!(
                        "join: checkpoint request {m:?}, but the sim's join in progress is {cur_id:?} of {ip}"
                    ));
                }
                let Some(d) = self.host_by_ip(*donor).filter(|&h| h > 0).map(|h| h - 1) else {
                    return Err(format!(
                        "join: checkpoint request from unknown donor {donor}"
                    ));
                };
                if d == i {
                    return Err(format!("join: the joiner is its own donor: {m:?}"));
                }
                // The connections open and not closing now: accepted (the
                // router numbered their Accept, at or before `seq`) and no
                // FIN of the client's forwarded (the echo servers close
                // only after it).
                let truth = self.numbered_at(*seq);
                let accepted = self.accepted_at(*seq);
                let fins = &self.js().fin_fwd;
                let open: BTreeMap<u16, u32> = accepted
                    .iter()
                    .filter(|p| !fins.contains(p))
                    .map(|p| (*p, truth.get(p).copied().unwrap_or(0)))
                    .collect();
                self.log(format!(
                    "{:>10} JOIN checkpoint request: event {seq}, donor replica{d}, open connections (port: base) {open:?}",
                    self.now
                ));
                let at = self.now + self.js().plan.agent_us.0;
                if self.js().plan.live {
                    // Its agent holds its server's input from now on, until
                    // the join ends well.
                    self.hosts[1 + i].held = true;
                }
                let j = self.js();
                if let Some(c) = &mut j.cur {
                    c.checkpoint = Some(Checkpoint {
                        seq: *seq,
                        donor: d,
                        open,
                        unseen: Vec::new(),
                    });
                }
                j.pending.push((at, Action::Checkpoint { join: *join }));
            }
            AgentMsg::Input {
                key,
                kind: InputKind::Join { base },
                replicas,
                ..
            } => {
                let j = self.js();
                let Some(c) = &mut j.cur else {
                    return Err(format!("join: a Join input event outside a join: {m:?}"));
                };
                if !replicas.contains(&ip) {
                    return Err(format!(
                        "join: the Join input event is not addressed to the joiner {ip}: {m:?}"
                    ));
                }
                if c.join_events.insert(key.cport, *base).is_some() {
                    return Err(format!(
                        "join: a second Join input event of port {}: {m:?}",
                        key.cport
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// An event of the join, or an eviction of its replica the plan
    /// explains. `Ok(true)`: nothing else to check.
    pub(crate) fn join_event(&mut self, ev: &Event) -> Result<bool, String> {
        if self.join.is_none() {
            return Ok(false);
        }
        let i = self.js().plan.replica;
        let ip = replica_ip(i);
        let now = self.now;
        match ev {
            Event::JoinStarted { replica, join, .. } => {
                let j = self.js();
                if *replica == ip && j.cur.is_none() && j.retry_due {
                    self.join_retry_started(*join);
                    self.js().paused = true;
                    return Ok(true);
                }
                let j = self.js();
                if *replica != ip || j.cur.as_ref().map(|c| c.id) != Some(*join) {
                    return Err(format!("join: {ev:?}, but the sim asked for no such join"));
                }
                j.paused = true;
                Ok(true)
            }
            Event::JoinCheckpoint { .. } => Ok(true),
            Event::JoinResumed { replica, join, .. } => {
                let j = self.js();
                if *replica != ip || j.cur.as_ref().map(|c| c.id) != Some(*join) || !j.plan.live {
                    return Err(format!(
                        "join: {ev:?}, but the sim's join in progress is {:?} (live {})",
                        j.cur.as_ref().map(|c| c.id),
                        j.plan.live
                    ));
                }
                j.paused = false;
                j.resumed = true;
                Ok(true)
            }
            Event::Joined {
                replica,
                seq,
                connections,
                pause_ms,
                join_ms,
                ..
            } => {
                let j = self.js();
                let Some(c) = j.cur.take() else {
                    return Err(format!("join: {ev:?} with no join in progress"));
                };
                j.paused = false;
                j.resumed = false;
                if *replica != ip || c.expect.is_some() {
                    return Err(format!(
                        "join: {ev:?}, but the attempt ({:?}{}) must not be admitted: the router had to refuse it ({:?})",
                        c.kind,
                        if c.retry { ", the router's retry" } else { "" },
                        c.expect
                    ));
                }
                let Some(cp) = &c.checkpoint else {
                    return Err(format!("join: {ev:?} without a checkpoint"));
                };
                if *seq != cp.seq {
                    return Err(format!(
                        "join: {ev:?}: the checkpoint was at event {}",
                        cp.seq
                    ));
                }
                // A live join's joiner is part of the connections opened
                // since, too (those still open at the end are counted).
                if !j.plan.live && *connections != cp.open.len() {
                    return Err(format!(
                        "join: the joiner joined {connections} connection(s), but {} were open and not closing at the checkpoint: {:?}",
                        cp.open.len(),
                        cp.open
                    ));
                }
                let syn_ports: Vec<&u16> = c.syns.keys().collect();
                let open_ports: Vec<&u16> = cp.open.keys().collect();
                if syn_ports != open_ports {
                    return Err(format!(
                        "join: the joiner got join SYNs of ports {syn_ports:?}, the connections open at the checkpoint are {open_ports:?}"
                    ));
                }
                if c.join_events != cp.open {
                    return Err(format!(
                        "join: the Join input events (port: base) are {:?}, the connections open at the checkpoint and where the client's streams stood {:?}",
                        c.join_events, cp.open
                    ));
                }
                if !c.evicted.is_empty() {
                    return Err(format!(
                        "join: the joiner was admitted after evictions during the join: {:?}",
                        c.evicted
                    ));
                }
                if let Some(&(r, p, n)) = cp.unseen.first() {
                    return Err(format!(
                        "join: the router admitted replica{i} with the service at rest at input event {}, but replica{r} had sent {n} byte(s) of output on the connection from port {p} that had not reached the router when it added the joiner (lost or in flight): the group's output does not stand where the router maps the joiner's first byte, so the joiner's echo is {n} byte(s) out of place (all: {:?})",
                        cp.seq, cp.unseen
                    ));
                }
                j.joined = true;
                if j.plan.live {
                    // Its agent gives the server what it held.
                    let h = 1 + i;
                    self.hosts[h].held = false;
                }
                let j = self.js();
                j.after.extend(c.live_new.iter().copied());
                j.joined_from = Some(cp.seq + 1);
                j.joined_ports = cp.open.clone();
                j.finished = true;
                j.outcomes.push(JoinOutcome {
                    attempt: c.kind,
                    retry: c.retry,
                    honest: true,
                    result: Ok(*connections),
                    pause_ms: *pause_ms,
                    join_ms: *join_ms,
                    zero_windows: c.zero_windows,
                });
                j.line(format!(
                    "join {} joined {connections} connection(s) at {now} us, pause {pause_ms} ms",
                    c.id
                ));
                let d = j.plan.conn_after_us;
                self.join_late_conn(d, "after the join");
                Ok(true)
            }
            Event::JoinFailed {
                replica,
                reason,
                pause_ms,
                retry_in_ms,
                ..
            } => {
                let perfect = self.js().perfect;
                let j = self.js();
                let Some(c) = j.cur.take() else {
                    return Err(format!("join: {ev:?} with no join in progress"));
                };
                j.paused = false;
                j.resumed = false;
                j.failed_at = Some(now);
                if j.plan.live {
                    // Its agent drops what it held for the server (which
                    // took none of it): the next attempt starts afresh.
                    self.agents.remove(&ip);
                }
                let j = self.js();
                j.unjoined.extend(c.syns.keys().copied());
                j.unjoined.extend(c.live_new.iter().copied());
                // The connections its held server got during this attempt
                // are not its own: a later attempt joins them as open ones.
                for p in &c.live_new {
                    if let Some(e) = j.first_syn.get_mut(p) {
                        e.1 = false;
                    }
                }
                if *replica != ip {
                    return Err(format!("join: {ev:?}, but replica{i} is joining"));
                }
                // The refusal the agents' answers call for; with honest
                // answers only a service that does not come to rest in time
                // on a lossy network (a join that fails for it fails
                // loudly, as it must).
                let lossy_ok = !perfect
                    && (reason.contains("did not come to rest")
                        || reason.contains("did not confirm where their output ends"));
                // Output still on its way when the service looked at rest
                // (the router notices when it comes, or when it asks again
                // after the checkpoint, and gives up safely).
                let stirred = reason.contains("stirred during the pause")
                    || reason.contains("stirred at the checkpoint")
                    || reason.contains("after the service came to rest");
                // A live join adds the joiner's legs before its agent
                // answers: a server that is not fresh (a stale one, or one
                // a failed attempt left, which the real agent would have
                // ended) has those connections already and refuses or
                // resets their join SYNs, which fails the join loudly there.
                let not_fresh = j.plan.live
                    && (c.retry || c.kind != JoinAttempt::Fresh)
                    && (reason.contains("the joiner left connection")
                        || reason.contains("refused the joiner")
                        || reason.contains("taken out of connection"));
                let ok = c.expect.is_some_and(|w| reason.contains(w))
                    || lossy_ok
                    || stirred
                    || not_fresh;
                if !ok {
                    return Err(format!(
                        "join: attempt {:?}{} (join {}) failed: {reason:?}{}",
                        c.kind,
                        if c.retry { " (the router's retry)" } else { "" },
                        c.id,
                        match c.expect {
                            Some(w) => format!(" (the agents' answers call for {w:?})"),
                            None if perfect => ", its agents answering the truth, on a network that loses nothing".to_string(),
                            None => ", its agents answering the truth (only a service that does not come to rest in time, or stirs during the pause, may fail it)".to_string(),
                        }
                    ));
                }
                j.outcomes.push(JoinOutcome {
                    attempt: c.kind,
                    retry: c.retry,
                    honest: c.expect.is_none(),
                    result: Err(reason.clone()),
                    pause_ms: *pause_ms,
                    join_ms: *pause_ms,
                    zero_windows: c.zero_windows,
                });
                j.line(format!(
                    "join {} ({:?}{}) failed at {now} us: {reason} (retry in {retry_in_ms:?} ms)",
                    c.id,
                    c.kind,
                    if c.retry { ", retry" } else { "" }
                ));
                j.last_kind = Some(c.kind);
                // The sim's next attempt (sooner than the router's retry,
                // 2 s at the earliest: a new round); else the router's
                // retry; else the plan is over.
                if j.next < j.plan.attempts.len() {
                    j.next_at = Some(now + j.plan.attempts[j.next].0);
                } else if let Some(ms) = retry_in_ms {
                    j.retry_due = true;
                    j.retry_at = now + ms * 1000;
                } else {
                    j.finished = true;
                    let d = j.plan.conn_after_us;
                    self.join_late_conn(d, "after the join failed");
                }
                // Out of every connection, down.
                match self.state_of(i) {
                    Some((MemberState::Down, 0)) => {}
                    s => {
                        return Err(format!(
                            "join: after the failed join {} the router has replica{i} {s:?} (state, connections); it must be down and part of none",
                            c.id
                        ))
                    }
                }
                Ok(true)
            }
            Event::Evicted { replica, conn, .. } if *replica == ip => {
                let j = self.js();
                let port = crate::member::conn_port(conn);
                let fresh_part = port.is_some_and(|p| {
                    j.joined_ports.contains_key(&p)
                        || j.after.contains(&p)
                        || j.cur
                            .as_ref()
                            .is_some_and(|c| c.syns.contains_key(&p) || c.live_new.contains(&p))
                });
                if let (Some(c), true) = (&mut j.cur, fresh_part) {
                    // Its join leg (a failing join takes it out again).
                    c.evicted.push(conn.clone());
                    return Ok(true);
                }
                // The old server's leg, taken out when it left (the crash's
                // detection, the mark-down, `host_lost`; an old RST
                // announced late): not the fresh server's business. A leg of
                // the fresh server out of a join is a healthy eviction.
                Ok(j.left_at.is_some() && !fresh_part)
            }
            Event::ReplicaDown { replica, .. } if *replica == ip => {
                let j = self.js();
                if j.left_at.is_none() && j.plan.leave == JoinLeave::MarkDown {
                    return Ok(false);
                }
                j.out = true;
                let now = self.now;
                self.js().out_at = Some(now);
                Ok(!self.js().replaced || self.js().cur.is_some())
            }
            _ => Ok(false),
        }
    }

    /// The router emits `data` to host `h`: first SYNs (every replica), and
    /// what the joiner may get; to the client, the zero window while paused.
    pub(crate) fn join_router_sent(&mut self, h: usize, data: &[u8]) -> Result<(), String> {
        if self.join.is_none() {
            return Ok(());
        }
        let i = self.js().plan.replica;
        if h == 0 {
            if !self.js().paused {
                return Ok(());
            }
            let Ok(ip) = ipv4::Packet::new_checked(data) else {
                return Ok(());
            };
            let Ok(s) = tcp::Segment::new_checked(ip.payload()) else {
                return Ok(());
            };
            if s.syn() && s.ack_flag() {
                let sc = s.wscale().unwrap_or(0);
                self.js().client_scale.insert(s.dst_port(), sc);
            }
            if s.syn() || s.rst() {
                return Ok(());
            }
            // The window may reach no further than the client's highest
            // byte sent (rounded up to the window scale): bytes it sent that
            // were lost must still be allowed through, nothing new.
            let port = s.dst_port();
            let scale = self.js().client_scale.get(&port).copied().unwrap_or(0);
            let hi = self.js().client_hi.get(&port).copied();
            let allowed = hi.map_or(0, |hi| {
                let sent = u32::try_from(hi.wrapping_sub(s.ack().0) as i32).unwrap_or(0);
                sent.div_ceil(1u32 << scale)
            });
            if u32::from(s.window()) > allowed {
                return Err(format!(
                    "join: the client got window {} while the service's input is paused for a join (at most {allowed} is due: a zero window beyond what the client sent): {}",
                    s.window(),
                    crate::describe(data)
                ));
            }
            if let Some(c) = &mut self.js().cur {
                c.zero_windows += 1;
            }
            return Ok(());
        }
        let Some((p, seq, fl, len)) = from_client(data) else {
            return Ok(());
        };
        let now = self.now;
        let j = self.js();
        if fl & tcp::flags::FIN != 0 {
            j.fin_fwd.insert(p);
        }
        if j.paused && len > 0 {
            j.passed.push((h - 1, p, seq, len));
        }
        let syn = fl & tcp::flags::SYN != 0 && fl & tcp::flags::ACK == 0;
        let first = syn && !j.first_syn.contains_key(&p);
        // A live join resumes with the SYNs held during its pause, sent in
        // the same step as its `JoinResumed` (which the sim sees after the
        // packets): from the checkpoint on, the held joiner takes new
        // connections (while paused the router sends nobody a first SYN).
        let live_point = j.plan.live && j.cur.as_ref().is_some_and(|c| c.checkpoint.is_some());
        if first {
            // A live join's held joiner takes new connections too.
            let admitted = j.joined || j.resumed || live_point;
            j.first_syn.insert(p, (seq, admitted));
        }
        // Only the joiner, once the router took it out.
        if h - 1 != i || !j.out {
            return Ok(());
        }
        if j.plan.live && j.failed_at == Some(now) {
            return Ok(());
        }
        if fl & tcp::flags::RST != 0 {
            return Ok(());
        }
        if !syn && j.out_at == Some(now) {
            // Emitted in the step that took it out: the sim sees a step's
            // events before its packets, and the router may have sent this
            // one to the old server's leg before it learnt of the crash in
            // the same step (a client segment or log resend forwarded
            // before the FIN that evicts it was read).
            return Ok(());
        }
        if syn {
            let (isn, after) = j.first_syn[&p];
            if first || after {
                if !j.joined && !j.resumed && !live_point {
                    return Err(format!(
                        "join: replica{i}, out of the service or joining, got the first SYN of the connection from port {p}: {}",
                        crate::describe(data)
                    ));
                }
                match &mut j.cur {
                    // Held, during a live join: its own only if it joins.
                    Some(c) if !j.joined => {
                        c.live_new.insert(p);
                    }
                    _ => {
                        j.after.insert(p);
                    }
                }
                return Ok(());
            }
            // A join SYN: only of a connection open at the checkpoint, once
            // the state is proven, at the client's position.
            let base = j
                .cur
                .as_ref()
                .and_then(|c| c.checkpoint.as_ref())
                .and_then(|cp| cp.open.get(&p).copied());
            let Some(base) = base else {
                return Err(format!(
                    "join: replica{i} got a SYN of the connection from port {p}, which it is not joining: {}",
                    crate::describe(data)
                ));
            };
            let want = isn.wrapping_add(base);
            if seq != want {
                return Err(format!(
                    "join: the join SYN of port {p} has sequence number {seq}; the client's ISN {isn} + base {base} is {want}: {}",
                    crate::describe(data)
                ));
            }
            let first_leg = j.cur.as_ref().is_some_and(|c| c.syns.is_empty());
            if let Some(c) = &mut j.cur {
                c.syns.insert(p, seq);
            }
            if first_leg {
                let unseen = self.unseen_output(i);
                if let Some(cp) = self.js().cur.as_mut().and_then(|c| c.checkpoint.as_mut()) {
                    cp.unseen = unseen;
                }
            }
            return Ok(());
        }
        let part = j.joined_ports.contains_key(&p)
            || j.after.contains(&p)
            || j.cur
                .as_ref()
                .is_some_and(|c| c.syns.contains_key(&p) || c.live_new.contains(&p))
            || (len == 0 && j.plan.live && j.unjoined.contains(&p));
        if !part {
            return Err(format!(
                "join: replica{i} (out, joining or joined) got a segment of the connection from port {p}, which it is not part of: {}",
                crate::describe(data)
            ));
        }
        // On a joined connection the joiner's sequence space begins at its
        // ISN: an ACK below ISN + 1 acknowledges output from before its
        // SYN, which no stack has sent. RFC 9293 would ignore the ACK and
        // keep the data; smoltcp 0.12 drops the whole segment, Linux drops
        // it when the ACK is more than its largest window old
        // (`TCP_TOO_OLD_ACK`) — the joiner then lacks client bytes that the
        // client, acknowledged by the others, never sends again.
        if let (Some(&isn), true) = (j.joiner_isn.get(&p), fl & tcp::flags::ACK != 0) {
            let ack = ack_of(data).unwrap_or(isn.wrapping_add(1));
            let before = isn.wrapping_add(1).wrapping_sub(ack) as i32;
            if before > 0 && !j.after.contains(&p) {
                return Err(format!(
                    "join: the router sent the joiner (replica{i}) ACK {ack} on the connection from port {p} it joined, {before} byte(s) before its ISN + 1 = {}: it acknowledges output from before the joiner's SYN (smoltcp drops such a segment with its data; Linux does beyond its largest window): {}",
                    isn.wrapping_add(1),
                    crate::describe(data)
                ));
            }
        }
        Ok(())
    }

    /// At the end: the plan ran to its end; a joined replica serves, each
    /// connection it joined began at the client's position with the
    /// group's state restored, it accepted no other; a replica whose last
    /// attempt failed is down and part of nothing.
    pub(crate) fn join_final_check(&self) -> Result<(), String> {
        let Some(j) = &self.join else {
            return Ok(());
        };
        if !j.finished {
            return Err(format!(
                "join: the plan did not run to its end: {}",
                j.summary()
            ));
        }
        let i = j.plan.replica;
        let h = &self.hosts[1 + i];
        let by = h.by_peer();
        let st = self.state_of(i);
        if j.joined {
            if st.map(|s| s.0) != Some(MemberState::Serving) {
                return Err(format!(
                    "join: replica{i} was admitted, and at the end the router has it {st:?}"
                ));
            }
            let data: HashMap<u16, &[u8]> = match &self.hosts[0].app {
                App::Client { conns, .. } => conns.iter().map(|k| (k.port, &k.data[..])).collect(),
                _ => HashMap::new(),
            };
            for (p, base) in &j.joined_ports {
                let Some(k) = by.get(p) else {
                    return Err(format!(
                        "join: replica{i} joined the connection from port {p}, and its server has no connection from it"
                    ));
                };
                let base = *base as usize;
                if k.joined_at.unwrap_or(0) != base {
                    return Err(format!(
                        "join: replica{i} joined the connection from port {p} at client offset {base}, but its server held {:?} bytes of that connection's state when it accepted it: it did not hold the group's state",
                        k.joined_at
                    ));
                }
                let d = data.get(p).copied().unwrap_or_default();
                let got = k.rx.get(base..).unwrap_or_default();
                if got != d.get(base..).unwrap_or_default() {
                    let off = got
                        .iter()
                        .zip(d.get(base..).unwrap_or_default())
                        .position(|(a, b)| a != b);
                    return Err(format!(
                        "join: replica{i}'s socket of the connection from port {p}, joined at offset {base}, read {} bytes that are not the client's from there (first difference at socket byte {off:?}; the client's stream has {} bytes)",
                        got.len(),
                        d.len()
                    ));
                }
            }
            let mut ports: Vec<&u16> = by.keys().collect();
            ports.sort();
            for p in ports {
                if !j.joined_ports.contains_key(p) && !j.after.contains(p) {
                    return Err(format!(
                        "join: replica{i}'s server accepted a connection from port {p}, which it neither joined nor got the first SYN of after it was admitted"
                    ));
                }
            }
            for p in &j.after {
                if by.get(p).is_some_and(|k| k.joined_at.is_some()) {
                    return Err(format!(
                        "join: replica{i}'s connection from port {p} began after it was admitted, and took restored state"
                    ));
                }
            }
        } else {
            match st {
                Some((MemberState::Down, 0)) => {}
                s => {
                    return Err(format!(
                        "join: every attempt of replica{i} failed, and at the end the router has it {s:?} (state, connections)"
                    ))
                }
            }
            if j.replaced && !by.is_empty() {
                let mut ports: Vec<&u16> = by.keys().collect();
                ports.sort();
                return Err(format!(
                    "join: every attempt of replica{i} failed, and its fresh server accepted connections from ports {ports:?}"
                ));
            }
        }
        Ok(())
    }
}
