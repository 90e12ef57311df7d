//! Who serves a service: membership (COSCANet-FT §V: replicas added and
//! removed at any time), replicas taken out by failure verdicts, lost
//! hosts and the agents' reports, and the health probes that take a
//! stateless service's replica back.

use super::*;

impl Router {
    /// Mark replicas down that an input proved dead, and take them out of
    /// every connection.
    pub(super) fn apply_down(&mut self, now: Instant) {
        self.check_rebuilt(now);
        if self.on_probation() {
            // The router did not run for a while and may have been
            // superseded: verdicts wait until it knows (`note_time`).
            return;
        }
        for (svc, replica) in std::mem::take(&mut self.missed) {
            // Taken out of a connection that could still get input: a
            // server that keeps the service's state in its order misses
            // that input from now on (`Ctx::missed`).
            let s = &self.config.services[svc.0];
            if !s.stateless && self.follows_order.contains(&s.replicas[replica.0]) {
                self.down.push((svc, replica, EvictReason::MissedInput));
            }
        }
        while let Some((svc, replica, reason)) = self.down.pop() {
            let Some(v) = self.health.get_mut(svc.0) else {
                continue;
            };
            // The last replica of a service in the group is never marked
            // down: there is nothing to fail over to, and a replica that was
            // only slow (or a path that was only cut for a while) must still
            // get new connections when it answers again.
            if !v.get(replica.0).is_some_and(Member::in_group)
                || v.iter().filter(|h| h.in_group()).count() <= 1
            {
                continue;
            }
            v[replica.0] = Member::Down { reason, since: now };
            if self.config.services[svc.0].stateless {
                self.probe_next.insert((svc, replica), now + PROBE_EVERY);
            }
            let connections = self.evict_everywhere(now, svc, replica, EvictReason::ReplicaDown);
            let s = &self.config.services[svc.0];
            let silent_ms = self.heard[svc.0]
                .get(replica.0)
                .copied()
                .flatten()
                .map(|t| u64::try_from(now.saturating_sub(t).as_millis()).unwrap_or(u64::MAX));
            self.out.event(Event::ReplicaDown {
                service: s.name.clone(),
                replica: s.replicas[replica.0],
                reason,
                connections,
                silent_ms,
            });
            self.announce_out_of_service();
            let addr = self.config.services[svc.0].replicas[replica.0];
            let stale = self.stale_in(addr);
            if !stale.is_empty() {
                let why = format!("it was taken out ({reason:?})");
                self.restart_stale(addr, &stale, &why);
            }
        }
    }

    /// Tell the agent of `addr` that the servers following the order
    /// there are stale in `services` (see `AgentMsg::Restart`).
    pub(super) fn restart_stale(&mut self, addr: Ipv4Addr, services: &[String], why: &str) {
        self.out.agent(AgentMsg::Restart {
            replica: addr,
            reason: format!(
                "replica {addr} is out of service in {} while another replica serves: {why}; its servers following the order miss input from now on",
                services.join(", ")
            ),
        });
    }

    /// Gets new connections (the agent's registration aside).
    pub(super) fn up(&self, svc: ServiceId, replica: ReplicaId) -> bool {
        self.member(svc, replica).is_some_and(|m| m.serves_new())
    }

    /// Still in its connections and the input order (serving or draining).
    pub(super) fn in_group(&self, svc: ServiceId, replica: ReplicaId) -> bool {
        self.member(svc, replica).is_some_and(|m| m.in_group())
    }

    pub(super) fn member(&self, svc: ServiceId, replica: ReplicaId) -> Option<Member> {
        self.health
            .get(svc.0)
            .and_then(|v| v.get(replica.0))
            .copied()
    }

    /// Serves new connections: up, and (with `require_agents`) its
    /// agent registered with this router.
    /// How a connection of `svc` compares its replicas' later copies: a
    /// service that does not vote compares after the fact (`conn/check.rs`);
    /// a difference takes a stateful service's replica out of the service,
    /// a stateless one's out of the connection.
    pub(super) fn check_mode(&self, svc: ServiceId) -> Option<crate::conn::CheckMode> {
        let s = &self.config.services[svc.0];
        let primary = s.voting == crate::config::Voting::Primary;
        match s.voting {
            v if !v.unvoted() => None,
            _ if s.stateless => Some(crate::conn::CheckMode {
                service_wide: false,
                primary,
            }),
            _ => Some(crate::conn::CheckMode {
                service_wide: true,
                primary,
            }),
        }
    }

