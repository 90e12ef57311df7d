//! The router's end of the agents' control channel: a TCP listener, one
//! thread per agent connection running [`ftnet_control::RouterSession`].
//!
//! - An agent that proves the shared secret registers its replica; one that
//!   does not is refused, and the router logs who and why.
//! - An agent silent for `dead_after` means its host is lost: the replica is
//!   marked down and taken out of every connection at once (active failure
//!   detection; idle connections included, which passive detection cannot
//!   judge).
//! - Every connection that reaches ESTABLISHED is recorded at the agents of
//!   its replicas ([`ftnet_control::ConnRecord`]), and forgotten when the
//!   router forgets it, for a router that has to rebuild its table.

use crate::config::ControlConfig;
use crate::sys;
use anyhow::Context;
use ftnet_control::{Decoder, Heartbeats, Msg, RouterEvent, RouterSession, Sealer};
use ftnet_core::{Adopted, AgentMsg, ConnKey, ConnRecord, OrderReport, OutOfService};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{self, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tracing::{debug, error, info, warn};

/// Records queued per agent (a few tens of MB at most): an agent that
/// cannot keep up must not slow the data plane down. One that falls this
/// far behind has missed input for good: its session ends and its replica
/// leaves the group (a record is never dropped silently).
const QUEUE: usize = 1 << 18;

/// The sending end of an agent's record queue: bounded at `cap` messages,
/// and allocated as it fills. (A `sync_channel` of [`QUEUE`] slots
/// allocated and wrote 23 MB at every registration: on a loaded router
/// host that held a registering agent, and the takeover with it, for
/// 170-400 ms.)
///
/// The data plane *stages* what it routes (`stage`) and hands each
/// agent's staged records over at once (`flush`, at the end of each drain
/// of the core): one wake-up of the agent's writer thread per drain
/// instead of one per record (under a sequenced Redis load, handing
/// records over one at a time cost the router about as much CPU as its
/// data plane, in thread switches).
#[derive(Clone)]
struct AgentTx {
    tx: mpsc::Sender<Vec<Msg>>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    staged: Arc<Mutex<Vec<Msg>>>,
    cap: usize,
}

/// The receiving end of an agent's record queue (see [`AgentTx`]).
struct AgentRx {
    rx: mpsc::Receiver<Vec<Msg>>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

/// A record queue to one agent holding at most `cap` messages.
fn agent_queue(cap: usize) -> (AgentTx, AgentRx) {
    let (tx, rx) = mpsc::channel();
    let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    (
        AgentTx {
            tx,
            queued: queued.clone(),
            staged: Arc::default(),
            cap,
        },
        AgentRx { rx, queued },
    )
}

impl AgentTx {
    /// Count one more message against the cap (`false`: `cap` messages
    /// wait already).
    fn reserve(&self) -> bool {
        use std::sync::atomic::Ordering::AcqRel;
        if self.queued.fetch_add(1, AcqRel) >= self.cap {
            self.queued.fetch_sub(1, AcqRel);
            return false;
        }
        true
    }

    fn staged(&self) -> std::sync::MutexGuard<'_, Vec<Msg>> {
        self.staged.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hand `batch` to the writer; back if it is gone.
    fn hand_over(&self, batch: Vec<Msg>) -> Result<(), Vec<Msg>> {
        self.tx.send(batch).map_err(|e| {
            self.queued
                .fetch_sub(e.0.len(), std::sync::atomic::Ordering::AcqRel);
            e.0
        })
    }

    /// Queue `m` now, after whatever was staged, unless `cap` messages
    /// wait already (`Full`) or the writer is gone (`Disconnected`).
    fn try_send(&self, m: Msg) -> Result<(), TrySendError<Msg>> {
        if !self.reserve() {
            return Err(TrySendError::Full(m));
        }
        let mut batch = std::mem::take(&mut *self.staged());
        batch.push(m);
        self.hand_over(batch)
            .map_err(|mut b| TrySendError::Disconnected(b.pop().unwrap_or(Msg::Reconnecting {})))
    }

    /// Stage `m` for the next [`AgentTx::flush`], unless `cap` messages
    /// wait already (`false`). Counted against the cap at once.
    fn stage(&self, m: Msg) -> bool {
        if !self.reserve() {
            return false;
        }
        self.staged().push(m);
        true
    }

    /// Hand what was staged to the writer.
    fn flush(&self) {
        let batch = std::mem::take(&mut *self.staged());
        if !batch.is_empty() {
            // A writer that is gone ended its session, which takes the
            // replica out; what it would have sent is moot.
            let _ = self.hand_over(batch);
        }
    }
}

impl AgentRx {
    fn took<E>(&self, r: Result<Vec<Msg>, E>) -> Result<Vec<Msg>, E> {
        if let Ok(b) = &r {
            self.queued
                .fetch_sub(b.len(), std::sync::atomic::Ordering::AcqRel);
        }
        r
    }

    fn recv_timeout(&self, d: Duration) -> Result<Vec<Msg>, mpsc::RecvTimeoutError> {
        self.took(self.rx.recv_timeout(d))
    }

    fn try_recv(&self) -> Result<Vec<Msg>, mpsc::TryRecvError> {
        self.took(self.rx.try_recv())
    }

    #[cfg(test)]
    fn try_iter(&self) -> impl Iterator<Item = Msg> + '_ {
        std::iter::from_fn(|| self.try_recv().ok()).flatten()
    }
}

/// How long one write to an agent may block before the agent is given up
/// (a truncated frame cannot be continued: the session ends, the replica
/// leaves). Longer than a scheduling hiccup of a loaded host.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the control plane needs from the router process.
pub trait RouterHandle: Send + Sync + 'static {
    /// Mark a replica's host lost; returns the services it was marked down in.
    fn host_lost(&self, addr: Ipv4Addr) -> usize;
    /// A replica's server can no longer follow the input order (its agent
    /// said so, or lost records): mark it down and take it out of every
    /// connection (see `Router::replica_failed`); returns the services it
    /// was marked down in.
    fn replica_failed(&self, addr: Ipv4Addr) -> usize;
    /// Every agent fell silent together: the router holds its verdicts and
    /// resets until one registers (see `Router::agents_all_silent`).
    fn agents_all_silent(&self);
    /// A replica's agent registered; returns the services in which the
    /// replica stays out of service (see `Router::agent_registered`).
    fn agent_registered(&self, addr: Ipv4Addr) -> Vec<String>;
    /// Replicas an agent reports out of service (see `Router::reported_down`);
    /// returns how many were taken out.
    fn reported_down(&self, reporter: Ipv4Addr, down: &[OutOfService]) -> usize;
    /// Every replica out of service now (told to an agent that registers).
    fn out_of_service(&self) -> Vec<OutOfService>;
    /// Rebuild connections from an agent's records (see `Router::adopt`).
    fn adopt(&self, from: Ipv4Addr, records: &[ConnRecord]) -> Vec<Adopted>;
    /// The agents stored these connections' records, or went
    /// (`Router::record_stored`, `Router::record_heard`,
    /// `Router::record_unstored`): held SYN-ACKs may go out.
    fn records_committed(&self, c: &Commits);
    /// Whether an agent's report of the input order says another router
    /// served since this one numbered it (see `Router::superseded`); if so
    /// the router starts over (`Router::start_over`) and says why.
    fn superseded(&self, replica: Ipv4Addr, reports: &[OrderReport]) -> Option<String>;
    /// Where the input order stands at a replica's agent (see
    /// `Router::order_report`); `then` runs before the router's lock is
    /// released (the agent starts getting input events there).
    fn order_report(&self, replica: Ipv4Addr, reports: &[OrderReport], then: &mut dyn FnMut());
    /// A join's state report from its donor (`donor`) or joiner, or either
    /// one's failure (see `Router::checkpoint_taken`).
    fn join_report(&self, join: u64, donor: bool, result: Result<String, String>);
    /// A join's donor fixed its checkpoint (see `Router::checkpoint_point`).
    fn join_point(&self, join: u64);
    /// The donor and joiner of a join whose state is on its way.
    fn join_parties(&self, join: u64) -> Option<(Ipv4Addr, Ipv4Addr)>;
    /// A server of `addr` follows the order through its agent again: it
    /// joins where it is down (see `Router::joinable`).
    fn try_rejoin(&self, addr: Ipv4Addr);
    /// The services in which a server of `addr` that follows the order is
    /// stale (see `Router::stale_in`).
    fn stale_in(&self, addr: Ipv4Addr) -> Vec<String>;
    /// Whether servers of `addr` follow the order, as its agent last said
    /// (see `Router::set_follows_order`).
    fn set_follows_order(&self, addr: Ipv4Addr, yes: bool);
}

