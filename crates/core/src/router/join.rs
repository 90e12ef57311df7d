//! A replica joins a running stateful service with the group's state
//! (FT-TCP §3.2 and §6, COSCANet-FT §V): readmission only with proof.
//!
//! 1. **Pause** ([`Router::join_replica`]): the service's client input is
//!    held at the router (segments with bytes, SYN, FIN or RST wait in a
//!    bounded queue; the clients are told a zero window, FT-TCP §3.2), and
//!    the replica is `Joining`.
//! 2. **Quiet**: every connection of the service is at rest
//!    ([`Conn::join_quiet`]): its input numbered and acknowledged by every
//!    replica, the replicas' output equal and acknowledged by the client.
//!    Input event `seq`, the last numbered, is then the point every
//!    replica's server stands at.
//! 3. **State** ([`AgentMsg::Checkpoint`]): a serving replica's agent (the
//!    donor) waits until its server applied event `seq`, checkpoints the
//!    server's state and sends it to the joiner's agent, which restores it
//!    into its (fresh) server. Both report a digest of the state
//!    ([`Router::checkpoint_taken`], [`Router::state_restored`]); they
//!    must be equal — the proof that the joiner holds the group's state.
//! 4. **Legs**: the joiner is added to every open connection
//!    ([`Conn::join_leg`]: a TCP connection of its own in the client's name
//!    where the client's stream stands; the sequencer's `Join` event is its
//!    accept), so that a connection can outlive every replica it began
//!    with.
//! 5. **Admit**: the joiner serves; the held input is released in its
//!    order; the clients get their window back.
//!
//! Any failure (a connection that does not come to rest, no state, a
//! digest that differs, a joiner that does not answer, an agent that
//! leaves) ends the join: the joiner stays out of service, the input
//! resumes, the log says why. Nothing stale or unproven serves.

use super::*;
use crate::conn::Quiet;

/// How long the paused service may take to come to rest.
pub const JOIN_QUIET_MAX: core::time::Duration = core::time::Duration::from_secs(2);
/// How long the checkpoint, its transfer and the restore may take.
pub const JOIN_STATE_MAX: core::time::Duration = core::time::Duration::from_secs(60);
/// How long a live join's donor may take to fix its checkpoint (a fork;
/// a save where it cannot fork) while the input is paused.
pub const JOIN_POINT_MAX: core::time::Duration = core::time::Duration::from_secs(30);
/// How long the joiner may take to answer the connections' SYNs.
pub const JOIN_LEGS_MAX: core::time::Duration = core::time::Duration::from_secs(3);
/// Attempts the router makes to join a replica by itself (the first one
/// and the retries after a failure: a client in a transaction, a service
/// not at rest in time), 2 s, then 4 s apart.
pub const JOIN_ATTEMPTS: u32 = 3;
const JOIN_RETRY_FIRST: core::time::Duration = core::time::Duration::from_secs(2);
/// How soon a join refused because its service was busy (another join, an
/// order takeover) is tried again.
const JOIN_BUSY_RETRY: core::time::Duration = core::time::Duration::from_millis(250);
/// How often the router checks whether the paused service is quiet.
const JOIN_CHECK: core::time::Duration = core::time::Duration::from_millis(2);
/// How often an unanswered SYN to the joiner is repeated.
const JOIN_SYN_EVERY: core::time::Duration = core::time::Duration::from_millis(200);
/// Client segments held while a service is paused, at most (more are
/// dropped: the client retransmits them after the pause).
const HELD_MAX: usize = 16_384;
const HELD_BYTES_MAX: usize = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JoinPhase {
    Quiescing,
    /// A live join at rest: the joiner's legs are being added and the
    /// donor fixes its checkpoint (still paused).
    Point,
    /// The state travels: paused, or (a live join) with the input resumed.
    State,
    /// A paused join's legs, after the proof.
    Legs,
}

#[derive(Debug)]
pub(super) struct Join {
    pub(super) id: u64,
    pub(super) svc: ServiceId,
    pub(super) joiner: ReplicaId,
    pub(super) donor: Option<ReplicaId>,
    pub(super) started: Instant,
    pub(super) phase: JoinPhase,
    /// When the current phase ends in failure.
    pub(super) deadline: Instant,
    /// When the router looks again (quiet check, SYN repeats).
    pub(super) next: Instant,
    pub(super) seq: u64,
    pub(super) donor_digest: Option<String>,
    pub(super) joiner_digest: Option<String>,
    /// The joiner's agent answered the state (restored, or refused): its
    /// server may hold a state that is not the group's from here on.
    pub(super) joiner_touched: bool,
    /// The connections the joiner joins.
    pub(super) conns: Vec<ConnKey>,
    pub(super) held: VecDeque<Packet>,
    pub(super) held_bytes: usize,
    /// The connections whose SYN is among `held`: a client's repeats of
    /// it are not held too. Released together, the copies would each
    /// reach the server as a new SYN (a listener may take a repeat for a
    /// second connection and have none left for the next client).
    pub(super) held_syns: BTreeSet<ConnKey>,
    /// Why the service was not quiet at the last check.
    pub(super) why: &'static str,
    /// `Config::join_live` when it started.
    pub(super) live: bool,
    /// A live join: the donor's checkpoint point is fixed.
    pub(super) point: bool,
    /// A live join: when its legs must be open.
    pub(super) legs_deadline: Instant,
    /// When the router began to confirm, after the donor fixed its
    /// checkpoint (a live join) or after the proof (a paused one), that
    /// the servers' output still stands where the service came to rest.
    pub(super) confirm: Option<Instant>,
    /// When the service's input resumed (a live join, before the proof).
    pub(super) resumed: Option<Instant>,
}

