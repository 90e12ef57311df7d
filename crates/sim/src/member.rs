//! Membership at run time (`Params::membership`): the operator's calls
//! (`drain_replica`, `enable_replica`, `remove_replica`, `add_replica`) at
//! random points of the workload, and what they must and must not change.
//!
//! Each call's answer is predicted from the router's status just before it
//! (a call the router must refuse is made on purpose too: its
//! `MembershipError` must be the right one), and the sim keeps its own
//! model of the membership it asked for. Checked:
//!
//! * start: no replica is part of a connection unless it was a serving
//!   member (model and router) when the router forwarded the connection's
//!   first SYN; every such replica is (the "holds the group's input up to
//!   that connection's start" of the issue, for stateless echo servers);
//! * drain: the replica gets no SYN of a connection opened after the call,
//!   is never evicted from its connections (the healthy-eviction check),
//!   receives their whole streams (invariant 2), and `ReplicaDrained`
//!   comes only once each of them is closed on its side, and does come;
//! * remove: evictions as `Removed` only of the replica removed, during the
//!   call, as many as `ReplicaRemoved::left`; afterwards it gets no segment
//!   but a RST of a connection it was taken out of;
//! * add: the rejoined replica (a stale server that kept its old sockets;
//!   its agent starts afresh) or the joining spare gets only connections
//!   that start after the call;
//! * the router's membership at the end is the one asked for.

use crate::host::{App, Host};
use crate::params::{Inject, MemberChange, MemberOp, Membership};
use crate::{replica_ip, CLIENT_IP};
use ftnet_core::{Event, EvictReason, Instant, MemberState, MembershipError, Router};
use ftnet_wire::{ipv4, tcp};
use smoltcp::socket::tcp::State;
use std::collections::{BTreeSet, HashMap, VecDeque};

const SERVICE: &str = "echo";

/// What the sim asked for, per replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Model {
    Serving,
    Draining,
    /// Removed, or the spare before it joined.
    Out,
}

pub(crate) struct MemberSim {
    plan: VecDeque<MemberChange>,
    pub model: Vec<Model>,
    /// Per replica: its agent started afresh (it rejoined or joined), so
    /// its numbers need not start at 1.
    pub fresh_agent: Vec<bool>,
    /// Per replica: a change the sim asked for took effect.
    pub changed: Vec<bool>,
    /// Per client port: when the router forwarded the first SYN, and who
    /// was a serving member then.
    starts: HashMap<u16, (u64, Vec<bool>)>,
    /// (replica, client port): the router sent it a SYN of that connection.
    syn_to: BTreeSet<(usize, u16)>,
    /// (replica, client port): evicted as `Removed`.
    removed_from: BTreeSet<(usize, u16)>,
    /// The replica being removed by the call in progress, and the
    /// `Removed` evictions seen so far.
    removing: Option<(usize, usize)>,
    /// Per replica: when the sim last drained it.
    drained_at: Vec<Option<u64>>,
    /// Client ports of the late connections not started yet.
    late_ports: VecDeque<u16>,
    /// One line per change made, for the report.
    pub done: Vec<String>,
    /// Membership self-tests (`Inject::Member*`).
    inject: Inject,
}

/// The result of one call, comparable across kinds.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Membership(Result<(), MembershipError>),
    /// `enable_replica`: whether it came back.
    Enabled(bool),
}

fn state_of(states: &[(std::net::Ipv4Addr, MemberState)], i: usize) -> Option<MemberState> {
    states
        .iter()
        .find(|(a, _)| *a == replica_ip(i))
        .map(|x| x.1)
}

pub(crate) fn router_states(r: &Router) -> Vec<(std::net::Ipv4Addr, MemberState)> {
    r.status()
        .services
        .iter()
        .flat_map(|s| s.replicas.iter().map(|x| (x.addr, x.state)))
        .collect()
}

/// The client port of `Event::Evicted::conn` ("198.18.1.2:PORT->…").
pub(crate) fn conn_port(conn: &str) -> Option<u16> {
    conn.split("->").next()?.rsplit(':').next()?.parse().ok()
}

impl MemberSim {
    pub fn new(m: &Membership, replicas: usize, inject: Inject) -> MemberSim {
        let spare = m.spare;
        MemberSim {
            plan: m.changes.iter().copied().collect(),
            model: (0..replicas)
                .map(|i| {
                    if spare && i == replicas - 1 {
                        Model::Out
                    } else {
                        Model::Serving
                    }
                })
                .collect(),
            fresh_agent: vec![false; replicas],
            changed: vec![false; replicas],
            starts: HashMap::new(),
            syn_to: BTreeSet::new(),
            removed_from: BTreeSet::new(),
            removing: None,
            drained_at: vec![None; replicas],
            late_ports: VecDeque::new(),
            done: Vec::new(),
            inject,
        }
    }