/// The agents currently registered, by replica address.
#[derive(Default)]
pub struct Registry {
    agents: Mutex<HashMap<Ipv4Addr, Agent>>,
    dropped_records: std::sync::atomic::AtomicU64,
    /// Frames that failed their tag after the handshake (forged, replayed,
    /// cut): each ended its session.
    rejected_frames: std::sync::atomic::AtomicU64,
    /// Agents whose queue overflowed (replica → session): they missed a
    /// record; their session thread ends them and takes the replica out.
    overflowed: Mutex<HashMap<Ipv4Addr, u64>>,
    /// Output commit: connections whose SYN-ACK waits, and the agents whose
    /// `Stored` is still missing. Never locked while taking the router's
    /// lock (it is taken under it, in `route`).
    pending: Mutex<HashMap<ConnKey, Pending>>,
    /// Replicas whose servers follow the input order (`ftnet run`), as
    /// their agents last said (`Shims`).
    ordered_servers: Mutex<HashMap<Ipv4Addr, u32>>,
    /// The control connections open, by where they come from.
    budget: Mutex<Budget>,
    /// Lines about peers refused before they registered.
    unproven_lines: Mutex<LineBudget>,
    /// Sessions to end at once: the router started over
    /// ([`Registry::end_sessions_but`]); each session's loop looks.
    ended: Mutex<HashSet<u64>>,
}

/// What [`Registry::route`] did with a core message.
#[derive(Debug, PartialEq, Eq)]
pub enum Routed {
    /// Sent to the agents.
    Yes,
    /// A connection record that no agent can store (none registered and
    /// live for its replicas): its SYN-ACK need not wait, unless the
    /// router is in doubt whether it still serves
    /// (`Router::record_unstored`).
    NoAgent(ConnKey),
}

/// A connection's record on its way to the agents: its SYN-ACK waits.
struct Pending {
    /// The agents that have not confirmed it yet.
    waiting: Vec<Ipv4Addr>,
    /// One agent confirmed it (a router taking over finds it there).
    heard: bool,
}

/// What the agents' answers (or their going) mean for held SYN-ACKs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Commits {
    /// Stored by every agent it went to (or by one, the rest gone).
    pub stored: Vec<ConnKey>,
    /// Stored by a first agent, others still to answer.
    pub heard: Vec<ConnKey>,
    /// Every agent it went to is gone, none stored it.
    pub unstored: Vec<ConnKey>,
}

impl Commits {
    /// Pass them to the router.
    fn apply(&self, router: &dyn RouterHandle) {
        if !(self.stored.is_empty() && self.heard.is_empty() && self.unstored.is_empty()) {
            router.records_committed(self);
        }
    }
}