impl Join {
    /// Whether the joiner's state is proven (`true`: both digests in and
    /// equal); an error once they differ or the time for them is up.
    fn proven(&self, now: Instant) -> Result<bool, String> {
        let done = |d: &Option<String>| if d.is_some() { "done" } else { "missing" };
        if now >= self.deadline && (self.donor_digest.is_none() || self.joiner_digest.is_none()) {
            return Err(format!(
                "no state within {} s (checkpoint {}, restore {}){}",
                JOIN_STATE_MAX.as_secs(),
                done(&self.donor_digest),
                done(&self.joiner_digest),
                if self.resumed.is_some() {
                    "; the input was not paused meanwhile"
                } else {
                    ""
                }
            ));
        }
        let (Some(d), Some(r)) = (&self.donor_digest, &self.joiner_digest) else {
            return Ok(false);
        };
        if d != r {
            return Err(format!(
                "the restored state's digest {r} differs from the donor's {d} at input event {}",
                self.seq
            ));
        }
        Ok(true)
    }
}

impl Router {
    /// Operator action, or the driver's when a replica of a stateful
    /// service comes back (its agent registers with a fresh server): bring
    /// replica `addr` of service `name` to the group's state and admit it
    /// (see the module docs). Returns the join's id; its progress is in the
    /// log (`Event::JoinStarted` … `Event::Joined`/`Event::JoinFailed`).
    pub fn join_replica(
        &mut self,
        now: Instant,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<u64, MembershipError> {
        self.note_time(now);
        let (svc, slot) = self.find_member(name, addr)?;
        let cannot = |why: &str| MembershipError::CannotJoin {
            service: name.to_string(),
            replica: addr.to_string(),
            why: why.to_string(),
        };
        let Some(r) = slot else {
            return Err(MembershipError::NotAMember {
                service: name.to_string(),
                replica: addr.to_string(),
            });
        };
        match self.health[svc.0][r.0] {
            m @ (Member::Serving | Member::Draining { .. }) => {
                return Err(MembershipError::AlreadyMember {
                    service: name.to_string(),
                    replica: addr.to_string(),
                    state: m.state(),
                })
            }
            Member::Removed { .. } => {
                return Err(MembershipError::Removed {
                    service: name.to_string(),
                    replica: addr.to_string(),
                })
            }
            Member::Joining { .. } => return Err(cannot("it is joining already")),
            Member::Down { .. } => {}
        }
        let s = &self.config.services[svc.0];
        if !self.config.sequencer {
            return Err(cannot(
                "the router runs without the sequencer: no server's state can be transferred at a known point of its input",
            ));
        }
        if !s.voting.unvoted() {
            return Err(cannot(
                "its output is voted on (joining voted connections is not supported)",
            ));
        }
        if self.agents.as_ref().is_some_and(|a| !a.contains(&addr)) {
            return Err(cannot("its agent has not registered with this router"));
        }
        // Busy: one join at a time per service, none while the order is
        // taken over. The router tries again by itself (every
        // JOIN_BUSY_RETRY while the replica stays down), so that two
        // replicas lost together both come back without an operator.
        let busy = if self.joins.iter().any(|j| j.svc == svc) {
            Some("another replica is joining the service; this one joins after it")
        } else if self.order[svc.0].waiting.is_some() {
            Some("the input order is being taken over from the agents; the join starts once it is")
        } else {
            None
        };
        if let Some(why) = busy {
            let tries = self.join_retry.get(&(svc, r)).map_or(0, |x| x.1);
            self.join_retry
                .insert((svc, r), (now + JOIN_BUSY_RETRY, tries));
            return Err(cannot(why));
        }
        let donor = (0..self.health[svc.0].len())
            .map(ReplicaId)
            .find(|&d| d != r && self.in_service(svc, d));
        if donor.is_none() {
            return Err(cannot("no serving replica to take the state from"));
        }
        if self
            .join_retry
            .get(&(svc, r))
            .is_none_or(|x| x.0 != Instant::from_micros(u64::MAX))
        {
            // Not a retry of the router's own: a new round of attempts.
            self.join_retry.remove(&(svc, r));
        }
        self.join_ids += 1;
        let id = self.join_ids;
        self.health[svc.0][r.0] = Member::Joining { since: now };
        self.probe_next.remove(&(svc, r));
        self.joins.push(Join {
            id,
            svc,
            joiner: r,
            donor,
            started: now,
            phase: JoinPhase::Quiescing,
            deadline: now + JOIN_QUIET_MAX,
            next: now,
            seq: 0,
            donor_digest: None,
            joiner_digest: None,
            joiner_touched: false,
            conns: Vec::new(),
            held: VecDeque::new(),
            held_bytes: 0,
            held_syns: BTreeSet::new(),
            why: "",
            live: self.config.join_live,
            point: false,
            legs_deadline: now,
            confirm: None,
            resumed: None,
        });
        for key in self.conns_of(svc) {
            self.on_conn(now, key, |c, ctx| c.set_paused(ctx, true));
        }
        self.out.event(Event::JoinStarted {
            service: name.to_string(),
            replica: addr,
            join: id,
        });
        self.join_tick(now);
        Ok(id)
    }

    /// The donor's agent checkpointed its server at the join's input
    /// event: `Ok(digest)` of the state it sent, or why it could not.
    pub fn checkpoint_taken(&mut self, now: Instant, join: u64, result: Result<String, String>) {
        self.state_report(now, join, true, result);
    }

    /// The joiner's agent restored the donor's state into its server:
    /// `Ok(digest)` of its server's state now, or why it could not.
    pub fn state_restored(&mut self, now: Instant, join: u64, result: Result<String, String>) {
        self.state_report(now, join, false, result);
    }

    /// The donor's agent fixed join `join`'s checkpoint at its input
    /// event (a fork of its server, or a save, is taken): a live join's
    /// input may resume once the joiner is part of every connection.
    pub fn checkpoint_point(&mut self, now: Instant, join: u64) {
        self.note_time(now);
        if let Some(j) = self
            .joins
            .iter_mut()
            .find(|j| j.id == join && j.phase == JoinPhase::Point)
        {
            j.point = true;
            self.join_tick(now);
        }
    }

    /// Either agent's part of join `join` failed.
    pub fn join_failed(&mut self, now: Instant, join: u64, reason: String) {
        self.note_time(now);
        if self
            .joins
            .iter()
            .any(|j| j.id == join && j.phase != JoinPhase::Legs)
        {
            self.end_join(now, join, Err(reason));
        }
    }

    /// The donor and the joiner of a join while its state is on its way
    /// (`None` otherwise): the driver relays state pieces only between them.
    pub fn join_parties(&self, join: u64) -> Option<(Ipv4Addr, Ipv4Addr)> {
        let j = self
            .joins
            .iter()
            .find(|j| j.id == join && matches!(j.phase, JoinPhase::State | JoinPhase::Point))?;
        let s = &self.config.services[j.svc.0];
        Some((s.replicas[j.donor?.0], s.replicas[j.joiner.0]))
    }

    /// The services in which replica `addr` is down and could join (the
    /// driver starts a join when a fresh server of it connects to its
    /// agent): stateful, with the sequencer, not voted on.
    pub fn joinable(&self, addr: Ipv4Addr) -> Vec<String> {
        if !self.config.sequencer {
            return Vec::new();
        }
        let mut v = Vec::new();
        for (svc, s) in self.config.services.iter().enumerate() {
            if s.stateless || !s.voting.unvoted() || self.retired.contains(&ServiceId(svc)) {
                continue;
            }
            for (i, r) in s.replicas.iter().enumerate() {
                if *r == addr && matches!(self.health[svc][i], Member::Down { .. }) {
                    v.push(s.name.clone());
                }
            }
        }
        v
    }

    /// The services in which a server of replica `addr` that follows the
    /// order now is stale: the replica is down there (it gets no input
    /// events while out, so its server missed what the others took), it
    /// could join, and another replica serves (the group's state lives
    /// on). Such a server must start afresh to come back. Where no other
    /// replica serves, its state may be all the service has left: none.
    /// None either while the replica serves any service: its agent ends
    /// every server it orders, and would end that service's too.
    pub fn stale_in(&self, addr: Ipv4Addr) -> Vec<String> {
        let serves_one = self.config.services.iter().enumerate().any(|(svc, s)| {
            (0..s.replicas.len())
                .any(|i| s.replicas[i] == addr && self.in_service(ServiceId(svc), ReplicaId(i)))
        });
        if serves_one {
            return Vec::new();
        }
        // Down where another serves: where it could only come back by a
        // join.
        self.enable_needs_join(addr, None)
    }

    fn state_report(
        &mut self,
        now: Instant,
        join: u64,
        donor: bool,
        result: Result<String, String>,
    ) {
        self.note_time(now);
        let Some(j) = self
            .joins
            .iter_mut()
            .find(|j| j.id == join && matches!(j.phase, JoinPhase::State | JoinPhase::Point))
        else {
            return;
        };
        if !donor {
            j.joiner_touched = true;
        }
        match result {
            Err(e) => {
                let who = if donor { "the donor" } else { "the joiner" };
                self.end_join(now, join, Err(format!("{who}: {e}")));
            }
            Ok(d) => {
                if donor {
                    j.donor_digest = Some(d);
                } else {
                    j.joiner_digest = Some(d);
                }
                self.join_tick(now);
            }
        }
    }

    /// Replica `addr` failed: a join it takes part in (as the joiner, or as
    /// the donor before the state is proven) fails.
    pub(super) fn fail_joins_of(&mut self, now: Instant, addr: Ipv4Addr, why: &str) {
        let hit: Vec<u64> = self
            .joins
            .iter()
            .filter(|j| {
                let s = &self.config.services[j.svc.0];
                s.replicas[j.joiner.0] == addr
                    || (j.phase != JoinPhase::Legs
                        && j.donor.is_some_and(|d| s.replicas[d.0] == addr))
            })
            .map(|j| j.id)
            .collect();
        for id in hit {
            self.end_join(now, id, Err(format!("{addr}: {why}")));
        }
    }

    /// The connections of service `svc` (a scan: joins are rare).
    pub(super) fn conns_of(&self, svc: ServiceId) -> Vec<ConnKey> {
        self.conns
            .iter()
            .filter(|(_, c)| c.service() == svc)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Whether service `svc`'s input is paused for a join.
    pub(super) fn paused(&self, svc: ServiceId) -> bool {
        !self.joins.is_empty()
            && self
                .joins
                .iter()
                .any(|j| j.svc == svc && j.resumed.is_none())
    }

    /// The joiner a new connection of `svc` takes besides the serving
    /// replicas: a live join's, once the input resumed (its server must
    /// see every input from the checkpoint on).
    pub(super) fn held_joiner(&self, svc: ServiceId) -> Option<ReplicaId> {
        if self.joins.is_empty() {
            return None;
        }
        let j = self
            .joins
            .iter()
            .find(|j| j.svc == svc && j.resumed.is_some())?;
        let addr = self.config.services[svc.0].replicas[j.joiner.0];
        self.agents
            .as_ref()
            .is_none_or(|a| a.contains(&addr))
            .then_some(j.joiner)
    }

    /// A client segment of a paused service: held until the join ends
    /// (its client told the window is closed), or dropped past the bound.
    /// `syn`: the segment opens a connection (a SYN without ACK); only its
    /// first copy is held.
    pub(super) fn hold(
        &mut self,
        now: Instant,
        svc: ServiceId,
        key: ConnKey,
        pkt: Packet,
        syn: bool,
    ) {
        let Some(j) = self.joins.iter_mut().find(|j| j.svc == svc) else {
            return;
        };
        if syn && j.held_syns.contains(&key) {
            self.counters.drop(DropReason::DuplicateSuppressed);
        } else if j.held.len() >= HELD_MAX || j.held_bytes + pkt.data.len() > HELD_BYTES_MAX {
            self.counters.drop(DropReason::JoinHeldFull);
        } else {
            if syn {
                j.held_syns.insert(key);
            }
            j.held_bytes += pkt.data.len();
            j.held.push_back(pkt);
            self.counters.held_for_join += 1;
        }
        self.on_conn(now, key, |c, ctx| c.pause_ack(ctx));
    }

    /// When the joins next need the router.
    pub(super) fn join_due(&self) -> Option<Instant> {
        let retry = self.join_retry.values().map(|r| r.0).min();
        self.joins
            .iter()
            .map(|j| j.next.min(j.deadline))
            .chain(retry)
            .min()
    }

    /// Joins that failed and are due to be tried again.
    fn retry_joins(&mut self, now: Instant) {
        let due: Vec<(ServiceId, ReplicaId, u32)> = self
            .join_retry
            .iter()
            .filter(|(_, r)| r.0 <= now)
            .map(|(&(s, i), r)| (s, i, r.1))
            .collect();
        for (svc, r, tries) in due {
            // Held back until the attempt ends (it re-arms on failure).
            self.join_retry
                .insert((svc, r), (Instant::from_micros(u64::MAX), tries));
            let s = &self.config.services[svc.0];
            let (name, addr) = (s.name.clone(), s.replicas[r.0]);
            let res = if matches!(self.health[svc.0][r.0], Member::Down { .. }) {
                self.join_replica(now, &name, addr).map(|_| ())
            } else {
                Err(MembershipError::NoService(String::new()))
            };
            // Refused for good, unless the service was busy (the refusal
            // armed the next attempt itself).
            if res.is_err()
                && self
                    .join_retry
                    .get(&(svc, r))
                    .is_some_and(|x| x.0 == Instant::from_micros(u64::MAX))
            {
                self.join_retry.remove(&(svc, r));
            }
        }
    }

    /// Move every join on as far as it goes now.
    pub(super) fn join_tick(&mut self, now: Instant) {
        if !self.join_retry.is_empty() {
            self.retry_joins(now);
        }
        let ids: Vec<u64> = self.joins.iter().map(|j| j.id).collect();
        for id in ids {
            if let Err(why) = self.join_step(now, id) {
                self.end_join(now, id, Err(why));
            }
        }
    }

    fn join_step(&mut self, now: Instant, id: u64) -> Result<(), String> {
        let Some(j) = self.joins.iter().find(|j| j.id == id) else {
            return Ok(());
        };
        let (svc, joiner, phase) = (j.svc, j.joiner, j.phase);
        let addr = self.config.services[svc.0].replicas[joiner.0];
        if self.agents.as_ref().is_some_and(|a| !a.contains(&addr)) {
            return Err("its agent left the router".into());
        }
        if let Some(d) = j.donor {
            if phase != JoinPhase::Legs && !self.in_service(svc, d) {
                return Err(format!(
                    "the donor {} left the service",
                    self.config.services[svc.0].replicas[d.0]
                ));
            }
        }
        match phase {
            JoinPhase::Quiescing => {
                if now < j.next {
                    return Ok(());
                }
                let mut why = None;
                // The connection that is not at rest, and where it stands.
                let mut at: Option<ConnKey> = None;
                if self.order[svc.0].waiting.is_some() || !self.order[svc.0].held.is_empty() {
                    why = Some("the input order is being taken over");
                } else if self
                    .out
                    .agents
                    .iter()
                    .any(|m| matches!(m, ToAgents::Input(u) if self.by_vip.get(&(u.key.vip, u.key.vport)) == Some(&svc)))
                {
                    why = Some("input events not sent to the agents yet");
                }
                if why.is_none() {
                    let mut probe = Vec::new();
                    let mut stuck = Vec::new();
                    for key in self.conns_of(svc) {
                        match self.conns[&key].join_quiet() {
                            Quiet::Join | Quiet::Skip => {}
                            Quiet::Probe => probe.push(key),
                            Quiet::Wait { why: w, forever } => {
                                if forever {
                                    return Err(format!("connection {key}: {w}"));
                                }
                                // Nothing left to deliver, its FIN
                                // handshake standing still: ended, not
                                // waited for (it would hold every join off
                                // until the idle timeout).
                                if let Some(s) = self.conns[&key].stuck_closing(now) {
                                    stuck.push((key, s));
                                    continue;
                                }
                                why = Some(w);
                                at = Some(key);
                                break;
                            }
                        }
                    }
                    for (key, s) in stuck {
                        self.on_conn(now, key, |c, ctx| c.end_stuck(ctx, s));
                        self.after(now, key);
                    }
                    if why.is_none() && !probe.is_empty() {
                        why = Some("confirming that every replica's output reached the router");
                        for key in probe {
                            self.on_conn(now, key, |c, ctx| c.join_rest_probe(ctx));
                            self.after(now, key);
                        }
                    }
                }
                let j = self.joins.iter_mut().find(|j| j.id == id).expect("present");
                if let Some(w) = why {
                    if now >= j.deadline {
                        let place = at
                            .and_then(|k| Some((k, self.conns.get(&k)?)))
                            .map(|(k, c)| {
                                let addr = |r: ReplicaId| self.config.services[svc.0].replicas[r.0];
                                format!(" (connection {k}: {})", c.rest_detail(now, addr))
                            })
                            .unwrap_or_default();
                        return Err(format!(
                            "the service did not come to rest in {} ms: {w}{place}",
                            JOIN_QUIET_MAX.as_millis()
                        ));
                    }
                    j.why = w;
                    j.next = now + JOIN_CHECK;
                    return Ok(());
                }
                j.phase = if j.live {
                    JoinPhase::Point
                } else {
                    JoinPhase::State
                };
                j.seq = self.order[svc.0].seq;
                j.deadline = now + JOIN_STATE_MAX;
                j.next = j.deadline;
                let live = j.live;
                let (seq, started, donor) = (j.seq, j.started, j.donor.expect("chosen"));
                let s = &self.config.services[svc.0];
                self.out.agent(AgentMsg::Checkpoint {
                    join: id,
                    vip: s.vip,
                    ports: s.ports.clone(),
                    seq,
                    donor: s.replicas[donor.0],
                    joiner: addr,
                });
                self.out.event(Event::JoinCheckpoint {
                    service: s.name.clone(),
                    replica: addr,
                    donor: s.replicas[donor.0],
                    seq,
                    quiet_ms: u64::try_from(now.saturating_sub(started).as_millis())
                        .unwrap_or(u64::MAX),
                });
                if !live {
                    return Ok(());
                }
                // A live join: the joiner joins every open connection now,
                // at the checkpoint's point (its agent holds what its server
                // is given until the state is proven).
                let mut joined = Vec::new();
                for key in self.conns_of(svc) {
                    match self.conns[&key].join_quiet() {
                        Quiet::Skip => {}
                        Quiet::Join | Quiet::Probe => joined.push(key),
                        Quiet::Wait { why, .. } => {
                            return Err(format!(
                                "connection {key} stirred at the checkpoint: {why}"
                            ))
                        }
                    }
                }
                for &key in &joined {
                    self.on_conn(now, key, |c, ctx| c.join_leg(ctx, joiner, addr, true));
                    self.after(now, key);
                }
                let j = self.joins.iter_mut().find(|j| j.id == id).expect("present");
                j.conns = joined;
                j.legs_deadline = now + JOIN_LEGS_MAX;
                j.deadline = now + JOIN_POINT_MAX;
                j.next = now + JOIN_SYN_EVERY;
                self.join_step(now, id)
            }
            JoinPhase::Point => {
                let open = self.legs_answered(now, id)?;
                let Some(j) = self.joins.iter().find(|j| j.id == id) else {
                    return Ok(());
                };
                if !j.point {
                    if now >= j.deadline {
                        return Err(format!(
                            "the donor did not fix its checkpoint within {} s",
                            JOIN_POINT_MAX.as_secs()
                        ));
                    }
                    return Ok(());
                }
                if !open {
                    return Ok(());
                }
                if !self.join_point_confirmed(now, id)? {
                    return Ok(());
                }
                // Every leg open, the point fixed and the output where the
                // joiner's legs begin: the input resumes.
                let j = self.joins.iter_mut().find(|j| j.id == id).expect("present");
                j.phase = JoinPhase::State;
                j.resumed = Some(now);
                j.deadline = now + JOIN_STATE_MAX;
                j.next = j.deadline;
                let held = core::mem::take(&mut j.held);
                j.held_bytes = 0;
                j.held_syns.clear();
                let (connections, started) = (j.conns.len(), j.started);
                let s = &self.config.services[svc.0];
                self.out.event(Event::JoinResumed {
                    service: s.name.clone(),
                    replica: addr,
                    join: id,
                    connections,
                    pause_ms: u64::try_from(now.saturating_sub(started).as_millis())
                        .unwrap_or(u64::MAX),
                });
                self.resume_input(now, svc, held);
                // The proofs may be in already (a quick restore while the
                // legs were being opened): judge them now.
                self.join_step(now, id)
            }
            JoinPhase::State if j.live => {
                for key in self.conns_of(svc) {
                    if let Some(reason) = self.conns[&key].held_lost(joiner) {
                        return Err(format!(
                            "the joiner was taken out of connection {key} ({reason:?}) before its state was proven: its server would miss that input"
                        ));
                    }
                }
                if j.proven(now)? {
                    self.end_join(now, id, Ok(()));
                }
                Ok(())
            }
            JoinPhase::State => {
                if !j.proven(now)? {
                    return Ok(());
                }
                // Proven. The rest the service showed before the checkpoint
                // is confirmed once more, with answers to probes sent from
                // now: output a server wrote after its replica answered the
                // rest probe (from input it had read, held back by a full
                // send buffer) may have been on its way, and the joiner's
                // legs are placed where the group's output ends.
                let keys = self.conns_of(svc);
                let confirmed =
                    self.rest_confirmed(now, id, &keys, "the proof", |key, c| {
                        match c.join_quiet() {
                            Quiet::Skip | Quiet::Join => Ok(true),
                            Quiet::Probe => Ok(false),
                            Quiet::Wait { why, .. } => {
                                Err(format!("connection {key} stirred during the pause: {why}"))
                            }
                        }
                    })?;
                if !confirmed {
                    return Ok(());
                }
                let joined: Vec<ConnKey> = keys
                    .into_iter()
                    .filter(|k| {
                        self.conns
                            .get(k)
                            .is_some_and(|c| c.join_quiet() == Quiet::Join)
                    })
                    .collect();
                for &key in &joined {
                    self.on_conn(now, key, |c, ctx| c.join_leg(ctx, joiner, addr, false));
                    self.after(now, key);
                }
                let j = self.joins.iter_mut().find(|j| j.id == id).expect("present");
                j.conns = joined;
                j.phase = JoinPhase::Legs;
                j.deadline = now + JOIN_LEGS_MAX;
                j.legs_deadline = j.deadline;
                j.next = now + JOIN_SYN_EVERY;
                self.join_step(now, id)
            }
            JoinPhase::Legs => {
                if self.legs_answered(now, id)? {
                    self.end_join(now, id, Ok(()));
                }
                Ok(())
            }
        }
    }

    /// The join ends: the joiner serves (`Ok`) or stays out (`Err`); the
    /// service's input resumes, the held segments first, in their order.
    pub(super) fn end_join(&mut self, now: Instant, id: u64, result: Result<(), String>) {
        let Some(i) = self.joins.iter().position(|j| j.id == id) else {
            return;
        };
        let j = self.joins.remove(i);
        let s = &self.config.services[j.svc.0];
        let (name, addr) = (s.name.clone(), s.replicas[j.joiner.0]);
        let donor = j.donor.map(|d| s.replicas[d.0]);
        let ms =
            |t: Instant| u64::try_from(t.saturating_sub(j.started).as_millis()).unwrap_or(u64::MAX);
        let pause_ms = ms(j.resumed.unwrap_or(now));
        let join_ms = ms(now);
        let ok = result.is_ok();
        match result {
            Ok(()) => {
                self.join_retry.remove(&(j.svc, j.joiner));
                self.health[j.svc.0][j.joiner.0] = Member::Serving;
                self.readmitted.insert((j.svc, j.joiner));
                let mut connections = j.conns.len();
                if j.live {
                    connections = 0;
                    for key in self.conns_of(j.svc) {
                        if let Some(c) = self.conns.get_mut(&key) {
                            c.release_held(j.joiner, now);
                            connections += usize::from(c.live_leg_at(addr));
                        }
                    }
                }
                self.out.event(Event::Joined {
                    service: name,
                    replica: addr,
                    seq: j.seq,
                    digest: j.donor_digest.clone().unwrap_or_default(),
                    connections,
                    pause_ms,
                    join_ms,
                });
            }
            Err(reason) => {
                let slot = (j.svc, j.joiner);
                let tries = self.join_retry.get(&slot).map_or(1, |r| r.1 + 1);
                let retry = (tries < JOIN_ATTEMPTS).then(|| JOIN_RETRY_FIRST * (1 << (tries - 1)));
                match retry {
                    Some(d) => {
                        self.join_retry.insert(slot, (now + d, tries));
                    }
                    None => {
                        self.join_retry.remove(&slot);
                    }
                }
                let legs = if j.live {
                    // Its held legs of connections opened since, too.
                    self.conns_of(j.svc)
                } else {
                    j.conns.clone()
                };
                for key in legs {
                    self.on_conn(now, key, |c, ctx| c.unjoin(ctx, j.joiner));
                    self.after(now, key);
                }
                if self.health[j.svc.0][j.joiner.0] == (Member::Joining { since: j.started }) {
                    self.health[j.svc.0][j.joiner.0] = Member::Down {
                        reason: EvictReason::JoinFailed,
                        since: now,
                    };
                }
                // A joiner that took the state (or refused it, or joined
                // connections) may hold one that is not the group's: only
                // a fresh server can try again.
                let stale = (j.joiner_touched
                    || j.phase == JoinPhase::Legs
                    || (j.live && j.phase != JoinPhase::Quiescing))
                    .then(|| self.stale_in(addr))
                    .filter(|s| !s.is_empty());
                let why = format!("its join to {name} failed ({reason})");
                self.out.event(Event::JoinFailed {
                    service: name,
                    replica: addr,
                    reason,
                    pause_ms,
                    retry_in_ms: retry.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                });
                if let Some(services) = stale {
                    self.restart_stale(addr, &services, &why);
                }
            }
        }
        let mut replicas = vec![addr];
        replicas.extend(donor);
        self.out.agent(AgentMsg::JoinEnded {
            join: id,
            ok,
            replicas,
        });
        self.announce_out_of_service();
        if j.resumed.is_none() {
            self.resume_input(now, j.svc, j.held);
        }
    }

    /// The service's input resumes: the clients get their window back and
    /// the held segments go on, in their order.
    fn resume_input(&mut self, now: Instant, svc: ServiceId, held: VecDeque<Packet>) {
        for key in self.conns_of(svc) {
            self.on_conn(now, key, |c, ctx| c.set_paused(ctx, false));
            self.after(now, key);
        }
        let keys = self.conns_of(svc);
        for &key in &keys {
            if let Some(c) = self.conns.get_mut(&key) {
                c.set_releasing(true);
            }
        }
        for p in held {
            self.handle_packet(now, p);
        }
        for key in keys {
            if let Some(c) = self.conns.get_mut(&key) {
                c.set_releasing(false);
            }
        }
    }

    /// A live join whose donor fixed its checkpoint, every leg open:
    /// before the input resumes, every connection's output must still end
    /// where the joiner's leg begins, as probes sent from now confirm
    /// ([`Conn::join_point_holds`]). Output a server wrote after its
    /// replica answered the rest probe may have been on its way when the
    /// legs were placed; had it left the donor's server before the
    /// checkpoint, the joiner would never send it and its output would be
    /// placed short of the group's: the join fails (tried again later)
    /// rather than admit it. `Ok(true)`: confirmed.
    fn join_point_confirmed(&mut self, now: Instant, id: u64) -> Result<bool, String> {
        let Some(j) = self.joins.iter().find(|j| j.id == id) else {
            return Ok(false);
        };
        let (joiner, conns) = (j.joiner, j.conns.clone());
        self.rest_confirmed(now, id, &conns, "the checkpoint", |key, c| {
            c.join_point_holds(joiner).map_err(|why| {
                format!(
                    "connection {key}: {why} after the service came to rest (output its servers wrote after answering the rest probe)"
                )
            })
        })
    }

    /// Where the output of the connections `keys` ends, asked once more
    /// (both joins: after the paused one's proof, after the live one's
    /// checkpoint). The first call asks every connection again and starts
    /// the clock (`Join::confirm`); `judge` says of each whether it has
    /// confirmed (`Ok(true)`), must answer a probe still (`Ok(false)`), or
    /// fails the join (`Err`). The ones to answer are probed and polled
    /// again after `JOIN_CHECK`; the join fails if they have not answered
    /// within `JOIN_QUIET_MAX` of `since`. `Ok(true)` once every one has
    /// confirmed; a connection gone from the table counts as confirmed.
    fn rest_confirmed(
        &mut self,
        now: Instant,
        id: u64,
        keys: &[ConnKey],
        since: &str,
        judge: impl Fn(&ConnKey, &Conn) -> Result<bool, String>,
    ) -> Result<bool, String> {
        let Some(j) = self.joins.iter_mut().find(|j| j.id == id) else {
            return Ok(false);
        };
        let started = match j.confirm {
            Some(t) => t,
            None => {
                j.confirm = Some(now);
                for key in keys {
                    if let Some(c) = self.conns.get_mut(key) {
                        c.ask_rest_again();
                    }
                }
                now
            }
        };
        let mut pending = Vec::new();
        for key in keys {
            if let Some(c) = self.conns.get(key) {
                if !judge(key, c)? {
                    pending.push(*key);
                }
            }
        }
        if pending.is_empty() {
            return Ok(true);
        }
        if now >= started + JOIN_QUIET_MAX {
            return Err(format!(
                "{} connection(s) did not confirm where their output ends within {} ms of {since}",
                pending.len(),
                JOIN_QUIET_MAX.as_millis()
            ));
        }
        for key in pending {
            self.on_conn(now, key, |c, ctx| c.join_rest_probe(ctx));
            self.after(now, key);
        }
        let j = self.joins.iter_mut().find(|j| j.id == id).expect("present");
        j.next = now + JOIN_CHECK;
        Ok(false)
    }

    /// A live join's legs (`JoinPhase::Point`): a refused or lost one
    /// fails the join; unanswered SYNs are repeated until
    /// `legs_deadline`. `true` once every one is open.
    fn legs_answered(&mut self, now: Instant, id: u64) -> Result<bool, String> {
        let Some(j) = self.joins.iter().find(|j| j.id == id) else {
            return Ok(false);
        };
        let joiner = j.joiner;
        let mut waiting = 0;
        for key in &j.conns {
            match self.conns.get(key).map(|c| c.join_state(joiner)) {
                None | Some(Some(true)) => {}
                Some(Some(false)) => waiting += 1,
                Some(None) => {
                    let c = &self.conns[key];
                    if c.join_quiet() != Quiet::Skip {
                        return Err(match c.join_refusal() {
                            Some(why) => format!("connection {key} refused the joiner: {why}"),
                            None => format!("the joiner left connection {key}"),
                        });
                    }
                }
            }
        }
        let j = self.joins.iter_mut().find(|j| j.id == id).expect("present");
        if waiting == 0 {
            j.next = j.deadline;
            return Ok(true);
        }
        if now >= j.legs_deadline {
            return Err(format!(
                "the joiner did not answer the SYNs of {waiting} connection(s) in {} ms",
                JOIN_LEGS_MAX.as_millis()
            ));
        }
        if now >= j.next {
            j.next = (now + JOIN_SYN_EVERY).min(j.legs_deadline);
            for key in j.conns.clone() {
                self.on_conn(now, key, |c, ctx| c.join_syn_again(ctx));
            }
        }
        Ok(false)
    }
}
