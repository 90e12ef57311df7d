//! What the control plane brings the router: connections adopted from the
//! agents' records after a takeover (COSCANet-FT §III-C) and the
//! sequencer's order carried over (AR-TCP §4.1).

use super::*;

impl Router {
    /// Rebuild a connection another router set up (COSCANet-FT §III-C:
    /// "a new router instance can collect information about the current
    /// state during initialisation"): one replica's agent's record of it.
    /// A connection this router does not know enters the table; each
    /// replica's record adds its leg, which is probed at once for its
    /// position. Records of connections this router already serves change
    /// nothing (an agent that reconnected). `from`: the replica whose agent
    /// sent the record (its part of the record is the one used).
    pub fn adopt(&mut self, now: Instant, from: Ipv4Addr, rec: &ConnRecord) -> Adopted {
        self.agent_since.entry(from).or_insert(now);
        let Some(&svc) = self.by_vip.get(&(rec.key.vip, rec.key.vport)) else {
            return Adopted::Refused;
        };
        // An agent speaks for its own replica alone, and only of a
        // connection that replica was part of.
        let Some(&mine) = rec.replica(from) else {
            return Adopted::Refused;
        };
        let Some(&(rsvc, replica)) = self.by_replica.get(&(from, rec.key.vport)) else {
            return Adopted::Refused;
        };
        if rsvc != svc {
            return Adopted::Refused;
        }
        if !self.in_group(svc, replica) {
            // Out of the group: it never comes back into a connection it
            // left (only a join adds it, with a leg of its own). Its agent
            // forgets the record, which it kept because it was away when
            // the replica left: a router taking over later would bring the
            // replica back into a connection its kernel no longer has.
            self.out.agent(AgentMsg::Forgotten {
                key: rec.key,
                replicas: vec![from],
            });
            return Adopted::Refused;
        }
        let key = rec.key;
        let fresh = match self.conns.get(&key) {
            Some(c) if c.takes_record(rec) => false,
            Some(c) => {
                if !c.recovering() && !c.live_leg_at(from) {
                    // Its replica left this connection (evicted and reset)
                    // while its agent was away, and the agent never heard:
                    // it forgets the record now, or a router taking over
                    // would bring the replica back into a connection its
                    // kernel no longer has (its probe answered by a RST, a
                    // healthy replica taken for one that reset).
                    self.out.agent(AgentMsg::Forgotten {
                        key,
                        replicas: vec![from],
                    });
                }
                return Adopted::Known;
            }
            None => {
                if self.conns.len() >= self.config.limits.max_connections {
                    return Adopted::Refused;
                }
                let mut c = Conn::adopted(key, svc, now, from, rec);
                // An agent that handed over its records already, without
                // this one, never sends it (its replica left the connection
                // before the takeover, or its server was restarted): the
                // first agent to register had the client wait `ADOPT_WAIT`
                // for it on every connection another agent brought later.
                c.records_already_in(&self.records_in);
                c.set_check(self.check_mode(svc));
                c.set_delivery(self.config.services[svc.0].delivery);
                c.set_ack(
                    self.config.services[svc.0].ack,
                    self.config.limits.log_per_connection,
                    !self.config.services[svc.0].stateless,
                );
                self.conns.insert(key, c);
                true
            }
        };
        let ends = self
            .order
            .get_mut(svc.0)
            .map(|o| o.recent_ends(&key, crate::conn::PROMPT_AT))
            .unwrap_or_default();
        let Some(added) = self.on_conn(now, key, |c, ctx| {
            c.adopt_order(rec.accepted, rec.input_end, &ends);
            c.adopt_leg(ctx, replica, &mine, rec.snd_una, rec.fin_received)
        }) else {
            return Adopted::Refused;
        };
        self.after(now, key);
        if fresh {
            self.replay_orphans(now, key);
        }
        match (fresh, added) {
            (true, _) => {
                self.counters.connections_adopted += 1;
                let start = self.rebuild.map_or(now, |(t, _)| t);
                let n = self.rebuild.map_or(0, |(_, n)| n);
                self.rebuild = Some((start, n + 1));
                Adopted::New
            }
            (false, true) => Adopted::Leg,
            (false, false) => Adopted::Known,
        }
    }