struct Agent {
    host: String,
    peer: SocketAddr,
    since: std::time::Instant,
    /// When its session last heard from it: an agent heard within
    /// `dead_after` is alive, and nobody else may speak for its replica.
    last_heard: std::time::Instant,
    tx: AgentTx,
    /// Connection records the agent said it holds (from its heartbeats).
    records: u64,
    lost: Option<std::time::Instant>,
    /// Which connection thread owns this entry (a newer registration replaces it).
    session: u64,
    /// Its order report was taken: it gets input events from then on
    /// (what was numbered before is replayed to it, in order).
    ordered: bool,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<Ipv4Addr, Agent>> {
        self.agents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// May a line about a peer refused before it registered be logged now
    /// (a flood of them must not flood the log)? If so, what to add to it:
    /// how many such lines were left out since the last one.
    fn unproven_line(&self) -> Option<String> {
        let more = self
            .unproven_lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .allow(std::time::Instant::now())?;
        Some(if more > 0 {
            format!(" ({more} more such line(s) left out before this one)")
        } else {
            String::new()
        })
    }

    fn budget(&self) -> MutexGuard<'_, Budget> {
        self.budget.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<ConnKey, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `replica`'s agent stored these records; returns the connections
    /// whose every agent has now confirmed (their SYN-ACKs may go), and
    /// those it is the first of several to confirm
    /// (`Router::record_heard`).
    pub fn stored(&self, replica: Ipv4Addr, keys: &[ConnKey]) -> Commits {
        let mut pending = self.pending();
        let mut c = Commits::default();
        for &key in keys {
            if let Some(p) = pending.get_mut(&key) {
                if !p.waiting.contains(&replica) {
                    continue;
                }
                p.waiting.retain(|a| *a != replica);
                if p.waiting.is_empty() {
                    pending.remove(&key);
                    c.stored.push(key);
                } else if !p.heard {
                    p.heard = true;
                    c.heard.push(key);
                }
            }
        }
        c
    }

    /// `replica`'s agent is gone (disconnected or its host lost): nobody
    /// waits for its confirmations. Returns the connections that waited
    /// for it alone: stored where another agent confirmed, else stored
    /// nowhere (`Router::record_unstored`).
    pub fn release(&self, replica: Ipv4Addr) -> Commits {
        let mut pending = self.pending();
        let mut c = Commits::default();
        pending.retain(|k, p| {
            p.waiting.retain(|a| *a != replica);
            if p.waiting.is_empty() {
                if p.heard {
                    c.stored.push(*k);
                } else {
                    c.unstored.push(*k);
                }
            }
            !p.waiting.is_empty()
        });
        c
    }

    /// Whether any of these replicas' servers follow the input order (their
    /// agents said so): such a service's state is in its servers, so a
    /// replica comes into it only by a join (state transfer, proven), and
    /// one drained from it leaves at once.
    pub fn follows_order(&self, replicas: &[Ipv4Addr]) -> bool {
        let m = self
            .ordered_servers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        replicas.iter().any(|r| m.get(r).is_some_and(|n| *n > 0))
    }

    /// Connections waiting for their records to be confirmed.
    pub fn pending_commits(&self) -> usize {
        self.pending().len()
    }

    /// Route a core message to the agents it is for (records, the
    /// sequencer's order, who is out of service).
    pub fn route(&self, ev: &AgentMsg) -> Routed {
        if let AgentMsg::Restart { replica, reason } = ev {
            let n = self
                .ordered_servers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(replica)
                .copied()
                .unwrap_or(0);
            // Also with no server following the order there: one whose
            // shim lost the order runs on in the kernel's order, stale,
            // and only a fresh one can join (the agent knows them).
            warn!(%replica, "{reason}: its agent is told to end its servers ({n} following the order, and any that lost it) (with --end-stale-servers it does, and their supervisor starts them afresh); a fresh server joins with the group's state");
        }
        let msg = ftnet_control::to_agent(ev);
        let Some(replicas) = ftnet_control::addressees(ev) else {
            // Every agent keeps the whole set, for the next router.
            for a in self.lock().values().filter(|a| a.lost.is_none()) {
                if !a.tx.stage(msg.clone()) {
                    self.dropped_records
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            return Routed::Yes;
        };
        let input = matches!(ev, AgentMsg::Input { .. });
        let mut agents = self.lock();
        // Output commit: whose confirmation the SYN-ACK waits for. The
        // pending lock is held until that is noted, so an answer that comes
        // back before this returns waits for it.
        let pending = match ev {
            AgentMsg::Established { record } => Some((record.key, self.pending())),
            AgentMsg::Forgotten { key, .. } => {
                self.pending().remove(key);
                None
            }
            _ => None,
        };
        let mut waiting = Vec::new();
        for a in replicas {
            if let Some(agent) = agents
                .get(&a)
                .filter(|x| x.lost.is_none() && (x.ordered || !input))
            {
                match agent.tx.stage(msg.clone()) {
                    true => waiting.push(a),
                    false => {
                        self.dropped_records
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        // It missed a record: it gets none after this gap
                        // (its session thread takes the replica out), but
                        // what came before it.
                        agent.tx.flush();
                        let session = agent.session;
                        agents.remove(&a);
                        self.overflowed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(a, session);
                    }
                }
            }
        }
        match pending {
            Some((key, mut p)) => {
                if waiting.is_empty() {
                    p.remove(&key);
                    Routed::NoAgent(key)
                } else {
                    p.insert(
                        key,
                        Pending {
                            waiting,
                            heard: false,
                        },
                    );
                    Routed::Yes
                }
            }
            None => Routed::Yes,
        }
    }

    /// Hand every agent what [`Registry::route`] staged for it (one
    /// wake-up of its writer per drain of the core). Called before the
    /// router's lock is let go, so that records reach each agent in the
    /// order the core numbered them.
    pub fn flush(&self) {
        for a in self.lock().values() {
            a.tx.flush();
        }
    }

    /// One message to one registered agent (a join's state on its way);
    /// false if it is not there or its queue is full.
    pub fn send_to(&self, replica: Ipv4Addr, msg: Msg) -> bool {
        self.lock()
            .get(&replica)
            .filter(|a| a.lost.is_none())
            .is_some_and(|a| a.tx.try_send(msg).is_ok())
    }

    /// The router started over (it was superseded): every agent but the
    /// one of session `keep` leaves the registry, and its session ends, so
    /// that it registers again and hands over its records. Commits that
    /// waited for the old table's records are dropped with it.
    pub fn end_sessions_but(&self, keep: u64) {
        let ids: Vec<u64> = {
            let mut agents = self.lock();
            let ids = agents
                .values()
                .filter(|a| a.session != keep)
                .map(|a| a.session)
                .collect();
            agents.retain(|_, a| a.session == keep);
            ids
        };
        self.ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ids);
        self.pending().clear();
    }

    /// Is session `id` to end ([`Registry::end_sessions_but`])?
    fn take_ended(&self, id: u64) -> bool {
        self.ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
    }

    /// Did this session's queue overflow (it missed a record)?
    fn overflowed(&self, replica: Ipv4Addr, session: u64) -> bool {
        let mut o = self.overflowed.lock().unwrap_or_else(|p| p.into_inner());
        if o.get(&replica) == Some(&session) {
            o.remove(&replica);
            return true;
        }
        false
    }

    /// For the status snapshot.
    pub fn status(&self) -> serde_json::Value {
        let agents = self.lock();
        let mut list: Vec<_> = agents
            .iter()
            .map(|(addr, a)| {
                serde_json::json!({
                    "replica": addr,
                    "host": a.host,
                    "peer": a.peer.to_string(),
                    "state": if a.lost.is_some() { "lost" } else { "registered" },
                    "for_s": (a.lost.unwrap_or_else(std::time::Instant::now) - a.since).as_secs_f64(),
                    "records": a.records,
                })
            })
            .collect();
        list.sort_by_key(|v| v["replica"].as_str().map(str::to_string));
        drop(agents);
        let b = self.budget();
        serde_json::json!({
            "connections": b.open(),
            "refused_connections": b.refused,
            "refused_full": b.refused_full,
            "refused_unknown": b.refused_unknown,
            "refused_per_address": b.refused_replica,
            "agents": list,
            "dropped_records": self.dropped_records.load(std::sync::atomic::Ordering::Relaxed),
            "rejected_frames": self.rejected_frames.load(std::sync::atomic::Ordering::Relaxed),
            "pending_commits": self.pending_commits(),
        })
    }
}

/// Why the peer at `peer` (control session `session`) may not speak for
/// `replica` now, if it may not. An agent speaks for its replica from that
/// replica's own address: whoever holds the shared secret elsewhere (a
/// client, another replica's host) cannot pose as it, make it look alive,
/// or have it marked down by falling silent. And a replica whose agent is
/// alive keeps it: a second one that proved the secret (`proven`; an
/// unproven peer is not told) is refused until the first closes its
/// connection or has not been heard for as long as an agent waits for its
/// router before it gives the session up and connects anew
/// ([`ftnet_control::router_silence_ms`]: three heartbeats, at least
/// 150 ms). A live agent is heard every heartbeat; one silent that long has
/// given this router up, or is cut off, and the one connecting from its
/// replica's address with the secret is that agent again. (With
/// `dead_after` instead, an agent that had moved to a standby and came
/// back to this router, which still held its old session because the
/// agent's goodbye never reached it, was refused for up to `dead_after`
/// while this router served its replica's connections without records.)
fn admission(
    known: &HashSet<Ipv4Addr>,
    agents: &HashMap<Ipv4Addr, Agent>,
    replica: Ipv4Addr,
    peer: SocketAddr,
    session: u64,
    hb: &Heartbeats,
    proven: bool,
) -> Result<(), String> {
    if !known.contains(&replica) {
        return Err(format!("replica {replica} is not in the router's configuration — add it to a [[service]] or fix the agent's --replica"));
    }
    if v4(peer.ip()) != Some(replica) {
        return Err(format!("an agent for replica {replica} must connect from that address, this one connects from {} — run it on the replica's host, routed to the router through the replica's own interface", peer.ip()));
    }
    let live_for = Duration::from_millis(ftnet_control::router_silence_ms(
        crate::sys::ms(hb.every),
        crate::sys::ms(hb.dead_after),
    ));
    if let Some(a) = agents.get(&replica).filter(|_| proven) {
        let heard = a.last_heard.elapsed();
        if a.session != session && a.lost.is_none() && heard < live_for {
            return Err(format!(
                "replica {replica} already has a live agent (host {:?} at {}, heard {} ms ago) — a second one is refused until that one closes or is silent for {} ms",
                a.host,
                a.peer,
                heard.as_millis(),
                live_for.as_millis()
            ));
        }
    }
    Ok(())
}

/// Start listening; agents are served on threads of their own.
pub fn start(
    cfg: &ControlConfig,
    known: Arc<std::sync::RwLock<HashSet<Ipv4Addr>>>,
    router: Arc<dyn RouterHandle>,
) -> anyhow::Result<Arc<Registry>> {
    let listener = TcpListener::bind(cfg.listen)
        .with_context(|| format!("[control] listen {}: cannot bind", cfg.listen))?;
    info!(listen = %cfg.listen, heartbeat_ms = crate::sys::ms(cfg.heartbeat), dead_after_ms = crate::sys::ms(cfg.dead_after), "control channel listening for agents");
    let registry = Arc::new(Registry::default());
    let reg = registry.clone();
    let rt = cfg.realtime_priority;
    let (secret, hb) = (
        cfg.secret.clone(),
        Heartbeats {
            every: cfg.heartbeat,
            dead_after: cfg.dead_after,
            tick_ms: u64::try_from(cfg.tick.as_millis()).unwrap_or(0),
        },
    );
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            let mut session = 0u64;
            for conn in listener.incoming() {
                let Ok(stream) = conn else { continue };
                let from = stream.peer_addr().ok().and_then(|p| v4(p.ip()));
                let taken = reg
                    .budget()
                    .take(from, &known.read().unwrap_or_else(|p| p.into_inner()));
                let slot = match taken {
                    Ok(slot) => slot,
                    Err((refused, n)) => {
                        // A flood of connections costs no thread beyond its
                        // budget; one line per power of two of each kind.
                        if n.is_power_of_two() {
                            let peer = stream
                                .peer_addr()
                                .map(|p| p.to_string())
                                .unwrap_or_default();
                            warn!(refused = n, peer = %peer, "control: {}; closing new ones at once ({n} so far, the last from {peer})", refused.why());
                        }
                        drop(stream);
                        continue;
                    }
                };
                let slot = SlotGuard {
                    reg: reg.clone(),
                    slot,
                };
                session += 1;
                let (reg, secret, known, router) =
                    (reg.clone(), secret.clone(), known.clone(), router.clone());
                let id = session;
                // Dropped with the closure (the slot is given back) whether
                // the thread ran, panicked or never started.
                let _ = std::thread::Builder::new()
                    .name(format!("agent{id}"))
                    .spawn(move || {
                        let _slot = slot;
                        if let Err(e) =
                            serve(stream, id, &secret, hb, rt, &known, &reg, router.as_ref())
                        {
                            if let Some(more) = reg.unproven_line() {
                                warn!("control connection {id}: {e:#}{more}");
                            }
                        }
                    });
            }
        })
        .context("starting the control thread")?;
    Ok(registry)
}

/// Control connections served at once (agents, and peers still proving
/// the secret, which get at most `dead_after` or 1 s to do so).
const MAX_CONTROL_CONNECTIONS: usize = 256;

/// Of those, connections from addresses that are no replica's: no agent may
/// speak from there (it is refused once it proved the secret), so a few
/// suffice for a misrouted agent to hear why, and a flood from anywhere
/// else cannot take the places of the replicas' agents.
const MAX_UNKNOWN_CONNECTIONS: usize = 64;

/// Connections from one replica's address at once: its agent, the same agent
/// reconnecting before the router noticed the old connection gone, a second
/// agent to be refused with the reason.
const MAX_PER_REPLICA_ADDRESS: usize = 4;

/// The peer's IPv4 address (an IPv4-mapped IPv6 one included).
fn v4(ip: std::net::IpAddr) -> Option<Ipv4Addr> {
    match ip {
        std::net::IpAddr::V4(a) => Some(a),
        std::net::IpAddr::V6(a) => a.to_ipv4_mapped(),
    }
}

/// Whose place a control connection takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// From an address that is no replica's.
    Unknown,
    /// From this replica's address.
    Replica(Ipv4Addr),
}

/// Why a control connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// [`MAX_CONTROL_CONNECTIONS`] open.
    Full,
    /// [`MAX_UNKNOWN_CONNECTIONS`] open from addresses that are no replica's.
    Unknown,
    /// [`MAX_PER_REPLICA_ADDRESS`] open from this replica's address.
    Replica(Ipv4Addr),
}

impl Refused {
    fn why(self) -> String {
        match self {
            Refused::Full => format!("{MAX_CONTROL_CONNECTIONS} connections open already"),
            Refused::Unknown => format!("{MAX_UNKNOWN_CONNECTIONS} connections from addresses that are no replica's open already (an agent connects from its replica's address)"),
            Refused::Replica(a) => format!("{MAX_PER_REPLICA_ADDRESS} connections from replica {a}'s address open already"),
        }
    }
}