    pub fn set_late_ports(&mut self, ports: Vec<u16>) {
        self.late_ports = ports.into();
    }

    /// The next change, if it is due at this progress of the first
    /// connections.
    pub fn due(&self, acked: usize, total: usize) -> Option<MemberChange> {
        let c = self.plan.front()?;
        (acked as f64 >= c.at * total as f64).then_some(*c)
    }

    /// What the router must answer, from its membership now.
    fn predict(states: &[(std::net::Ipv4Addr, MemberState)], c: &MemberChange) -> Answer {
        let i = c.replica;
        let ip = replica_ip(i).to_string();
        let st = state_of(states, i);
        let others = states
            .iter()
            .filter(|(a, s)| *a != replica_ip(i) && *s == MemberState::Serving)
            .count();
        let not_member = MembershipError::NotAMember {
            service: SERVICE.into(),
            replica: ip.clone(),
        };
        let last = MembershipError::LastServing {
            service: SERVICE.into(),
            replica: ip.clone(),
        };
        let already = |state| MembershipError::AlreadyMember {
            service: SERVICE.into(),
            replica: ip.clone(),
            state,
        };
        match c.op {
            MemberOp::Drain => Answer::Membership(match st {
                None => Err(not_member),
                Some(MemberState::Removed) => Err(MembershipError::Removed {
                    service: SERVICE.into(),
                    replica: ip.clone(),
                }),
                Some(MemberState::Serving) if others == 0 => Err(last),
                Some(MemberState::Serving) => Ok(()),
                Some(s) => Err(already(s)),
            }),
            MemberOp::Remove => Answer::Membership(match st {
                None | Some(MemberState::Removed) => Err(not_member),
                Some(MemberState::Serving | MemberState::Draining) if others == 0 => Err(last),
                Some(_) => Ok(()),
            }),
            MemberOp::Add => Answer::Membership(match st {
                None | Some(MemberState::Removed) => Ok(()),
                Some(s) => Err(already(s)),
            }),
            MemberOp::Enable => Answer::Enabled(matches!(
                st,
                Some(MemberState::Down | MemberState::Draining)
            )),
        }
    }

    /// Make the next change on `r` at `now`. Returns the trace line, the
    /// replica whose agent must start afresh (it rejoined), and the late
    /// connection to start (port, when).
    #[allow(clippy::type_complexity)]
    pub fn apply(
        &mut self,
        now: u64,
        r: &mut Router,
    ) -> Result<(String, Option<usize>, Option<(u16, u64)>), String> {
        let Some(c) = self.plan.pop_front() else {
            return Ok((String::new(), None, None));
        };
        let i = c.replica;
        let ip = replica_ip(i);
        let states = router_states(r);
        let want = MemberSim::predict(&states, &c);
        if self.inject == Inject::MemberCallsIgnored {
            // Believe the call took effect as predicted, without making it.
            if matches!(want, Answer::Membership(Ok(())) | Answer::Enabled(true)) {
                self.model[i] = match c.op {
                    MemberOp::Drain => Model::Draining,
                    MemberOp::Remove => Model::Out,
                    MemberOp::Add | MemberOp::Enable => Model::Serving,
                };
                self.drained_at[i] = (c.op == MemberOp::Drain).then_some(now);
                if c.op == MemberOp::Remove {
                    // As if evicted from every connection it is in.
                    let mine: Vec<(usize, u16)> =
                        self.syn_to.iter().filter(|x| x.0 == i).copied().collect();
                    self.removed_from.extend(mine);
                }
            }
            let late = c
                .late_conn_after_us
                .and_then(|d| self.late_ports.pop_front().map(|p| (p, now + d)));
            return Ok((
                format!(
                    "{now:>10} MEMBERSHIP {:?} replica{i} NOT MADE (self-test)",
                    c.op
                ),
                None,
                late,
            ));
        }
        let t = Instant(now);
        let (got, detail) = match c.op {
            MemberOp::Drain => {
                let x = r.drain_replica(t, SERVICE, ip);
                (
                    Answer::Membership(x.as_ref().map(|_| ()).map_err(Clone::clone)),
                    format!("{x:?}"),
                )
            }
            MemberOp::Remove => {
                self.removing = Some((i, 0));
                let x = r.remove_replica(t, SERVICE, ip);
                (
                    Answer::Membership(x.as_ref().map(|_| ()).map_err(Clone::clone)),
                    format!("{x:?}"),
                )
            }
            MemberOp::Add => {
                let x = r.add_replica(t, SERVICE, ip);
                (Answer::Membership(x.clone()), format!("{x:?}"))
            }
            MemberOp::Enable => {
                let x = r.enable_replica(ip, Some(SERVICE));
                (Answer::Enabled(!x.is_empty()), format!("{x:?}"))
            }
        };
        let line = format!(
            "{now:>10} MEMBERSHIP {:?} replica{i} ({ip}) at {:.0}% of the first connections acked: {detail}; router before: {:?}",
            c.op,
            c.at * 100.0,
            states.iter().map(|x| x.1).collect::<Vec<_>>()
        );
        if got != want {
            return Err(format!(
                "membership: {:?} replica{i} at {now} us answered {got:?}, expected {want:?} (router states before: {states:?})",
                c.op
            ));
        }
        let mut fresh = None;
        let ok = matches!(got, Answer::Membership(Ok(())) | Answer::Enabled(true))
            && self.inject != Inject::MemberModelStale;
        if ok {
            self.model[i] = match c.op {
                MemberOp::Drain => Model::Draining,
                MemberOp::Remove => Model::Out,
                MemberOp::Add | MemberOp::Enable => Model::Serving,
            };
            self.changed[i] = true;
            self.drained_at[i] = (c.op == MemberOp::Drain).then_some(now);
            if c.op == MemberOp::Add {
                self.fresh_agent[i] = true;
                fresh = Some(i);
            }
            self.done.push(format!("{:?} r{i} at {now} us", c.op));
        } else {
            self.done
                .push(format!("{:?} r{i} at {now} us refused: {detail}", c.op));
        }
        let late = match c.late_conn_after_us {
            Some(d) => self.late_ports.pop_front().map(|p| (p, now + d)),
            None => None,
        };
        Ok((line, fresh, late))
    }