    /// The agent of `from` handed over all its records ([`Router::adopt`]
    /// for each, in one batch as it registered): connections being rebuilt
    /// stop waiting for a record of `from` that was not among them.
    pub fn records_done(&mut self, now: Instant, from: Ipv4Addr) {
        self.note_time(now);
        self.records_in.insert(from);
        let keys: Vec<ConnKey> = self
            .conns
            .iter()
            .filter(|(_, c)| c.recovering())
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            if self
                .on_conn(now, key, |c, ctx| c.agent_records_done(ctx, from))
                .is_some()
            {
                self.after(now, key);
            }
        }
        self.apply_down(now);
    }

    /// The control plane stored the record of `key` (announced with
    /// `AgentMsg::Established`) at every live replica's agent: its SYN-ACK,
    /// held for that (`Timeouts::record_commit`), goes to the client.
    /// Anything else (unknown, already sent) is ignored.
    pub fn record_stored(&mut self, now: Instant, key: ConnKey) {
        if !self.conns.get(&key).is_some_and(|c| c.is_committing()) {
            return;
        }
        self.on_conn(now, key, |c, ctx| c.commit_synack(ctx, true));
        self.after(now, key);
    }

    /// One agent stored the record of `key`, not every one yet
    /// ([`Router::record_stored`] follows when all did): should its
    /// SYN-ACK be held past `Timeouts::record_commit`, it goes now.
    pub fn record_heard(&mut self, now: Instant, key: ConnKey) {
        self.note_time(now);
        if !self.conns.get(&key).is_some_and(|c| c.is_committing()) {
            return;
        }
        self.on_conn(now, key, |c, ctx| c.commit_heard(ctx));
        self.after(now, key);
    }

    /// No agent is left to store the record of `key`: every one it went to
    /// is gone (disconnected, or its host lost) without storing it, or no
    /// agent of its replicas was registered to send it to. Its SYN-ACK goes
    /// unconfirmed now, unless this router is on probation or cut off from
    /// every agent (see `Conn::may_send_uncommitted`): a router whose
    /// agents all fell silent (another router took its addresses, and
    /// clients still reached it by their stale neighbour entries) gave a
    /// client a connection no router could find.
    pub fn record_unstored(&mut self, now: Instant, key: ConnKey) {
        self.note_time(now);
        if !self.conns.get(&key).is_some_and(|c| c.is_committing()) {
            return;
        }
        self.on_conn(now, key, |c, ctx| c.commit_orphaned(ctx));
        self.after(now, key);
    }

    /// Every connection adopted since the rebuild began is whole again (or
    /// gone): say so once, with how long it took.
    pub(super) fn check_rebuilt(&mut self, now: Instant) {
        let Some((start, n)) = self.rebuild else {
            return;
        };
        if self.counters.connections_rebuilt + self.rebuild_dropped
            >= self.counters.connections_adopted
        {
            self.rebuild = None;
            self.out.event(Event::TableRebuilt {
                connections: n,
                after_ms: u64::try_from(now.saturating_sub(start).as_millis()).unwrap_or(u64::MAX),
            });
        }
    }

    /// Next message for the agents (records, the sequencer's order, who is
    /// out of service), in the order produced.
    pub fn poll_agent_msg(&mut self) -> Option<AgentMsg> {
        loop {
            // Inputs are numbered as they leave, per service, so the numbers
            // follow the order the core produced them in and have no gaps.
            // (Replays come numbered.)
            let mut input = match self.out.agents.pop_front()? {
                ToAgents::Msg(m) => return Some(m),
                ToAgents::Input(input) => input,
            };
            let svc = self.by_vip.get(&(input.key.vip, input.key.vport)).copied();
            let Some(svc) = svc else {
                // Never: a connection belongs to a service. Left unnumbered.
                return Some(input.numbered(0));
            };
            // A replica out of the group gets no more of the order: its
            // server's state is no longer the group's, and the events of
            // the connections it was in would reach a restarted server's
            // shim without the others' (a hole). It comes back through a
            // join, whose `Join` events are its first.
            let key = input.key;
            input.replicas.retain(|&a| self.gets_order(svc, a, key));
            if self.order[svc.0].waiting.is_none() && self.left_out(svc, &input) {
                // At once, before the next packet: nothing more goes to it.
                self.apply_down(self.last_now);
            }
            let o = &mut self.order[svc.0];
            if let Some(w) = &mut o.waiting {
                // Not numbered before the agents said where the order stands.
                w.deadline.get_or_insert(self.last_now + ORDER_WAIT);
                o.held.push_back(input);
                if o.held.len() >= ORDER_HOLD_MAX {
                    self.resume_order(svc);
                }
                continue;
            }
            return Some(o.number(input));
        }
    }

    /// A connection's input event about to be numbered leaves out a
    /// replica that serves in the group of a stateful service and whose
    /// servers follow the order: it was not in the connection when the
    /// connection's Accept went out (after a takeover, a replica the
    /// agents' records do not name: the router before took it out, or had
    /// not yet, and the agents never heard). Its shim would find a hole in
    /// its order at this number; it leaves the group now, loudly
    /// (`OrderLost`, with its agent told to end its stale servers), and
    /// comes back by a join. (A replica whose servers do not follow the
    /// order, such as one added at run time to a service without ordered
    /// servers, misses nothing.) Returns whether one left.
    fn left_out(&mut self, svc: ServiceId, input: &Unnumbered) -> bool {
        let s = &self.config.services[svc.0];
        if s.stateless || input.key.client == Ipv4Addr::UNSPECIFIED {
            return false;
        }
        let mut any = false;
        for (i, addr) in s.replicas.iter().enumerate() {
            if matches!(self.health[svc.0][i], Member::Serving)
                && self.follows_order.contains(addr)
                && !input.replicas.contains(addr)
            {
                self.down.push((svc, ReplicaId(i), EvictReason::OrderLost));
                any = true;
            }
        }
        any
    }

    /// Whether replica `addr` of `svc` gets the service's input events: it
    /// is in the group (serving or draining), or joining with its
    /// connections being added, or still a live replica of the event's
    /// connection (the last one it was never taken from).
    fn gets_order(&self, svc: ServiceId, addr: Ipv4Addr, key: ConnKey) -> bool {
        let Some(i) = self.config.services[svc.0]
            .replicas
            .iter()
            .position(|r| *r == addr)
        else {
            return true;
        };
        match self.health[svc.0][i] {
            Member::Serving | Member::Draining { .. } => true,
            Member::Joining { .. } => self
                .joins
                .iter()
                .any(|j| j.svc == svc && j.joiner.0 == i && j.phase != join::JoinPhase::Quiescing),
            Member::Down { .. } | Member::Removed { .. } => {
                self.conns.get(&key).is_some_and(|c| c.live_leg_at(addr))
            }
        }
    }

    /// When the next clock tick is due (none: no ticks).
    pub(super) fn tick_due(&self) -> Option<Instant> {
        (self.config.sequencer && self.config.tick.is_some()).then_some(self.tick_next)
    }

    /// A clock tick into each service's order: the router's wall-clock time
    /// as an input event ([`InputKind::Tick`]), to the replicas that get
    /// the service's input. Not while the order waits for the agents'
    /// reports after a takeover (the time then jumps at the first tick
    /// after it), nor while a join holds the service's input for its
    /// checkpoint (the donor's server must stand still at the join's
    /// point; a live join's joiner gets the ticks once the input resumes).
    pub(super) fn clock_tick(&mut self, now: Instant) {
        let Some(every) = self.config.tick else {
            return;
        };
        self.tick_next = now + every;
        let at_us = now.as_micros().saturating_add(self.wall_offset_us);
        for si in 0..self.config.services.len() {
            let svc = ServiceId(si);
            let s = &self.config.services[si];
            let Some(&vport) = s.ports.first() else {
                continue;
            };
            if self.retired.contains(&svc)
                || self.order[si].waiting.is_some()
                || self
                    .joins
                    .iter()
                    .any(|j| j.svc == svc && j.resumed.is_none())
            {
                continue;
            }
            self.out.input(Unnumbered {
                key: ConnKey {
                    client: Ipv4Addr::UNSPECIFIED,
                    cport: 0,
                    vip: s.vip,
                    vport,
                },
                kind: crate::event::InputKind::Tick { at_us },
                replicas: s.replicas.clone(),
            });
        }
    }

    /// Whether replica `replica`'s agent, registering, says another router
    /// served since this one numbered the service's input: it got an input
    /// event this router never numbered, or another event under a number
    /// this router used. Then this router's table, order and verdicts are
    /// stale (it lost its address to the other, for a while: a standby
    /// that took over when this one stalled, and died since), and acting
    /// on them would tell healthy replicas' agents to end their servers
    /// and number on over the other's order. Returns why, for the log;
    /// the caller then starts over ([`Router::start_over`]) before it
    /// handles anything of that agent's.
    pub fn superseded(&self, replica: Ipv4Addr, reports: &[OrderReport]) -> Option<String> {
        if !self.config.sequencer {
            return None;
        }
        for (svc, s) in self.config.services.iter().enumerate() {
            if !s.replicas.contains(&replica) {
                continue;
            }
            let o = &self.order[svc];
            for r in reports
                .iter()
                .filter(|r| r.vip == s.vip && s.ports.contains(&r.vport))
            {
                if let Some(n) = o.contradicted_by(r) {
                    return Some(format!(
                        "service {}: the agent of {replica} has input event {n} of an order this router did not number (it numbered up to {})",
                        s.name, o.seq
                    ));
                }
            }
        }
        None
    }

    /// Start over as a router that just started: no connection, no verdict,
    /// the input order held until the agents report where it stands, and
    /// (when agents were required) no replica serving before its own agent
    /// registered. The agents then hand over their records as in a
    /// takeover. For a router found superseded ([`Router::superseded`]).
    pub fn start_over(&mut self) {
        let agents = self.agents.is_some();
        let wall = self.wall_offset_us;
        let mut fresh = Router::new(self.config.clone(), self.secret);
        fresh.wall_offset_us = wall;
        fresh.last_now = self.last_now;
        fresh.await_order();
        if agents {
            fresh.require_agents();
        }
        *self = fresh;
    }

    /// After a start or a takeover: hold every service's input numbering
    /// until its replicas' agents reported where the order stands
    /// ([`Router::order_report`]), or [`ORDER_WAIT`] after the first report
    /// or the first event held. Only with `Config::sequencer`.
    pub fn await_order(&mut self) {
        if !self.config.sequencer {
            return;
        }
        for o in &mut self.order {
            if o.waiting.is_none() {
                o.waiting = Some(Waiting::default());
            }
        }
    }

    /// Replica `replica`'s agent reports where the order stands (one
    /// report per service port it saw events of; services it reports
    /// nothing of count as "never got an event"). The order resumes once
    /// every live replica of a service reported. A report after that
    /// brings that agent up to date from the router's log.
    pub fn order_report(&mut self, now: Instant, replica: Ipv4Addr, reports: &[OrderReport]) {
        self.note_time(now);
        for svc in 0..self.order.len() {
            let s = &self.config.services[svc];
            let Some(ri) = s.replicas.iter().position(|r| *r == replica) else {
                continue;
            };
            let mut mine = OrderReport {
                vip: s.vip,
                vport: 0,
                last_seq: 0,
                tail: Vec::new(),
            };
            for r in reports
                .iter()
                .filter(|r| r.vip == s.vip && s.ports.contains(&r.vport))
            {
                mine.last_seq = mine.last_seq.max(r.last_seq);
                mine.tail.extend_from_slice(&r.tail);
            }
            let o = &mut self.order[svc];
            if o.waiting.is_some() {
                o.report(replica, &mine);
                if let Some(w) = &mut o.waiting {
                    w.deadline.get_or_insert(now + ORDER_WAIT);
                }
                let health = &self.health[svc];
                let all = o.waiting.as_ref().is_some_and(|w| {
                    s.replicas
                        .iter()
                        .enumerate()
                        .all(|(i, r)| !health[i].in_group() || w.reported.contains_key(r))
                });
                if all {
                    self.resume_order(ServiceId(svc));
                }
                continue;
            }
            // Late: bring it up to date from the log.
            o.report(replica, &mine);
            let (last, top) = (mine.last_seq, o.seq);
            if last == 0 || last >= top || !self.health[svc][ri].in_group() {
                continue;
            }
            let (replays, mut lost) = match o.replay(replica, last.saturating_add(1), top) {
                Ok(v) => (v, Vec::new()),
                Err(n) => (Vec::new(), vec![(replica, n)]),
            };
            if s.stateless {
                // See `order_lost`.
                lost.clear();
            }
            let replayed = replays.len();
            let service = s.name.clone();
            self.order_lost(ServiceId(svc), &lost);
            // Ahead of the events queued unnumbered (they come after `top`).
            for ev in replays.into_iter().rev() {
                self.out.agents.push_front(ToAgents::Msg(ev));
            }
            self.out.event(Event::OrderResumed {
                service,
                last: top,
                reported: vec![replica],
                missing: Vec::new(),
                replayed,
                lost,
            });
        }
        self.apply_down(now);
        self.open_held_syns(now);
    }

    /// Number on: replays for the agents that are behind first, then the
    /// held events, ahead of everything else queued.
    pub(super) fn resume_order(&mut self, svc: ServiceId) {
        let o = &mut self.order[svc.0];
        let reported = o.reported();
        let mut r = o.resume();
        if self.config.services[svc.0].stateless {
            // See `order_lost`.
            r.lost.clear();
        }
        let mut front: Vec<AgentMsg> = r.replays;
        let held: Vec<Unnumbered> = o.held.drain(..).collect();
        for input in &held {
            self.left_out(svc, input);
        }
        let s = &self.config.services[svc.0];
        let o = &mut self.order[svc.0];
        for input in held {
            front.push(o.number(input));
        }
        for ev in front.into_iter().rev() {
            self.out.agents.push_front(ToAgents::Msg(ev));
        }
        let missing = s
            .replicas
            .iter()
            .enumerate()
            .filter(|(i, a)| self.health[svc.0][*i].in_group() && !reported.contains(a))
            .map(|(_, a)| *a)
            .collect();
        let last = o.seq;
        let name = s.name.clone();
        self.order_lost(svc, &r.lost);
        self.out.event(Event::OrderResumed {
            service: name,
            last,
            reported,
            missing,
            replayed: r.replayed,
            lost: r.lost,
        });
    }

    /// Replicas that missed input events nobody can replay to them: their
    /// shims cannot keep the order, so they leave the group (fail safe:
    /// never serve on in the kernel's order). Applied with the next input
    /// or timer, like every other way out. Not in a stateless service
    /// (its callers clear `lost` there): its servers keep no state the
    /// order keeps equal, as input left out of one does not take it out
    /// (`left_out`), and a shim that finds a hole in its order still gives
    /// the order up itself. (A router cut interrupts the agents' streams,
    /// and the one taking over found two healthy replicas of a stateless
    /// service behind: they left the group, their records were refused,
    /// and a connection only they served was lost.)
    pub(super) fn order_lost(&mut self, svc: ServiceId, lost: &[(Ipv4Addr, u64)]) {
        if self.config.services[svc.0].stateless {
            return;
        }
        for (addr, _) in lost {
            if let Some(i) = self.config.services[svc.0]
                .replicas
                .iter()
                .position(|r| r == addr)
            {
                self.down.push((svc, ReplicaId(i), EvictReason::OrderLost));
            }
        }
    }
}