/// The control connections open, by where they come from: peers from
/// addresses that are no replica's share a small budget, each replica's
/// address has one of its own, so that no flood from elsewhere keeps a
/// replica's agent out (one that reconnects gets in at once).
#[derive(Default)]
struct Budget {
    unknown: usize,
    replicas: HashMap<Ipv4Addr, usize>,
    /// Connections closed at once, in all and by kind.
    refused: u64,
    refused_full: u64,
    refused_unknown: u64,
    refused_replica: u64,
}

impl Budget {
    fn open(&self) -> usize {
        self.unknown + self.replicas.values().sum::<usize>()
    }

    /// A place for a connection from `from`, or why there is none and how
    /// many of that kind were refused so far.
    fn take(
        &mut self,
        from: Option<Ipv4Addr>,
        known: &HashSet<Ipv4Addr>,
    ) -> Result<Slot, (Refused, u64)> {
        let slot = match from {
            Some(a) if known.contains(&a) => Slot::Replica(a),
            _ => Slot::Unknown,
        };
        let refused = if self.open() >= MAX_CONTROL_CONNECTIONS {
            Some((Refused::Full, &mut self.refused_full))
        } else {
            match slot {
                Slot::Unknown if self.unknown >= MAX_UNKNOWN_CONNECTIONS => {
                    Some((Refused::Unknown, &mut self.refused_unknown))
                }
                Slot::Replica(a)
                    if self.replicas.get(&a).copied().unwrap_or(0) >= MAX_PER_REPLICA_ADDRESS =>
                {
                    Some((Refused::Replica(a), &mut self.refused_replica))
                }
                _ => None,
            }
        };
        if let Some((why, n)) = refused {
            *n += 1;
            self.refused += 1;
            return Err((why, *n));
        }
        match slot {
            Slot::Unknown => self.unknown += 1,
            Slot::Replica(a) => *self.replicas.entry(a).or_default() += 1,
        }
        Ok(slot)
    }

    fn give_back(&mut self, slot: Slot) {
        match slot {
            Slot::Unknown => self.unknown = self.unknown.saturating_sub(1),
            Slot::Replica(a) => {
                if let Some(n) = self.replicas.get_mut(&a) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.replicas.remove(&a);
                    }
                }
            }
        }
    }
}

/// Lines about peers refused before they registered: a burst of
/// [`LINES_BURST`], then [`LINES_PER_S`] a second; the others are counted
/// and the next line says how many were left out.
const LINES_BURST: f64 = 20.0;
const LINES_PER_S: f64 = 5.0;

struct LineBudget {
    tokens: f64,
    at: Option<std::time::Instant>,
    left_out: u64,
}

impl Default for LineBudget {
    fn default() -> Self {
        LineBudget {
            tokens: LINES_BURST,
            at: None,
            left_out: 0,
        }
    }
}

impl LineBudget {
    /// `Some(lines left out since the last one)` if a line may go out now.
    fn allow(&mut self, now: std::time::Instant) -> Option<u64> {
        if let Some(at) = self.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * LINES_PER_S;
            self.tokens = (self.tokens + refill).min(LINES_BURST);
        }
        self.at = Some(now);
        if self.tokens < 1.0 {
            self.left_out += 1;
            return None;
        }
        self.tokens -= 1.0;
        Some(std::mem::take(&mut self.left_out))
    }
}

/// A connection's place, given back when its thread ends (or never starts).
struct SlotGuard {
    reg: Arc<Registry>,
    slot: Slot,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.reg.budget().give_back(self.slot);
    }
}