    pub(super) fn in_service(&self, svc: ServiceId, replica: ReplicaId) -> bool {
        self.up(svc, replica)
            && self
                .agents
                .as_ref()
                .is_none_or(|a| a.contains(&self.config.services[svc.0].replicas[replica.0]))
    }

    /// Every replica out of service, every service.
    pub fn out_of_service(&self) -> Vec<OutOfService> {
        let mut v = Vec::new();
        for (svc, s) in self.config.services.iter().enumerate() {
            for (i, &replica) in s.replicas.iter().enumerate() {
                if !self.up(ServiceId(svc), ReplicaId(i)) {
                    v.push(OutOfService {
                        vip: s.vip,
                        port: s.ports.first().copied().unwrap_or(0),
                        replica,
                    });
                }
            }
        }
        v
    }

    pub(super) fn announce_out_of_service(&mut self) {
        let down = self.out_of_service();
        self.out.agent(AgentMsg::OutOfService { down });
    }

    /// A replica's host is gone (its agent stopped heartbeating): mark it
    /// down in every service that lists it and take it out of every
    /// connection, even idle ones that passive detection cannot judge.
    /// Returns how many services it was marked down in.
    ///
    /// A router that has not served a connection yet (a standby whose
    /// agents moved to the router that holds the addresses, or one just
    /// started) judges nobody: the replica only stops being registered
    /// here, and gets no connection until its agent registers again. What
    /// happened to it meanwhile is the serving router's to judge, and that
    /// router's verdicts reach this one through the agents
    /// ([`Router::reported_down`]).
    pub fn host_lost(&mut self, now: Instant, addr: Ipv4Addr) -> usize {
        // The first thing a router that did not run hears may be this
        // verdict (its control sessions ran before its data plane): the
        // pause is noted first, so that it waits on probation.
        self.note_time(now);
        self.fail_joins_of(now, addr, "its host was lost (agent silent)");
        if let Some(a) = &mut self.agents {
            if self.counters.connections_opened + self.counters.connections_adopted == 0 {
                a.remove(&addr);
                return 0;
            }
        }
        let mut n = 0;
        for (svc, s) in self.config.services.iter().enumerate() {
            for (i, r) in s.replicas.iter().enumerate() {
                let (svc, i) = (ServiceId(svc), ReplicaId(i));
                if *r == addr && self.in_group(svc, i) {
                    self.down.push((svc, i, EvictReason::HostLost));
                    n += 1;
                }
            }
        }
        self.apply_down(now);
        n
    }

    /// A replica's server can no longer follow the sequencer's input order
    /// (its agent reported it, or the router could not deliver the order to
    /// its agent): mark it down in every service that lists it and take it
    /// out of every connection at once, like [`Router::host_lost`] (never a
    /// connection's or a service's last live replica). It does not come
    /// back when its agent registers again. Returns how many services it
    /// was marked down in.
    pub fn replica_failed(&mut self, now: Instant, addr: Ipv4Addr) -> usize {
        // As in `host_lost`: a router that did not run (its sessions'
        // writes to agents that moved to another router failed meanwhile)
        // notes its pause before it takes anyone out.
        self.note_time(now);
        self.fail_joins_of(now, addr, "its server lost the input order");
        let mut n = 0;
        for (svc, s) in self.config.services.iter().enumerate() {
            for (i, r) in s.replicas.iter().enumerate() {
                let health = self.health.get(svc).map_or(&[][..], |v| &v[..]);
                // Counted only where it is really taken out (not the last).
                if *r == addr
                    && health.get(i).is_some_and(Member::in_group)
                    && health.iter().filter(|h| h.in_group()).count() > 1
                {
                    self.down
                        .push((ServiceId(svc), ReplicaId(i), EvictReason::OrderLost));
                    n += 1;
                }
            }
        }
        self.apply_down(now);
        n
    }