    /// The events of a call are in: check the removal's count.
    pub fn call_done(&mut self, events: &[Event]) -> Result<(), String> {
        let Some((i, evicted)) = self.removing.take() else {
            return Ok(());
        };
        for e in events {
            if let Event::ReplicaRemoved { replica, left, .. } = e {
                if *replica == replica_ip(i) && *left != evicted {
                    return Err(format!(
                        "membership (remove): removing replica{i} announced {left} connection(s) left, the router evicted it as Removed from {evicted}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// A membership event, or an eviction the sim asked for. `Ok(true)`:
    /// expected, nothing else to check.
    pub fn event(&mut self, ev: &Event, hosts: &[Host]) -> Result<bool, String> {
        let idx = |a: &std::net::Ipv4Addr| (0..self.model.len()).find(|&i| replica_ip(i) == *a);
        match ev {
            Event::Evicted {
                conn,
                replica,
                reason: EvictReason::Removed,
                ..
            } => {
                let i = idx(replica);
                match (i, self.removing) {
                    (Some(i), Some((j, n))) if i == j => {
                        self.removing = Some((j, n + 1));
                        if let Some(p) = conn_port(conn) {
                            self.removed_from.insert((i, p));
                        }
                        Ok(true)
                    }
                    _ => Err(format!(
                        "membership: replica {replica} evicted as Removed from {conn}, but the sim is not removing it"
                    )),
                }
            }
            Event::ReplicaDrained { replica, .. } => {
                let Some(i) = idx(replica) else {
                    return Err(format!("membership: unknown replica drained: {ev:?}"));
                };
                if self.model[i] != Model::Draining {
                    return Err(format!(
                        "membership: replica{i} announced drained, but the sim has it {:?}",
                        self.model[i]
                    ));
                }
                // Each of its connections closed on its side: it sent its
                // FIN, and the client its own.
                let h = &hosts[1 + i];
                let by = h.by_peer();
                for &(j, p) in &self.syn_to {
                    if j != i || self.removed_from.contains(&(i, p)) {
                        continue;
                    }
                    let st = by.get(&p).map(|s| h.state(s.handle));
                    let client_closed = client_conn(hosts, p).is_some_and(|k| k.close_called);
                    if !client_closed
                        || matches!(
                            st,
                            Some(State::Established | State::SynReceived | State::CloseWait)
                        )
                    {
                        return Err(format!(
                            "membership: replica{i} announced drained while its connection from port {p} is open (replica socket {st:?}, client closed {client_closed})"
                        ));
                    }
                }
                self.drained_at[i] = None;
                Ok(true)
            }
            Event::ReplicaDraining { .. }
            | Event::ReplicaRemoved { .. }
            | Event::ReplicaAdded { .. }
            | Event::ReplicaUp { .. } => Ok(true),
            _ => Ok(false),
        }
    }

    /// The router emits `data` to replica `i`. `states`: the router's
    /// membership now (only asked for a connection's first SYN).
    pub fn router_sent(
        &mut self,
        now: u64,
        i: usize,
        data: &[u8],
        states: impl FnOnce() -> Vec<(std::net::Ipv4Addr, MemberState)>,
    ) -> Result<(), String> {
        let Ok(ip) = ipv4::Packet::new_checked(data) else {
            return Ok(());
        };
        if ip.protocol() != ipv4::PROTO_TCP || ip.src() != CLIENT_IP {
            return Ok(());
        }
        let Ok(s) = tcp::Segment::new_checked(ip.payload()) else {
            return Ok(());
        };
        let p = s.src_port();
        if s.syn() && s.flags() & tcp::flags::ACK == 0 {
            let model = &self.model;
            let (t, serving) = self.starts.entry(p).or_insert_with(|| {
                let st = states();
                (
                    now,
                    (0..model.len())
                        .map(|j| {
                            model[j] == Model::Serving
                                && state_of(&st, j) == Some(MemberState::Serving)
                        })
                        .collect(),
                )
            });
            if !serving.get(i).copied().unwrap_or(false) {
                return Err(format!(
                    "membership (start): replica{i} got a SYN of the connection from port {p}, whose first SYN the router forwarded at {t} us, when replica{i} was not a serving member (serving then: {serving:?}; now the sim has it {:?})",
                    self.model[i]
                ));
            }
            self.syn_to.insert((i, p));
            return Ok(());
        }
        if s.rst() {
            return Ok(());
        }
        if !self.syn_to.contains(&(i, p)) {
            return Err(format!(
                "membership: the router sent replica{i} a segment of the connection from port {p}, which it never got a SYN of: {}",
                crate::describe(data)
            ));
        }
        if self.removed_from.contains(&(i, p)) {
            return Err(format!(
                "membership (remove): the router sent replica{i} a segment of the connection from port {p} after taking it out of it as Removed: {}",
                crate::describe(data)
            ));
        }
        Ok(())
    }

    /// Replica `i` must hold the whole stream of the connection from port
    /// `p` (invariant 2): it was part of it and not removed from it.
    pub fn must_hold(&self, i: usize, p: u16) -> bool {
        self.syn_to.contains(&(i, p)) && !self.removed_from.contains(&(i, p))
    }

    /// At the end: every serving member at a connection's start got its
    /// SYN, the router's membership is the one asked for, and a drained
    /// replica whose connections all closed was announced drained.
    pub fn final_check(
        &self,
        r: &Router,
        hosts: &[Host],
        crashed: Option<usize>,
    ) -> Result<(), String> {
        let mut ports: Vec<(&u16, &(u64, Vec<bool>))> = self.starts.iter().collect();
        ports.sort();
        for (p, (t, serving)) in ports {
            for (i, &s) in serving.iter().enumerate() {
                if s && !self.syn_to.contains(&(i, *p)) {
                    return Err(format!(
                        "membership (start): replica{i} was a serving member when the router forwarded the first SYN of the connection from port {p} at {t} us, but got none"
                    ));
                }
            }
        }
        let states = router_states(r);
        for (i, m) in self.model.iter().enumerate() {
            let st = state_of(&states, i);
            let ok = match m {
                Model::Serving => {
                    st == Some(MemberState::Serving)
                        || (st == Some(MemberState::Down) && crashed == Some(i))
                }
                Model::Draining => st == Some(MemberState::Draining),
                Model::Out => matches!(st, None | Some(MemberState::Removed)),
            };
            if !ok {
                return Err(format!(
                    "membership: at the end the sim asked for replica{i} {m:?}, the router has it {st:?}"
                ));
            }
        }
        for (i, at) in self.drained_at.iter().enumerate() {
            let Some(at) = at else { continue };
            let h = &hosts[1 + i];
            let by = h.by_peer();
            let all_closed = self
                .syn_to
                .iter()
                .filter(|&&(j, p)| j == i && !self.removed_from.contains(&(i, p)))
                .all(|&(_, p)| {
                    client_conn(hosts, p).is_some_and(|k| k.close_called)
                        && by.get(&p).is_some_and(|s| {
                            matches!(h.state(s.handle), State::Closed | State::TimeWait)
                        })
                });
            if all_closed {
                return Err(format!(
                    "membership (drain): replica{i}, draining since {at} us, saw every connection of its close, and the router never announced it drained"
                ));
            }
        }
        Ok(())
    }

    /// How the membership changes went, for a failure message.
    pub fn summary(&self) -> String {
        format!("{} (model now {:?})", self.done.join("; "), self.model)
    }
}

fn client_conn(hosts: &[Host], port: u16) -> Option<&crate::host::ClientConn> {
    match &hosts[0].app {
        App::Client { conns, .. } => conns.iter().find(|k| k.port == port),
        _ => None,
    }
}