fn serve(
    mut stream: TcpStream,
    id: u64,
    secret: &[u8],
    hb: Heartbeats,
    rt: i32,
    known: &std::sync::RwLock<HashSet<Ipv4Addr>>,
    reg: &Registry,
    router: &dyn RouterHandle,
) -> anyhow::Result<()> {
    // However this session ends, an order to end it that it did not read
    // goes with it (`Registry::end_sessions_but`).
    let _ended = ForgetEnded(reg, id);
    let peer = stream.peer_addr()?;
    stream.set_nodelay(true)?;
    // Short reads so timers and queued records are served promptly.
    stream.set_read_timeout(Some(Duration::from_millis(10)))?;
    let origin = std::time::Instant::now();
    let now_ms = || crate::sys::ms(origin.elapsed());
    let nonce = sys::random_secret().context("reading a nonce from /dev/urandom")?;
    let mut s = RouterSession::new(secret, nonce, hb, now_ms());
    let mut dec = Decoder::default();
    let mut buf = [0u8; 4096];
    let mut out = Vec::new();
    let mut registered: Option<Ipv4Addr> = None;
    // Writes come from this thread (session messages) and from the record
    // writer (records as soon as the data plane queues them).
    let writer = Arc::new(Mutex::new(Out::new(stream.try_clone()?)));
    writer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .stream
        .set_write_timeout(Some(WRITE_TIMEOUT.max(hb.dead_after)))?;
    let done = Arc::new(WriterState::default());
    let _stop_writer = StopOnDrop(done.clone());
    // Servers on the replica host that follow the input order through this
    // agent (its `Shims` message): while any does, the agent's connection
    // ending means they lost the order.
    let mut shims = 0u32;
    // The agent said how many servers follow the order at least once in
    // this session: a later rise from 0 is a server (re)started while
    // registered, which may join; the first count is only where things
    // stand (a stale server registering after a takeover is not fresh).
    let mut shims_told = false;
    let mut stall = sys::StallWatch::new("router's session with an agent");
    loop {
        stall.lap("events");
        if reg.take_ended(id) {
            info!(%peer, "agent session ended: the router started over; the agent registers again and hands over its records");
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return Ok(());
        }
        if let Some(r) = registered {
            // Records this agent should have had and did not get: its
            // server can no longer follow the order.
            let broken = if reg.overflowed(r, id) {
                Some(format!(
                    "its record queue overflowed ({QUEUE} records waiting)"
                ))
            } else {
                done.failure()
            };
            if let Some(why) = broken {
                order_lost(
                    router,
                    r,
                    peer,
                    &format!("the router could not pass it every record: {why}"),
                );
                let _ = stream.shutdown(std::net::Shutdown::Both);
                forget(reg, r, id, router);
                // Removed from the registry already when its queue overflowed.
                release(reg, r, router);
                return Ok(());
            }
        }
        stall.mark("checks");
        let mut events = Vec::new();
        match stream.read(&mut buf) {
            Ok(0) => {
                // The agent closed the connection: a stopped agent, not a lost host
                // (a lost host cannot close anything). Its replica stays in service,
                // unless its server followed the order through this agent.
                if let Some(r) = registered {
                    if reg.take_ended(id) {
                        // Ended by a start-over while this thread read: what
                        // it knew is the stale router's (its verdict would
                        // take a healthy replica out of the fresh one).
                        info!(replica = %r, %peer, "agent session closed after the router started over; the agent registers again");
                        return Ok(());
                    }
                    if reg.lock().get(&r).is_some_and(|a| a.session != id) {
                        // The agent registered again on another session
                        // (it gave this router up while it did not run,
                        // or the router started over): it is heard there.
                        info!(replica = %r, %peer, "an earlier session of this agent closed; the agent is registered on a newer one");
                        return Ok(());
                    }
                    if shims > 0 {
                        order_lost(router, r, peer, &format!("its agent's connection closed while {shims} server(s) followed the order through it"));
                    } else {
                        info!(replica = %r, %peer, "agent disconnected; the replica stays in service (passive detection still applies)");
                    }
                    forget(reg, r, id, router);
                }
                return Ok(());
            }
            Ok(n) => dec.push(&buf[..n]),
            Err(e) if sys::is_transient(&e) => {}
            Err(e) => {
                // A reset or unreachable peer: treat like silence, let the timer decide.
                if registered.is_none() {
                    return Err(e.into());
                }
            }
        }
        loop {
            match dec.next_msg() {
                Ok(Some(m)) => {
                    if let Some(r) = registered {
                        if let Some(a) = reg.lock().get_mut(&r).filter(|a| a.session == id) {
                            a.last_heard = std::time::Instant::now();
                            if let Msg::Heartbeat { records, .. } = &m {
                                a.records = *records;
                            }
                        }
                    }
                    let admit = |r, proven| {
                        admission(
                            &known.read().unwrap_or_else(|p| p.into_inner()),
                            &reg.lock(),
                            r,
                            peer,
                            id,
                            &hb,
                            proven,
                        )
                    };
                    events.extend(s.handle_admitting(m, now_ms(), admit, &mut out));
                    if !dec.is_sealed() {
                        if let Some(k) = s.frame_keys() {
                            // The agent proved the secret: what it sends
                            // next is sealed, and what this side sends
                            // after its Welcome.
                            dec.expect_sealed(k.recv);
                            writer
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .seal
                                .seal_after_welcome(k.send);
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    if matches!(e, ftnet_control::FrameError::Forged(_)) {
                        reg.rejected_frames
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    if registered.is_some() {
                        warn!(%peer, replica = ?registered, "control connection {id}: {e}; closing");
                    } else if let Some(more) = reg.unproven_line() {
                        warn!(%peer, "control connection {id}: {e}; closing{more}");
                    }
                    if let Some(r) = registered.filter(|_| !reg.take_ended(id)) {
                        if shims > 0 {
                            order_lost(router, r, peer, &format!("its agent's connection broke ({e}) while {shims} server(s) followed the order through it"));
                        }
                        forget(reg, r, id, router);
                    }
                    return Ok(());
                }
            }
        }
        stall.mark("read and handle");
        events.extend(s.on_timeout(now_ms(), &mut out));
        if !out.is_empty() {
            let sent = writer
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .send(out.iter());
            out.clear();
            if let Err(e) = sent {
                if registered.is_none() {
                    return Err(e.into());
                }
                // A frame may be cut: nothing more can follow it.
                done.fail(format!("writing to the agent: {e}"));
            }
        }
        stall.mark("write");
        // An agent registering says where the input order stands: if
        // another router served since this one numbered it, everything
        // this router knows is stale. It starts over before it acts on
        // any of it (stale verdicts would end healthy replicas' servers),
        // and every other agent's session ends, so that each registers
        // again and hands over its records, as in a takeover.
        let reports = events.iter().find_map(|ev| match ev {
            RouterEvent::Order { replica, services } => Some((*replica, services)),
            _ => None,
        });
        let started_over = reports
            .and_then(|(replica, services)| router.superseded(replica, services))
            .map(|why| {
                error!("SUPERSEDED: {why}: another router served meanwhile (this one lost its address for a while), so its connections, input order and verdicts are stale; it starts over as a router that just started, and rebuilds from the agents' records");
                reg.end_sessions_but(id);
            })
            .is_some();
        stall.mark("order check");
        if let (true, Some(r)) = (started_over, registered) {
            // This agent registered with what is gone (its hello came
            // first): the fresh router learns it again.
            let out = router.agent_registered(r);
            if !out.is_empty() {
                warn!(replica = %r, "replica stays out of service {} although its agent registered", out.join(", "));
            }
            if shims_told {
                router.set_follows_order(r, shims > 0);
            }
        }
        for ev in events {
            match ev {
                RouterEvent::Registered { replica, host } => {
                    // An agent that proved the secret is heard (and its
                    // records written) at realtime priority from here on:
                    // this thread's delay on a loaded router host would
                    // read as the agent's silence, and holds a takeover's
                    // rebuild back (the registry's lock and the router's
                    // are taken next). Never before: an unauthenticated
                    // peer gets no realtime thread.
                    let sched = sys::realtime(rt);
                    debug!(%replica, scheduling = %sched, "control session scheduling");
                    let (tx, rx) = agent_queue(QUEUE);
                    // Checked again and taken under one lock: of two agents
                    // racing for one replica, one is refused.
                    let prev = {
                        let mut agents = reg.lock();
                        if let Err(reason) = admission(
                            &known.read().unwrap_or_else(|p| p.into_inner()),
                            &agents,
                            replica,
                            peer,
                            id,
                            &hb,
                            true,
                        ) {
                            drop(agents);
                            warn!(%peer, "agent refused: {reason}");
                            let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
                            let _ = w.send([&Msg::Reject { reason }]);
                            let _ = stream.shutdown(std::net::Shutdown::Both);
                            return Ok(());
                        }
                        let now = std::time::Instant::now();
                        stall.mark("admission");
                        agents.insert(
                            replica,
                            Agent {
                                host: host.clone(),
                                peer,
                                since: now,
                                last_heard: now,
                                tx,
                                records: 0,
                                lost: None,
                                session: id,
                                ordered: false,
                            },
                        )
                    };
                    registered = Some(replica);
                    let (w, d) = (writer.clone(), done.clone());
                    if let Err(e) = std::thread::Builder::new()
                        .name(format!("agent{id}-tx"))
                        .spawn(move || write_records(&rx, &w, &d))
                    {
                        forget(reg, replica, id, router);
                        return Err(e).context("starting a record writer");
                    }
                    stall.mark("record writer");
                    let again = match &prev {
                        Some(p) if p.lost.is_some() => " (replaces a lost agent)".to_string(),
                        Some(p) => format!(
                            " (replaces an agent silent for {} ms)",
                            p.last_heard.elapsed().as_millis()
                        ),
                        None => String::new(),
                    };
                    info!(%replica, %host, %peer, "agent registered{again}");
                    let out = router.agent_registered(replica);
                    if !out.is_empty() {
                        warn!(%replica, "replica stays out of service {} although its agent registered: it left the group and its server missed input since; bring it back with `ftnet replica enable {replica}` once its state is the group's", out.join(", "));
                    }
                    // What the agent keeps for the next router.
                    let down = router.out_of_service();
                    if let Some(a) = reg.lock().get(&replica).filter(|a| a.session == id) {
                        let _ = a.tx.try_send(Msg::OutOfService { down });
                    }
                }
                RouterEvent::Records { replica, records } => {
                    let t = std::time::Instant::now();
                    let done = router.adopt(replica, &records);
                    let count = |k: Adopted| done.iter().filter(|&&d| d == k).count();
                    let (new, legs) = (count(Adopted::New), count(Adopted::Leg));
                    let (known, refused) = (count(Adopted::Known), count(Adopted::Refused));
                    if new + legs > 0 {
                        warn!(
                            %replica,
                            "rebuilding from the agent's records: {new} connection(s) adopted, {legs} more replica leg(s), {known} already known, {refused} refused ({} µs); each replica is probed for its position",
                            t.elapsed().as_micros()
                        );
                    } else {
                        info!(%replica, "agent's {} record(s): {known} already known, {refused} refused", records.len());
                    }
                }
                RouterEvent::Order { replica, services } => {
                    let reports: &[OrderReport] = &services;
                    let at: Vec<String> = services
                        .iter()
                        .map(|o| format!("{}:{} at {}", o.vip, o.vport, o.last_seq))
                        .collect();
                    info!(%replica, "agent's input order: {}", if at.is_empty() { "no event yet".to_string() } else { at.join(", ") });
                    router.order_report(replica, reports, &mut || {
                        if let Some(a) = reg.lock().get_mut(&replica).filter(|a| a.session == id) {
                            a.ordered = true;
                        }
                    });
                }
                RouterEvent::OutOfService { replica, down } => {
                    let n = router.reported_down(replica, &down);
                    if n > 0 {
                        let list: Vec<String> =
                            down.iter().map(|d| d.replica.to_string()).collect();
                        warn!(%replica, "the agent reports replica(s) {} out of service under the router before: {n} kept out here (never readmitted without `ftnet replica enable`)", list.join(", "));
                    }
                }
                RouterEvent::Stored { replica, keys } => {
                    reg.stored(replica, &keys).apply(router);
                }
                RouterEvent::Rejected { reason } => {
                    if let Some(more) = reg.unproven_line() {
                        warn!(%peer, "agent refused: {reason}{more}");
                    }
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    return Ok(());
                }
                RouterEvent::Reconnecting { replica } => {
                    // The agent gave this session up (this router was
                    // silent for its limit: held, or cut off) and registers
                    // again at once; this session is over.
                    forget(reg, replica, id, router);
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    if reg.take_ended(id) {
                        info!(%replica, %peer, "the agent gave up a session the router's start-over had ended; it registers again");
                    } else if shims > 0 {
                        await_return(reg, replica, id, hb.dead_after, router, peer, shims);
                    } else {
                        info!(%replica, %peer, "the agent gave this router up and registers again; the replica stays in service (passive detection still applies)");
                    }
                    return Ok(());
                }
                RouterEvent::OrderLost { replica, reason } => {
                    // A server that lost the order keeps running, out of
                    // the group: it is stale, and the core says so as it
                    // marks the replica down (`AgentMsg::Restart`).
                    order_lost(router, replica, peer, &reason);
                }
                RouterEvent::State {
                    replica,
                    join,
                    data,
                    last,
                    digest,
                } => match router.join_parties(join) {
                    Some((donor, joiner)) if donor == replica => {
                        // The bytes go on to the joiner (the last piece
                        // marked), then, in a piece of its own, the digest
                        // the donor computed meanwhile.
                        let sent = data.is_empty()
                            || reg.send_to(
                                joiner,
                                Msg::State {
                                    join,
                                    data,
                                    last,
                                    digest: None,
                                },
                            );
                        if !sent {
                            router.join_report(
                                join,
                                true,
                                Err(format!("the joiner {joiner}'s agent cannot take the state")),
                            );
                        } else if let Some(d) = digest {
                            router.join_report(join, true, Ok(d));
                        }
                    }
                    _ => {
                        warn!(%replica, %peer, join, "state piece for no join this replica donates to: dropped")
                    }
                },
                RouterEvent::Restored {
                    replica,
                    join,
                    digest,
                } => {
                    if router.join_parties(join).is_some_and(|(_, j)| j == replica) {
                        router.join_report(join, false, Ok(digest));
                    }
                }
                RouterEvent::Snapshot { replica, join } => {
                    if router.join_parties(join).is_some_and(|(d, _)| d == replica) {
                        router.join_point(join);
                    }
                }
                RouterEvent::StateFailed {
                    replica,
                    join,
                    reason,
                } => {
                    if let Some((d, j)) = router.join_parties(join) {
                        if replica == d || replica == j {
                            router.join_report(
                                join,
                                replica == d,
                                Err(format!("{replica}: {reason}")),
                            );
                        }
                    }
                }
                RouterEvent::Shims { replica, count } => {
                    info!(%replica, %peer, shims = count, "servers following the input order through this agent: {count}");
                    if count > 0 && shims == 0 && shims_told {
                        router.try_rejoin(replica);
                    } else if count > 0 && !shims_told {
                        // The agent came (back) with servers already running:
                        // where the replica is out of service they ran while it
                        // was out and missed input. Only a fresh server can
                        // take the group's state: the agent ends them, their
                        // supervisor starts them again, and the fresh ones
                        // join (the count going from 0 up, above).
                        restart_stale(router, reg, replica, id, count);
                    }
                    router.set_follows_order(replica, count > 0);
                    shims = count;
                    shims_told = true;
                    reg.ordered_servers
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(replica, count);
                }
                RouterEvent::Lost { replica, silent } => {
                    if reg.lock().get(&replica).is_some_and(|a| a.session != id) {
                        // The agent registered again on another session
                        // (this one was cut off): it is heard there.
                        info!(%replica, %peer, "an earlier session of this agent fell silent for {} ms; the agent is registered on a newer one: nothing is lost", silent.as_millis());
                        let _ = stream.shutdown(std::net::Shutdown::Both);
                        return Ok(());
                    }
                    // Silence convicts only against another agent's voice
                    // (as a connection's silence does against another
                    // replica's): every agent falling silent together is
                    // this router cut off from them, or another router
                    // serving them (a standby that took over while this
                    // one did not run), and its verdicts would reset
                    // connections the other one serves.
                    let others_spoke = {
                        let g = reg.lock();
                        let mine = g
                            .get(&replica)
                            .filter(|a| a.session == id)
                            .map(|a| a.last_heard);
                        mine.is_none_or(|m| {
                            g.iter().any(|(r, a)| {
                                *r != replica && a.lost.is_none() && a.last_heard > m + 2 * hb.every
                            })
                        })
                    };
                    let n = if others_spoke {
                        router.host_lost(replica)
                    } else {
                        0
                    };
                    if !others_spoke {
                        router.agents_all_silent();
                        warn!(
                            %replica, %peer,
                            "agent silent for {} ms, and no other agent was heard since it fell silent: this router is the one cut off from the replicas, or another router serves them; no replica is marked down, and until an agent registers again none is reset or marked down",
                            silent.as_millis()
                        );
                    } else if n > 0 {
                        warn!(
                            %replica, %peer,
                            "agent silent for {} ms: host lost; replica marked down in {n} service(s) and taken out of its connections",
                            silent.as_millis()
                        );
                    } else {
                        warn!(
                            %replica, %peer,
                            "agent silent for {} ms: host lost; not marked down here (this router has served no connection yet, so the serving router judges it; or it is a service's last replica in service)",
                            silent.as_millis()
                        );
                    }
                    if let Some(a) = reg.lock().get_mut(&replica).filter(|a| a.session == id) {
                        a.lost = Some(std::time::Instant::now());
                    }
                    release(reg, replica, router);
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    return Ok(());
                }
            }
        }
        if let (true, Some(r)) = (started_over, registered) {
            // It kept the stale router's list of replicas out of service
            // for the next router: the fresh one's replaces it.
            let down = router.out_of_service();
            if let Some(a) = reg.lock().get(&r).filter(|a| a.session == id) {
                let _ = a.tx.try_send(Msg::OutOfService { down });
            }
        }
        if s.is_closed() {
            return Ok(());
        }
    }
}

/// Ask the agent of `replica` (session `id`) to end its `count` servers
/// where they are stale (`Router::stale_in`): one log line says why.
fn restart_stale(
    router: &dyn RouterHandle,
    reg: &Registry,
    replica: Ipv4Addr,
    id: u64,
    count: u32,
) {
    let stale = router.stale_in(replica);
    if stale.is_empty() {
        return;
    }
    let reason = format!(
        "replica {replica} is out of service in {} while another replica serves; its {count} server(s) following the order missed input since it left",
        stale.join(", ")
    );
    warn!(%replica, "{reason}: its agent is told to end them (with --end-stale-servers it does, and their supervisor starts them afresh); a fresh server joins with the group's state");
    if let Some(a) = reg.lock().get(&replica).filter(|a| a.session == id) {
        let _ = a.tx.try_send(Msg::Restart { reason });
    }
}

/// The replica's server lost the input order: it leaves the group now.
/// The agent of `replica` gave session `session` up saying it registers
/// again at once (`Msg::Reconnecting`), while `shims` servers followed the
/// order through it: they keep their place if it does, within `dead_after`
/// (the new session's order report brings them up to date from the
/// router's log, or loses the order there, loudly). Otherwise their order
/// is lost. (A router held 331 ms lost two replicas' order this way: their
/// agents gave it up and were back within milliseconds.)
fn await_return(
    reg: &Registry,
    replica: Ipv4Addr,
    session: u64,
    dead_after: Duration,
    router: &dyn RouterHandle,
    peer: SocketAddr,
    shims: u32,
) {
    let start = std::time::Instant::now();
    loop {
        let back = reg
            .lock()
            .get(&replica)
            .is_some_and(|a| a.session != session && a.lost.is_none());
        if back {
            info!(%replica, %peer, "the agent gave this router up and registered again on a new session after {} ms; its {shims} server(s) keep their place in the input order (brought up to date from the router's log)", start.elapsed().as_millis());
            return;
        }
        if start.elapsed() >= dead_after || sys::stop_requested() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    order_lost(
        router,
        replica,
        peer,
        &format!(
            "its agent gave this router up and did not register again within {} ms, while {shims} server(s) followed the order through it",
            dead_after.as_millis()
        ),
    );
}

fn order_lost(router: &dyn RouterHandle, replica: Ipv4Addr, peer: SocketAddr, reason: &str) {
    let n = router.replica_failed(replica);
    warn!(
        %replica, %peer, reason,
        "ORDER LOST: replica {replica}'s server can no longer follow the router's input order ({reason}); marked down in {n} service(s) and taken out of its connections (never a connection's last replica)"
    );
}

/// The agent's connection as the session and its record writer write to
/// it: one sealer, so the frames' numbers follow the order they go out in.
struct Out {
    stream: TcpStream,
    seal: Sealer,
}

impl Out {
    fn new(stream: TcpStream) -> Out {
        Out {
            stream,
            seal: Sealer::default(),
        }
    }

    /// The messages as frames, in one write.
    fn send<'a>(&mut self, msgs: impl IntoIterator<Item = &'a Msg>) -> std::io::Result<()> {
        let mut wire = Vec::new();
        for m in msgs {
            wire.extend(self.seal.encode(m));
        }
        if wire.is_empty() {
            return Ok(());
        }
        self.stream.write_all(&wire)
    }
}

/// Between a session and its record writer: the session ends (`stop`), or
/// the writer could not write (`failed`: a record is lost, maybe a frame cut).
#[derive(Default)]
struct WriterState {
    stop: std::sync::atomic::AtomicBool,
    failed: Mutex<Option<String>>,
}

impl WriterState {
    fn load(&self, o: std::sync::atomic::Ordering) -> bool {
        self.stop.load(o)
    }

    fn fail(&self, why: String) {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(why);
        }
    }

    fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Sets the flag when the session ends, whichever way it returns.
struct StopOnDrop(Arc<WriterState>);

/// Drops session `.1` from the sessions told to end, as that session ends.
struct ForgetEnded<'a>(&'a Registry, u64);

impl Drop for ForgetEnded<'_> {
    fn drop(&mut self) {
        self.0.take_ended(self.1);
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0
            .stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Send queued records to the agent as soon as they are queued (batched
/// when several are waiting), until the session ends. A write that fails
/// (or blocks beyond the write timeout) loses records and may cut a frame:
/// the writer stops and says why (the session takes the replica out).
fn write_records(rx: &AgentRx, w: &Mutex<Out>, done: &WriterState) {
    let mut batch = Vec::new();
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        let m = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        batch.clear();
        batch.extend(m);
        while batch.len() < 256 {
            match rx.try_recv() {
                Ok(m) => batch.extend(m),
                Err(_) => break,
            }
        }
        if let Err(e) = w
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(batch.iter())
        {
            done.fail(format!("writing records to the agent: {e}"));
            return;
        }
    }
}

fn forget(reg: &Registry, replica: Ipv4Addr, session: u64, router: &dyn RouterHandle) {
    let gone = {
        let mut agents = reg.lock();
        let ours = agents.get(&replica).is_some_and(|a| a.session == session);
        if ours {
            agents.remove(&replica);
        }
        ours
    };
    if gone {
        release(reg, replica, router);
    }
}

/// An agent that can confirm no more records holds no SYN-ACK back
/// waiting for it (one no agent stored may still be held: see
/// `Router::record_unstored`).
fn release(reg: &Registry, replica: Ipv4Addr, router: &dyn RouterHandle) {
    reg.release(replica).apply(router);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftnet_core::InputKind;

    const R: Ipv4Addr = Ipv4Addr::new(198, 18, 11, 2);

    fn input(seq: u64) -> AgentMsg {
        AgentMsg::Input {
            seq,
            key: ConnKey {
                client: Ipv4Addr::new(198, 18, 1, 2),
                cport: 40000,
                vip: Ipv4Addr::new(198, 19, 0, 1),
                vport: 6379,
            },
            kind: InputKind::Data {
                end: ftnet_wire::mod32(seq),
            },
            replicas: vec![R],
        }
    }

    fn agent(tx: AgentTx, session: u64) -> Agent {
        Agent {
            host: "h".into(),
            peer: "198.18.11.2:1".parse().unwrap(),
            since: std::time::Instant::now(),
            last_heard: std::time::Instant::now(),
            tx,
            records: 0,
            lost: None,
            session,
            ordered: true,
        }
    }

    /// A connection's record goes to every registered agent of its
    /// replicas, and its SYN-ACK waits for their confirmations. The first
    /// of several says the record is somewhere (a router taking over finds
    /// it: the SYN-ACK may go once the wait runs out); all of them, or the
    /// rest gone after one, say it is stored; every agent gone before any
    /// confirmed says it is stored nowhere (the router may hold the
    /// SYN-ACK on: `Router::record_unstored`). Before, agents that went
    /// without a word counted as confirmations.
    #[test]
    fn a_record_no_agent_stored_is_not_taken_for_stored() {
        const R2: Ipv4Addr = Ipv4Addr::new(198, 18, 12, 2);
        let key = ConnKey {
            client: Ipv4Addr::new(198, 18, 1, 2),
            cport: 40001,
            vip: Ipv4Addr::new(198, 19, 0, 1),
            vport: 6379,
        };
        let record = ConnRecord {
            key,
            client_isn: 1,
            router_isn: 2,
            wscale_out: 7,
            ts_base: None,
            client_mss: 1460,
            mss_out: 1460,
            replicas: [R, R2]
                .iter()
                .map(|&addr| ftnet_core::ReplicaSetup {
                    addr,
                    isn: 3,
                    wscale: 7,
                })
                .collect(),
            client_wscale: Some(7),
            accepted: false,
            input_end: None,
            snd_una: None,
            fin_received: false,
        };
        let one = |k: ConnKey| vec![k];
        for case in 0..3 {
            let reg = Registry::default();
            let (tx1, _rx1) = agent_queue(8);
            let (tx2, _rx2) = agent_queue(8);
            reg.lock().insert(R, agent(tx1, 1));
            reg.lock().insert(R2, agent(tx2, 2));
            let routed = reg.route(&AgentMsg::Established {
                record: record.clone(),
            });
            assert!(matches!(routed, Routed::Yes));
            assert_eq!(reg.pending_commits(), 1);
            match case {
                0 => {
                    let c = reg.stored(R, &[key]);
                    assert_eq!(
                        c,
                        Commits {
                            heard: one(key),
                            ..Commits::default()
                        }
                    );
                    assert_eq!(reg.stored(R, &[key]), Commits::default(), "said twice");
                    let c = reg.stored(R2, &[key]);
                    assert_eq!(
                        c,
                        Commits {
                            stored: one(key),
                            ..Commits::default()
                        }
                    );
                }
                1 => {
                    reg.stored(R, &[key]);
                    let c = reg.release(R2);
                    assert_eq!(
                        c,
                        Commits {
                            stored: one(key),
                            ..Commits::default()
                        }
                    );
                }
                _ => {
                    assert_eq!(reg.release(R), Commits::default());
                    let c = reg.release(R2);
                    assert_eq!(
                        c,
                        Commits {
                            unstored: one(key),
                            ..Commits::default()
                        }
                    );
                }
            }
            assert_eq!(reg.pending_commits(), 0, "case {case}");
        }
    }

    /// An agent whose queue is full missed a record: it is never left
    /// registered with a hole in its order (its session thread ends it and
    /// takes the replica out), and gets nothing after the hole.
    #[test]
    fn a_full_queue_ends_the_agent() {
        let reg = Registry::default();
        let (tx, rx) = agent_queue(2);
        reg.lock().insert(R, agent(tx, 7));
        for s in 1..=4 {
            reg.route(&input(s));
        }
        let got: Vec<u64> = rx
            .try_iter()
            .filter_map(|m| match m {
                Msg::Input { seq, .. } => Some(seq),
                _ => None,
            })
            .collect();
        assert_eq!(got, vec![1, 2], "nothing after the hole");
        assert!(reg.lock().get(&R).is_none(), "no longer registered");
        assert!(
            !reg.overflowed(R, 8),
            "another session of the replica is not ended"
        );
        assert!(reg.overflowed(R, 7), "its session is told to end it");
        assert_eq!(reg.status()["dropped_records"], 1);
    }

    /// What the data plane routes is staged and reaches an agent's writer
    /// at the end of the drain (`flush`), in one hand-over and in order; a
    /// message sent directly goes after what was staged.
    #[test]
    fn routed_records_reach_the_writer_at_the_flush_in_order() {
        let reg = Registry::default();
        let (tx, rx) = agent_queue(8);
        reg.lock().insert(R, agent(tx.clone(), 7));
        for s in 1..=3 {
            reg.route(&input(s));
        }
        assert!(rx.try_recv().is_err(), "nothing before the flush");
        reg.flush();
        let seqs = |b: Vec<Msg>| -> Vec<u64> {
            b.into_iter()
                .filter_map(|m| match m {
                    Msg::Input { seq, .. } => Some(seq),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(seqs(rx.try_recv().unwrap()), vec![1, 2, 3], "one hand-over");
        assert!(rx.try_recv().is_err());
        reg.route(&input(4));
        assert!(tx.try_send(Msg::Restart { reason: "x".into() }).is_ok());
        let b = rx.try_recv().unwrap();
        assert!(
            matches!(&b[..], [Msg::Input { seq: 4, .. }, Msg::Restart { .. }]),
            "{b:?}"
        );
        reg.flush();
        assert!(rx.try_recv().is_err(), "nothing staged twice");
        assert_eq!(tx.queued.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    /// A session told to end that ended on its own first (its agent's
    /// connection broke) leaves nothing behind in the registry.
    #[test]
    fn a_session_that_ended_leaves_no_order_to_end_behind() {
        let reg = Registry::default();
        reg.lock().insert(R, agent(agent_queue(1).0, 7));
        reg.end_sessions_but(1);
        assert_eq!(reg.ended.lock().unwrap().len(), 1, "session 7 is to end");
        drop(ForgetEnded(&reg, 7));
        assert!(reg.ended.lock().unwrap().is_empty());
    }

    /// The core's restart request reaches the replica's agent only where
    /// servers follow the order through it (otherwise nothing is stale),
    /// and never another agent.
    #[test]
    fn a_restart_request_reaches_an_agent_with_ordered_servers() {
        let reg = Registry::default();
        let other = Ipv4Addr::new(198, 18, 12, 2);
        let (tx, rx) = agent_queue(8);
        let (tx2, rx2) = agent_queue(8);
        reg.lock().insert(R, agent(tx, 1));
        reg.lock().insert(other, agent(tx2, 2));
        let ask = AgentMsg::Restart {
            replica: R,
            reason: "taken out".into(),
        };
        // Also with no server following the order there: one whose shim
        // lost the order may run on, stale, and only its agent knows it.
        reg.route(&ask);
        reg.flush();
        let got: Vec<Msg> = rx.try_iter().collect();
        assert!(
            matches!(&got[..], [Msg::Restart { reason }] if reason == "taken out"),
            "{got:?}"
        );
        reg.ordered_servers.lock().unwrap().insert(R, 2);
        reg.route(&ask);
        reg.flush();
        let got: Vec<Msg> = rx.try_iter().collect();
        assert!(
            matches!(&got[..], [Msg::Restart { reason }] if reason == "taken out"),
            "{got:?}"
        );
        assert_eq!(rx2.try_iter().count(), 0, "not another replica's agent");
    }

    /// A record writer that cannot write (the agent does not read: the
    /// write times out, maybe in the middle of a frame) stops and says why,
    /// for its session to end the agent and take the replica out.
    #[test]
    fn a_stalled_writer_says_why() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_peer, _) = l.accept().unwrap();
        c.set_write_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let (tx, rx) = agent_queue(1 << 20);
        let w = Mutex::new(Out::new(c));
        let state = WriterState::default();
        let mut n = 0;
        // Far more than the socket buffers hold.
        while n < 400_000
            && tx
                .try_send(Msg::Input {
                    seq: n,
                    key: ConnKey {
                        client: Ipv4Addr::new(198, 18, 1, 2),
                        cport: 40000,
                        vip: Ipv4Addr::new(198, 19, 0, 1),
                        vport: 6379,
                    },
                    kind: InputKind::Data { end: 0 },
                })
                .is_ok()
        {
            n += 1;
        }
        drop(tx);
        write_records(&rx, &w, &state);
        let why = state.failure();
        assert!(
            why.as_deref()
                .is_some_and(|w| w.contains("writing records")),
            "{why:?}"
        );
    }

    const R2: Ipv4Addr = Ipv4Addr::new(198, 18, 12, 2);
    const DEAD: Duration = Duration::from_millis(500);
    /// Heartbeats every 100 ms, lost after 500: an agent gives its router
    /// up after 300 ms of silence.
    const HB: Heartbeats = Heartbeats {
        every: Duration::from_millis(100),
        dead_after: DEAD,
        tick_ms: 0,
    };

    fn agent_heard(session: u64, heard_ago: Duration, lost: bool) -> Agent {
        let now = std::time::Instant::now();
        Agent {
            host: "r2".into(),
            peer: SocketAddr::from((R2, 40000)),
            since: now,
            last_heard: now.checked_sub(heard_ago).unwrap_or(now),
            tx: agent_queue(1).0,
            records: 0,
            lost: lost.then_some(now),
            session,
            ordered: false,
        }
    }

    fn admit(agents: &HashMap<Ipv4Addr, Agent>, peer: [u8; 4], session: u64) -> Result<(), String> {
        let known: HashSet<Ipv4Addr> = [R2].into();
        admission(
            &known,
            agents,
            R2,
            SocketAddr::from((peer, 40001)),
            session,
            &HB,
            true,
        )
    }

    /// An agent holding the right secret but connecting from another address
    /// (the client's) cannot speak for r2.
    #[test]
    fn an_agent_must_speak_from_its_replicas_address() {
        let none = HashMap::new();
        let e = admit(&none, [198, 18, 1, 2], 1).unwrap_err();
        assert!(
            e.contains("must connect from that address") && e.contains("198.18.1.2"),
            "{e}"
        );
        assert_eq!(admit(&none, [198, 18, 12, 2], 1), Ok(()));
        let known: HashSet<Ipv4Addr> = [R2].into();
        let other = Ipv4Addr::new(198, 18, 13, 2);
        let e = admission(
            &known,
            &none,
            other,
            SocketAddr::from((other, 1)),
            1,
            &HB,
            false,
        )
        .unwrap_err();
        assert!(e.contains("not in the router's configuration"), "{e}");
    }

    /// A live agent (heard within three heartbeats, at least 150 ms) is
    /// never replaced; a lost, silent or closed one (no entry) may be; a
    /// session re-checking itself is not in its own way.
    #[test]
    fn a_live_agent_is_not_replaced() {
        let mut agents = HashMap::new();
        agents.insert(R2, agent_heard(1, Duration::from_millis(50), false));
        let e = admit(&agents, [198, 18, 12, 2], 2).unwrap_err();
        assert!(
            e.contains("already has a live agent") && e.contains("silent for 300 ms"),
            "{e}"
        );
        agents.insert(R2, agent_heard(1, Duration::from_millis(250), false));
        assert!(admit(&agents, [198, 18, 12, 2], 2).is_err());
        // Not before it proved the secret (it may not even hold it).
        let known: HashSet<Ipv4Addr> = [R2].into();
        let peer = SocketAddr::from((R2, 40001));
        assert_eq!(admission(&known, &agents, R2, peer, 2, &HB, false), Ok(()));
        assert_eq!(admit(&agents, [198, 18, 12, 2], 1), Ok(()));
        agents.insert(R2, agent_heard(1, DEAD * 2, false));
        assert_eq!(admit(&agents, [198, 18, 12, 2], 2), Ok(()));
        agents.insert(R2, agent_heard(1, Duration::ZERO, true));
        assert_eq!(admit(&agents, [198, 18, 12, 2], 2), Ok(()));
    }

    /// An agent that gave this router up (it moved to a standby, and came
    /// back) while its goodbye never reached this router: its old session
    /// here looks registered but has not been heard for longer than an
    /// agent waits for its router (300 ms here), though less than
    /// `dead_after`. The agent connecting again from its replica's address
    /// with the secret replaces it at once, not after `dead_after`.
    #[test]
    fn an_agent_that_gave_the_router_up_gets_back_in_before_dead_after() {
        let mut agents = HashMap::new();
        agents.insert(R2, agent_heard(1, Duration::from_millis(400), false));
        assert_eq!(admit(&agents, [198, 18, 12, 2], 2), Ok(()));
    }

    /// A flood from an address that is no replica's (a client's) fills its
    /// own small budget and never the places of the replicas' agents: an
    /// agent that reconnects from its replica's address gets in, up to a
    /// few connections per replica address; the overall cap still holds;
    /// places given back are taken again.
    #[test]
    fn a_flood_from_elsewhere_leaves_room_for_the_agents() {
        let client = Some(Ipv4Addr::new(198, 18, 1, 2));
        let known: HashSet<Ipv4Addr> = [R, R2].into();
        let mut b = Budget::default();
        let mut held = Vec::new();
        for _ in 0..MAX_UNKNOWN_CONNECTIONS {
            held.push(b.take(client, &known).unwrap());
        }
        assert_eq!(held[0], Slot::Unknown);
        for n in 1..=1000u64 {
            assert_eq!(b.take(client, &known), Err((Refused::Unknown, n)));
        }
        assert_eq!(b.take(None, &known), Err((Refused::Unknown, 1001)));
        // The replicas' agents, though the flood goes on.
        for _ in 0..MAX_PER_REPLICA_ADDRESS {
            assert_eq!(b.take(Some(R2), &known), Ok(Slot::Replica(R2)));
        }
        assert_eq!(
            b.take(Some(R2), &known),
            Err((Refused::Replica(R2), 1)),
            "a few per replica address"
        );
        assert_eq!(b.take(Some(R), &known), Ok(Slot::Replica(R)));
        assert_eq!(b.refused, 1002);
        b.give_back(Slot::Replica(R2));
        assert_eq!(b.take(Some(R2), &known), Ok(Slot::Replica(R2)));
        b.give_back(Slot::Unknown);
        assert_eq!(b.take(client, &known), Ok(Slot::Unknown));
        // An address that is no longer a replica's counts as unknown.
        let fewer: HashSet<Ipv4Addr> = [R].into();
        assert_eq!(b.take(Some(R2), &fewer), Err((Refused::Unknown, 1002)));
        // Many replicas' addresses together still stop at the overall cap.
        let many: HashSet<Ipv4Addr> = (0..=255u8)
            .map(|i| Ipv4Addr::new(198, 18, 100, i))
            .collect();
        let mut full = 0;
        for a in &many {
            for _ in 0..MAX_PER_REPLICA_ADDRESS {
                if b.take(Some(*a), &many) == Err((Refused::Full, full + 1)) {
                    full += 1;
                }
            }
        }
        assert_eq!(b.open(), MAX_CONTROL_CONNECTIONS);
        assert!(full > 0);
    }

    /// A connection's place is given back when its thread ends, whichever
    /// way, and the status says what was refused.
    #[test]
    fn a_place_is_given_back_and_refusals_counted() {
        let reg = Arc::new(Registry::default());
        let known: HashSet<Ipv4Addr> = [R].into();
        let g = SlotGuard {
            reg: reg.clone(),
            slot: reg.budget().take(Some(R), &known).unwrap(),
        };
        assert_eq!(reg.status()["connections"], 1);
        let t = std::thread::spawn(move || {
            let _g = g;
            panic!("a session that panics");
        });
        assert!(t.join().is_err());
        assert_eq!(reg.status()["connections"], 0);
        for _ in 0..MAX_UNKNOWN_CONNECTIONS + 3 {
            let _ = reg.budget().take(None, &known);
        }
        let st = reg.status();
        assert_eq!(st["refused_connections"], 3);
        assert_eq!(st["refused_unknown"], 3);
        assert_eq!(st["refused_per_address"], 0);
    }

    /// Lines about refused peers: a burst, then a few a second, each
    /// saying how many were left out before it.
    #[test]
    fn refusal_lines_are_bounded() {
        let mut b = LineBudget::default();
        let t0 = std::time::Instant::now();
        let logged = (0..1000).filter(|_| b.allow(t0).is_some()).count();
        assert_eq!(logged, 20, "the burst, then nothing in the same instant");
        // A second later: five lines; the first says what was left out.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(b.allow(t1), Some(980));
        assert_eq!((0..100).filter(|_| b.allow(t1).is_some()).count(), 4);
        // Quiet for a minute: a full burst again, nothing more left out.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!(b.allow(t2), Some(96));
        assert_eq!((0..19).filter(|_| b.allow(t2) == Some(0)).count(), 19);
        assert_eq!(b.allow(t2), None);
    }
}