    /// With agents (`[control]`): a replica gets new connections only once
    /// its own agent registered with this router ([`Router::agent_registered`]).
    /// A router that starts or takes over cannot tell a current replica from
    /// one that left the group under its predecessor until the agents told
    /// it ([`Router::reported_down`]); an agent registers within
    /// milliseconds, and a client's SYN that finds no replica in service
    /// meanwhile is dropped (it retransmits) rather than refused.
    pub fn require_agents(&mut self) {
        self.agents.get_or_insert_with(Default::default);
    }

    /// A replica's agent registered (again). A replica that left the group
    /// — its host was lost, it crashed, reset, stalled or diverged — stays
    /// out of service: its server missed input while it was out, so its
    /// state is not the group's (a cut link that comes back brings back a
    /// stale server). Only [`Router::enable_replica`] brings it back.
    /// Returns the names of the services in which it stays out.
    pub fn agent_registered(&mut self, addr: Ipv4Addr) -> Vec<String> {
        // An agent's voice: not cut off (any more).
        self.cut_off = false;
        if let Some(a) = &mut self.agents {
            a.insert(addr);
        }
        self.agent_since.insert(addr, self.last_now);
        // Its records follow (again): until they are in, a connection
        // adopted from another agent's record waits for its own.
        self.records_in.remove(&addr);
        let mut out = Vec::new();
        for (svc, s) in self.config.services.iter().enumerate() {
            for (i, r) in s.replicas.iter().enumerate() {
                if *r == addr && !self.in_group(ServiceId(svc), ReplicaId(i)) {
                    out.push(s.name.clone());
                }
            }
        }
        out
    }

    /// An agent (`reporter`) reports replicas out of service, as the
    /// router before this one told it: they stay out here too (a router
    /// that starts or takes over must not readmit them). Returns how many
    /// were taken out.
    ///
    /// A replica this router brought back into service itself is not taken
    /// out: the report is older than that verdict (an agent that was
    /// stopped, or cut off, past the failure-detection time missed the
    /// announcement that the replica was back, and registers again with
    /// the list it had before). Whatever a router decides is announced to
    /// every agent, so no agent can know of a later verdict than its own.
    pub fn reported_down(
        &mut self,
        now: Instant,
        reporter: Ipv4Addr,
        down: &[OutOfService],
    ) -> usize {
        self.note_time(now);
        let _ = reporter;
        let mut n = 0;
        for d in down {
            let Some(&svc) = self.by_vip.get(&(d.vip, d.port)) else {
                continue;
            };
            let s = &self.config.services[svc.0];
            let Some(i) = s.replicas.iter().position(|r| *r == d.replica) else {
                continue;
            };
            let i = ReplicaId(i);
            if self.readmitted.contains(&(svc, i)) {
                continue;
            }
            if self.in_group(svc, i) && !self.down.contains(&(svc, i, EvictReason::ReportedDown)) {
                self.down.push((svc, i, EvictReason::ReportedDown));
                n += 1;
            }
        }
        self.apply_down(now);
        n
    }

    /// Operator action: bring replica `addr` back into service (every
    /// service that lists it, or only `service`): one that is down, or
    /// draining. Its server must hold the group's state again (restored by
    /// the operator): nothing here can check that. Connections it left stay
    /// without it; new ones use it. A removed replica comes back with
    /// [`Router::add_replica`] instead. Returns the services it came back in.
    ///
    /// Where the servers follow the sequencer's order (`ftnet run`) the
    /// driver does not take the operator's word for a down replica that
    /// missed input ([`Router::enable_needs_join`]): it starts a join,
    /// which proves the state, instead.
    pub fn enable_replica(&mut self, addr: Ipv4Addr, service: Option<&str>) -> Vec<String> {
        let mut back = Vec::new();
        for (svc, s) in self.config.services.iter().enumerate() {
            if service.is_some_and(|n| n != s.name) || self.retired.contains(&ServiceId(svc)) {
                continue;
            }
            for (i, r) in s.replicas.iter().enumerate() {
                let m = self.health[svc][i];
                if *r == addr && matches!(m, Member::Down { .. } | Member::Draining { .. }) {
                    self.health[svc][i] = Member::Serving;
                    self.readmitted.insert((ServiceId(svc), ReplicaId(i)));
                    self.probe_next.remove(&(ServiceId(svc), ReplicaId(i)));
                    back.push(s.name.clone());
                    self.out.event(Event::ReplicaUp {
                        service: s.name.clone(),
                        replica: addr,
                    });
                }
            }
        }
        if !back.is_empty() {
            self.announce_out_of_service();
        }
        back
    }

    /// The services (all that list `addr`, or only `service`) in which
    /// `replica enable` cannot readmit replica `addr`: it is down there,
    /// the service can be joined ([`Router::joinable`]), and another
    /// replica serves, so the group's state lives on without it. It comes
    /// back there only by a join ([`Router::join_replica`]).
    pub fn enable_needs_join(&self, addr: Ipv4Addr, service: Option<&str>) -> Vec<String> {
        let names = self.joinable(addr);
        self.config
            .services
            .iter()
            .enumerate()
            .filter(|(_, s)| names.contains(&s.name) && service.is_none_or(|n| n == s.name))
            .filter(|&(svc, _)| self.another_serves(ServiceId(svc), addr))
            .map(|(_, s)| s.name.clone())
            .collect()
    }

    /// A replica other than `addr` serves service `svc`: the group's state
    /// lives on without `addr`.
    pub(super) fn another_serves(&self, svc: ServiceId, addr: Ipv4Addr) -> bool {
        let s = &self.config.services[svc.0];
        (0..s.replicas.len()).any(|i| s.replicas[i] != addr && self.in_service(svc, ReplicaId(i)))
    }

    /// The running service named `name` (not one removed at run time).
    fn live_service(&self, name: &str) -> Result<ServiceId, MembershipError> {
        self.config
            .services
            .iter()
            .enumerate()
            .position(|(i, s)| s.name == name && !self.retired.contains(&ServiceId(i)))
            .map(ServiceId)
            .ok_or_else(|| MembershipError::NoService(name.to_string()))
    }

    /// The service named `name`, and replica `addr`'s slot in it.
    pub(super) fn find_member(
        &self,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(ServiceId, Option<ReplicaId>), MembershipError> {
        let svc = self.live_service(name)?.0;
        let slot = self.config.services[svc]
            .replicas
            .iter()
            .position(|r| *r == addr)
            .map(ReplicaId);
        Ok((ServiceId(svc), slot))
    }

    /// Operator action (COSCANet-FT §V: replicas "added and removed at any
    /// time"): replica `addr` becomes a member of service `name` and gets
    /// new connections (with agents, once its agent registered); the
    /// connections open now go on without it. Its server must hold the
    /// group's state (a stateless server, or state restored by the
    /// operator): nothing here can check that. A removed replica's slot is
    /// used again. Not written to the configuration file.
    pub fn add_replica(
        &mut self,
        now: Instant,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(), MembershipError> {
        self.add_member(now, name, addr, Member::Serving)
    }

    /// [`Router::add_replica`] for a service whose servers keep their
    /// state and follow the input order: the replica becomes a member that
    /// is out of service ([`EvictReason::NotJoined`]) and serves only once
    /// it joined with the group's state ([`Router::join_replica`], which
    /// the driver starts when a fresh server of the replica connects to
    /// its agent; its agent is asked to end a server running there now,
    /// [`AgentMsg::Restart`]). An added server's state is unknown: it
    /// never serves on the operator's word alone.
    pub fn add_replica_to_join(
        &mut self,
        now: Instant,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(), MembershipError> {
        let down = Member::Down {
            reason: EvictReason::NotJoined,
            since: now,
        };
        self.add_member(now, name, addr, down)?;
        // A server of it that already follows the order holds a state (and
        // maybe connections of an earlier membership) that are not the
        // group's: only a fresh one can join.
        if self.stale_in(addr).iter().any(|s| s == name) {
            self.out.agent(AgentMsg::Restart {
                replica: addr,
                reason: format!(
                    "replica {addr} was added to {name}, whose servers follow the input order: a server of it running before the add holds a state that is not the group's; a fresh one joins with the group's state"
                ),
            });
        }
        Ok(())
    }

    fn add_member(
        &mut self,
        now: Instant,
        name: &str,
        addr: Ipv4Addr,
        m: Member,
    ) -> Result<(), MembershipError> {
        self.note_time(now);
        let (svc, slot) = self.add_slot(name, addr)?;
        let r = match slot {
            Some(r) => r,
            None => {
                let s = &mut self.config.services[svc.0];
                s.replicas.push(addr);
                self.health[svc.0].push(m);
                self.heard[svc.0].push(None);
                self.replica_bytes[svc.0].push(0);
                ReplicaId(s.replicas.len() - 1)
            }
        };
        self.health[svc.0][r.0] = m;
        self.readmitted.insert((svc, r));
        for p in self.config.services[svc.0].ports.clone() {
            self.by_replica.insert((addr, p), (svc, r));
        }
        self.out.event(Event::ReplicaAdded {
            service: name.to_string(),
            replica: addr,
            joins: m != Member::Serving,
        });
        self.announce_out_of_service();
        Ok(())
    }

    /// Operator action (SIGHUP: a `[[service]]` new in the file): the
    /// router takes service `s` as if it had been in its configuration
    /// from the start — its replicas serving (with agents, once each
    /// registered), its own input order. Connections of the other services
    /// are not touched. Refused, changing nothing, when its name, one of
    /// its VIP's ports or one of its replicas' ports is taken by a running
    /// service (a removed replica's port is free).
    pub fn add_service(
        &mut self,
        now: Instant,
        s: crate::config::Service,
    ) -> Result<(), MembershipError> {
        self.note_time(now);
        self.check_add_service(&s)?;
        let svc = ServiceId(self.config.services.len());
        for &p in &s.ports {
            self.by_vip.insert((s.vip, p), svc);
            for (ri, &r) in s.replicas.iter().enumerate() {
                self.by_replica.insert((r, p), (svc, ReplicaId(ri)));
            }
        }
        self.health.push(vec![Member::Serving; s.replicas.len()]);
        self.heard.push(vec![None; s.replicas.len()]);
        self.replica_bytes.push(vec![0; s.replicas.len()]);
        self.service_bytes.push((0, 0));
        self.order.push(SvcOrder::default());
        self.out.event(Event::ServiceAdded {
            service: s.name.clone(),
            vip: s.vip,
            ports: s.ports.clone(),
            replicas: s.replicas.clone(),
        });
        self.config.services.push(s);
        self.announce_out_of_service();
        Ok(())
    }

    /// Operator action (SIGHUP: a `[[service]]` gone from the file): the
    /// service takes no new connection from now on (a SYN to its VIP port
    /// is answered as by a closed port), and its open connections finish
    /// as they would have. Returns how many are open. Its name, VIP ports
    /// and (once its connections ended) its replicas' ports are free for
    /// [`Router::add_service`].
    pub fn remove_service(&mut self, now: Instant, name: &str) -> Result<usize, MembershipError> {
        self.note_time(now);
        let svc = self.live_service(name)?;
        self.by_vip.retain(|_, v| *v != svc);
        self.retired.insert(svc);
        self.probe_next.retain(|(s, _), _| *s != svc);
        self.join_retry.retain(|(s, _), _| *s != svc);
        let joins: Vec<u64> = self
            .joins
            .iter()
            .filter(|j| j.svc == svc)
            .map(|j| j.id)
            .collect();
        for id in joins {
            self.end_join(now, id, Err("its service was removed".into()));
        }
        // Open ones: those closed and in their quiet period are over.
        let connections = self
            .conns_of(svc)
            .iter()
            .filter(|k| self.conns.get(k).is_some_and(|c| !c.is_closed()))
            .count();
        self.out.event(Event::ServiceRemoved {
            service: name.to_string(),
            connections,
        });
        Ok(connections)
    }

    /// The services that run (all configured ones but those removed at
    /// run time).
    pub fn live_services(&self) -> Vec<&crate::config::Service> {
        self.config
            .services
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.retired.contains(&ServiceId(*i)))
            .map(|(_, s)| s)
            .collect()
    }

    /// Whether [`Router::add_service`] would take `s`, changing nothing.
    pub fn check_add_service(&self, s: &crate::config::Service) -> Result<(), MembershipError> {
        let live = |i: &ServiceId| !self.retired.contains(i);
        if self
            .config
            .services
            .iter()
            .enumerate()
            .any(|(i, o)| o.name == s.name && live(&ServiceId(i)))
        {
            return Err(MembershipError::ServiceExists(s.name.clone()));
        }
        for &p in &s.ports {
            if let Some(other) = self.by_vip.get(&(s.vip, p)) {
                return Err(MembershipError::VipTaken {
                    vip: s.vip.to_string(),
                    port: p,
                    other: self.config.services[other.0].name.clone(),
                });
            }
            for &r in &s.replicas {
                if let Some(&(other, ri)) = self.by_replica.get(&(r, p)) {
                    if self.retired.contains(&other) {
                        // Its replies still map to the removed service's
                        // open connections until they end.
                        let open = self.conns_of(other).len();
                        if open > 0 {
                            return Err(MembershipError::PortBusy {
                                replica: r.to_string(),
                                port: p,
                                other: self.config.services[other.0].name.clone(),
                                connections: open,
                            });
                        }
                    } else if !matches!(self.health[other.0][ri.0], Member::Removed { .. }) {
                        return Err(MembershipError::PortTaken {
                            replica: r.to_string(),
                            port: p,
                            other: self.config.services[other.0].name.clone(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether [`Router::add_replica`] would take `addr` into service
    /// `name`, changing nothing (a driver checks before it routes the
    /// replica's replies to the router).
    pub fn check_add(&self, name: &str, addr: Ipv4Addr) -> Result<(), MembershipError> {
        self.add_slot(name, addr).map(|_| ())
    }

    /// The service and the replica's slot, if it has one (a removed
    /// replica), for [`Router::add_replica`].
    pub(super) fn add_slot(
        &self,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(ServiceId, Option<ReplicaId>), MembershipError> {
        let (svc, slot) = self.find_member(name, addr)?;
        let s = &self.config.services[svc.0];
        if let Some(r) = slot {
            let m = self.health[svc.0][r.0];
            if !matches!(m, Member::Removed { .. }) {
                return Err(MembershipError::AlreadyMember {
                    service: s.name.clone(),
                    replica: addr.to_string(),
                    state: m.state(),
                });
            }
        }
        for &p in &s.ports {
            if let Some(&(other, r)) = self.by_replica.get(&(addr, p)) {
                let o = &self.config.services[other.0];
                if other != svc && !matches!(self.health[other.0][r.0], Member::Removed { .. }) {
                    return Err(MembershipError::PortTaken {
                        replica: addr.to_string(),
                        port: p,
                        other: o.name.clone(),
                    });
                }
            }
        }
        Ok((svc, slot))
    }

    /// Operator action: replica `addr` of service `name` gets no new
    /// connections; the connections it is in finish with it
    /// ([`Event::ReplicaDrained`] once the last one left the table).
    /// Returns how many connections it is still in.
    pub fn drain_replica(
        &mut self,
        now: Instant,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<usize, MembershipError> {
        self.note_time(now);
        let (svc, r) = self.serving_member(name, addr)?;
        self.health[svc.0][r.0] = Member::Draining { since: now };
        self.drained.retain(|x| *x != (svc, r));
        let connections = self.connections_of(svc, r);
        self.out.event(Event::ReplicaDraining {
            service: name.to_string(),
            replica: addr,
            connections,
        });
        self.announce_out_of_service();
        self.check_drained(now);
        Ok(connections)
    }

    /// Operator action: replica `addr` leaves service `name` now: it is
    /// taken out of every connection like an eviction (never a
    /// connection's last replica: there it stays until the connection
    /// ends) and gets no new ones. Returns (connections left, connections
    /// where it stays as the last replica).
    pub fn remove_replica(
        &mut self,
        now: Instant,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(usize, usize), MembershipError> {
        self.note_time(now);
        let (svc, slot) = self.find_member(name, addr)?;
        let not_member = || MembershipError::NotAMember {
            service: name.to_string(),
            replica: addr.to_string(),
        };
        let r = slot.ok_or_else(not_member)?;
        let m = self.health[svc.0][r.0];
        if matches!(m, Member::Removed { .. }) {
            return Err(not_member());
        }
        let others = self.health[svc.0]
            .iter()
            .enumerate()
            .filter(|(i, h)| *i != r.0 && h.serves_new())
            .count();
        if m.in_group() && others == 0 {
            return Err(MembershipError::LastServing {
                service: name.to_string(),
                replica: addr.to_string(),
            });
        }
        self.health[svc.0][r.0] = Member::Removed { since: now };
        self.probe_next.remove(&(svc, r));
        // Every connection it is a live part of, closed ones in their quiet
        // period included: it is evicted from those too.
        let before = self.legs_in(svc, r);
        self.evict_everywhere(now, svc, r, EvictReason::Removed);
        let kept = self.legs_in(svc, r);
        self.out.event(Event::ReplicaRemoved {
            service: name.to_string(),
            replica: addr,
            left: before - kept,
            kept,
        });
        self.announce_out_of_service();
        Ok((before - kept, kept))
    }

    /// A serving replica of service `name` (drain applies to no other).
    pub(super) fn serving_member(
        &self,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(ServiceId, ReplicaId), MembershipError> {
        let (svc, slot) = self.find_member(name, addr)?;
        let r = slot.ok_or_else(|| MembershipError::NotAMember {
            service: name.to_string(),
            replica: addr.to_string(),
        })?;
        match self.health[svc.0][r.0] {
            Member::Serving => {}
            Member::Removed { .. } => {
                return Err(MembershipError::Removed {
                    service: name.to_string(),
                    replica: addr.to_string(),
                })
            }
            m => {
                return Err(MembershipError::AlreadyMember {
                    service: name.to_string(),
                    replica: addr.to_string(),
                    state: m.state(),
                })
            }
        }
        let others = self.health[svc.0]
            .iter()
            .enumerate()
            .filter(|(i, h)| *i != r.0 && h.serves_new())
            .count();
        if others == 0 {
            return Err(MembershipError::LastServing {
                service: name.to_string(),
                replica: addr.to_string(),
            });
        }
        Ok((svc, r))
    }

    /// Take replica `r` of `svc` out of every connection of the service
    /// (never a connection's last replica, see `Conn::evict_replica`).
    pub(super) fn evict_everywhere(
        &mut self,
        now: Instant,
        svc: ServiceId,
        r: ReplicaId,
        reason: EvictReason,
    ) -> usize {
        let keys: Vec<ConnKey> = self
            .conns
            .iter()
            .filter(|(_, c)| c.service() == svc)
            .map(|(k, _)| *k)
            .collect();
        let mut left = 0;
        for k in keys {
            left += usize::from(self.conns.get(&k).is_some_and(|c| c.has_live(r)));
            self.on_conn(now, k, |c, ctx| c.evict_replica(ctx, r, reason));
            self.after(now, k);
        }
        left
    }

    /// Connections replica `r` of `svc` is a live part of, closed ones in
    /// their quiet period included.
    pub(super) fn legs_in(&self, svc: ServiceId, r: ReplicaId) -> usize {
        self.conns
            .values()
            .filter(|c| c.service() == svc && c.has_live(r))
            .count()
    }

    /// Open connections replica `r` of `svc` is still a live part of (a
    /// closed one in its quiet period has finished).
    pub(super) fn connections_of(&self, svc: ServiceId, r: ReplicaId) -> usize {
        self.conns
            .values()
            .filter(|c| c.service() == svc && !c.is_closed() && c.has_live(r))
            .count()
    }

    /// When the table is next scanned for drained replicas: while one
    /// drains that was not announced drained.
    pub(super) fn drain_due(&self) -> Option<Instant> {
        let waiting = self.health.iter().enumerate().any(|(svc, v)| {
            v.iter().enumerate().any(|(i, m)| {
                matches!(m, Member::Draining { .. })
                    && !self.drained.contains(&(ServiceId(svc), ReplicaId(i)))
            })
        });
        waiting.then(|| {
            self.drain_checked
                .map_or(self.last_now, |t| t + DRAIN_CHECK)
        })
    }

    /// Draining replicas whose last connection left: say so once (they
    /// stay draining until an operator removes or enables them).
    pub(super) fn check_drained(&mut self, now: Instant) {
        if !self
            .health
            .iter()
            .flatten()
            .any(|m| matches!(m, Member::Draining { .. }))
        {
            return;
        }
        // A scan of the table: at most every DRAIN_CHECK while draining.
        if self.drain_checked.is_some_and(|t| now < t + DRAIN_CHECK) {
            return;
        }
        self.drain_checked = Some(now);
        for svc in 0..self.health.len() {
            for i in 0..self.health[svc].len() {
                let (sid, r) = (ServiceId(svc), ReplicaId(i));
                if matches!(self.health[svc][i], Member::Draining { .. })
                    && !self.drained.contains(&(sid, r))
                    && self.connections_of(sid, r) == 0
                {
                    self.drained.push((sid, r));
                    let s = &self.config.services[svc];
                    self.out.event(Event::ReplicaDrained {
                        service: s.name.clone(),
                        replica: s.replicas[i],
                    });
                }
            }
        }
        let health = &self.health;
        self.drained
            .retain(|(s, r)| matches!(health[s.0][r.0], Member::Draining { .. }));
    }

    /// The probe of replica `r` of `svc`: from the VIP, a port of the
    /// probe range, to the service's first port, with an ISN only the
    /// router can know (RFC 6528's keyed hash), so that an answer cannot be
    /// forged blind.
    pub(super) fn probe_key(&self, svc: ServiceId, r: ReplicaId) -> (ConnKey, SeqNum) {
        let s = &self.config.services[svc.0];
        let port = PROBE_PORT_BASE
            .wrapping_add(u16::try_from(r.0 % 1000).unwrap_or(0))
            .wrapping_add(u16::try_from((svc.0 % 4) * 1000).unwrap_or(0));
        let key = ConnKey {
            client: s.vip,
            cport: port,
            vip: s.replicas[r.0],
            vport: s.ports.first().copied().unwrap_or(0),
        };
        let isn = SeqNum(mod32(self.keyed(&key, 7)));
        (key, isn)
    }

    /// Probe the down replicas of stateless services that are due: a SYN
    /// each (answered by a SYN-ACK once its server listens again).
    pub(super) fn send_probes(&mut self, now: Instant) {
        let due: Vec<(ServiceId, ReplicaId)> = self
            .probe_next
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| *k)
            .collect();
        for (svc, r) in due {
            self.probe_next.insert((svc, r), now + PROBE_EVERY);
            let (key, isn) = self.probe_key(svc, r);
            let mut syn = Repr::new(key.cport, key.vport, isn, SeqNum(0), flags::SYN, 1024);
            syn.mss = Some(536);
            self.transmit
                .push_back(Packet::plain(syn.emit_ipv4(key.client, key.vip, &[])));
            self.counters.packets_out += 1;
            self.counters.probes_sent += 1;
        }
    }

    /// A replica answers the router's probe. A SYN-ACK for the probe's ISN:
    /// its server listens again, and a stateless service takes it back
    /// (the half-open probe is reset). A RST: still nobody listening.
    /// Anything else is dropped as not ours.
    pub(super) fn probe_answer(
        &mut self,
        now: Instant,
        svc: ServiceId,
        r: ReplicaId,
        seg: &Seg,
    ) -> Result<(), DropReason> {
        let (key, isn) = self.probe_key(svc, r);
        if seg.dport != key.cport {
            return Err(DropReason::NotOurs);
        }
        if seg.has(flags::RST) {
            return Ok(());
        }
        // RFC 9293 §3.10.7.3: an acceptable SYN-ACK acknowledges our SYN
        // exactly; any other is not an answer to this probe.
        if !(seg.has(flags::SYN) && seg.has(flags::ACK)) || seg.ack != isn.add(1) {
            return Err(DropReason::BadState);
        }
        let rst = Repr::new(key.cport, key.vport, isn.add(1), SeqNum(0), flags::RST, 0);
        self.transmit
            .push_back(Packet::plain(rst.emit_ipv4(key.client, key.vip, &[])));
        self.counters.packets_out += 1;
        self.probe_next.remove(&(svc, r));
        let Member::Down { reason, since } = self.health[svc.0][r.0] else {
            return Ok(());
        };
        self.health[svc.0][r.0] = Member::Serving;
        self.readmitted.insert((svc, r));
        let s = &self.config.services[svc.0];
        self.out.event(Event::ReplicaRejoined {
            service: s.name.clone(),
            replica: s.replicas[r.0],
            was: reason,
            down_ms: now
                .saturating_sub(since)
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX),
        });
        self.announce_out_of_service();
        Ok(())
    }
}
