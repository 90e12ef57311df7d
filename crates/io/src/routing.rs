//! Policy routing that steers the service's traffic into the TUN device.
//!
//! In the router's network namespace, all at priority T (the table number):
//! - packets *to* a virtual IP go to table T, whose default route is the TUN;
//! - packets *from* a replica's service port go to table T as well, so the
//!   router sees the replies it must merge — but only when they arrive on
//!   the interface the router reaches that replica by (its *binding*, the
//!   output device of `ip route get <replica>` at start-up);
//! - ICMP arriving on a replica's interface goes to table T, whatever its
//!   source: an error about a segment sent to a replica may come from any
//!   router on the replica's path (RFC 792; RFC 1812 §4.3.2.4), not only
//!   from the replica, so it is matched by where it comes from rather than
//!   by who claims to send it. The core takes only a destination
//!   unreachable that quotes a live connection's segment to a replica and
//!   drops the rest, so hosts behind a replica interface cannot ping
//!   *through* the router (replicas themselves never could);
//! - every other packet with a replica's source address that arrives on its
//!   own interface skips the next rule (`goto T+1`, an anchor `nop` rule
//!   there) and is routed as before;
//! - a packet with a replica's source address that arrives anywhere else is
//!   spoofed and dropped (`blackhole`; ingress filtering, RFC 2827 / BCP 38,
//!   RFC 3704 §2): a client can neither pose as a replica towards the
//!   router (a RST during its own handshake, an ICMP unreachable) nor have
//!   such a packet forwarded to a replica.
//!
//! This is a reverse-path check for the replicas' addresses only.
//! Strict `rp_filter` on the other interfaces would do the same for every
//! address, but it also drops legitimate client traffic on asymmetric paths
//! (a multi-homed router whose route back to a client leaves by another
//! interface), so it is not used; rp_filter stays off (see below).
//!
//! Limit: when clients and replicas share one interface (or two replicas
//! share one and one of them is compromised), the interface cannot tell
//! them apart and the core's own checks (RFC 5961 sequence checks, the
//! quoted segment of an ICMP error) are the only defence. The bindings are
//! resolved once, at start-up: a replica whose route moves to another
//! interface later needs a router restart.
//!
//! What the router itself writes to the TUN has src = client (towards a
//! replica) or src = VIP (towards a client), so none of it matches a rule
//! again and nothing loops. Forwarding must be on, and reverse-path
//! filtering off, because packets written to the TUN carry source addresses
//! the kernel would otherwise route elsewhere.
//!
//! Everything installed is described by [`Plan::record`] before it is
//! installed: the caller keeps that record where a successor finds it (the
//! router's lock file), so that after a crash exactly those rules — and no
//! rule of a running router — are removed ([`remove_recorded`]).
//!
//! Rules and routes are kept, logged and recorded as the words of the
//! equivalent `ip rule add` / `ip route replace` command, and installed and
//! removed over rtnetlink ([`crate::netlink`]): no `ip` binary is run. The
//! sysctls are files under `/proc/sys` (the kernel has no netlink interface
//! for them) and are written as files.

use crate::{netlink, Error};
use std::net::Ipv4Addr;
use tracing::{info, warn};

/// What to route into the TUN.
#[derive(Debug, Clone)]
pub struct RoutingSpec {
    pub tun: String,
    /// Policy routing table; also used as the priority of every rule we add
    /// (the anchor of the drop rules sits at `table + 1`).
    pub table: u32,
    pub vips: Vec<Ipv4Addr>,
    /// (replica, port) pairs whose replies the router must see.
    pub replica_ports: Vec<(Ipv4Addr, u16)>,
}

/// A replica bound to the interface the router reaches it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub replica: Ipv4Addr,
    pub dev: String,
    /// The next hop, when the replica is not on a directly connected network.
    pub via: Option<Ipv4Addr>,
}

impl Binding {
    /// The interface the router reaches `replica` by (the kernel's answer
    /// to `ip route get`, asked over netlink). Fails if it has no route, or
    /// only one through the TUN itself.
    pub fn resolve(tun: &str, replica: Ipv4Addr) -> Result<Binding, Error> {
        let r = replica;
        let (dev, via) = netlink::route_get(r)?;
        if dev == tun {
            return Err(Error::Command {
                cmd: format!("ip -o route get {r}"),
                status: format!("replica {r} is routed into the TUN {dev} itself"),
                stderr: "fix the routes to the replicas before starting the router".into(),
            });
        }
        Ok(Binding {
            replica: r,
            dev,
            via,
        })
    }
}

/// The rules for a replica added while the router runs, after those of
/// [`Plan`] (see [`Routing::add_replica`]).
#[derive(Debug, Clone)]
pub struct ReplicaRules {
    /// The replica they route (none: a VIP's rule).
    pub binding: Option<Binding>,
    rules: Vec<Vec<String>>,
}

impl ReplicaRules {
    /// Its replies on `ports` from its own interface go to the table; an
    /// interface no replica used before gets the ICMP rule; any other
    /// packet from its address on its own interface skips on (`goto` the
    /// anchor) and from anywhere else is dropped. Each rule matches only
    /// this replica's source address (but the ICMP one), so appended after
    /// the installed rules they change nothing for the others.
    pub fn new(
        table: u32,
        binding: Binding,
        ports: &[u16],
        installed_devs: &[String],
    ) -> ReplicaRules {
        let t = table.to_string();
        let anchor = table.saturating_add(1).to_string();
        let from = binding.replica.to_string();
        let dev = binding.dev.clone();
        let steer = |sel: &[&str]| {
            let mut v = strings(sel);
            v.extend(strings(&["lookup", &t, "pref", &t]));
            v
        };
        let mut rules = Vec::new();
        for p in ports {
            rules.push(steer(&[
                "from",
                &from,
                "iif",
                &dev,
                "ipproto",
                "tcp",
                "sport",
                &p.to_string(),
            ]));
        }
        if !installed_devs.contains(&dev) {
            rules.push(steer(&["iif", &dev, "ipproto", "icmp"]));
        }
        rules.push(strings(&[
            "from", &from, "iif", &dev, "goto", &anchor, "pref", &t,
        ]));
        rules.push(strings(&["from", &from, "blackhole", "pref", &t]));
        ReplicaRules {
            binding: Some(binding),
            rules,
        }
    }

    /// Packets to `vip`, a VIP new at run time (a service added on
    /// SIGHUP), go to the table.
    pub fn vip(table: u32, vip: Ipv4Addr) -> ReplicaRules {
        let t = table.to_string();
        ReplicaRules {
            binding: None,
            rules: vec![strings(&[
                "to",
                &format!("{vip}/32"),
                "lookup",
                &t,
                "pref",
                &t,
            ])],
        }
    }

    /// A replica whose rules are installed serves more `ports` (a service
    /// added at run time): its replies on them from its own interface go
    /// to the table. The kernel evaluates one priority's rules in the
    /// order they were added, so appended after the replica's skip rule
    /// (`goto` the anchor) they would never match; they take the priority
    /// just before (`table - 1`) instead. Each matches only this replica's
    /// TCP replies on its own interface from one of `ports`: nothing of
    /// anyone else's.
    pub fn more_ports(table: u32, binding: Binding, ports: &[u16]) -> ReplicaRules {
        let t = table.to_string();
        let before = table.saturating_sub(1).to_string();
        let from = binding.replica.to_string();
        let rules = ports
            .iter()
            .map(|p| {
                strings(&[
                    "from",
                    &from,
                    "iif",
                    &binding.dev,
                    "ipproto",
                    "tcp",
                    "sport",
                    &p.to_string(),
                    "lookup",
                    &t,
                    "pref",
                    &before,
                ])
            })
            .collect();
        ReplicaRules {
            binding: Some(binding),
            rules,
        }
    }

    /// The record lines (as [`Plan::record`]): written before installing.
    pub fn record(&self) -> Vec<String> {
        self.rules
            .iter()
            .map(|r| format!("rule {}", r.join(" ")))
            .collect()
    }
}

/// What [`Routing::install`] will add, computed without changing anything.
#[derive(Debug, Clone)]
pub struct Plan {
    table: u32,
    tun: String,
    bindings: Vec<Binding>,
    /// `ip rule add` words, in the order they are added (the kernel
    /// evaluates rules of one priority in that order).
    rules: Vec<Vec<String>>,
    /// `ip route replace` words.
    routes: Vec<Vec<String>>,
}

/// Installed routing state; removes exactly what it added when dropped.
#[derive(Debug)]
pub struct Routing {
    table: String,
    rules: Vec<Vec<String>>,
    routes: Vec<Vec<String>>,
    /// (sysctl path, value before we changed it).
    sysctls: Vec<(String, String)>,
}

/// Metric of the fallback blackhole route in our table (the last resort).
const BLACKHOLE_METRIC: &str = "4294967295";

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn words(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

impl Plan {
    /// Resolve each replica's interface (a route lookup) and list the rules
    /// and routes. Fails if a replica has no route, or only one through the
    /// TUN itself.
    pub fn new(spec: &RoutingSpec) -> Result<Plan, Error> {
        let mut replicas: Vec<Ipv4Addr> = Vec::new();
        for (r, _) in &spec.replica_ports {
            if !replicas.contains(r) {
                replicas.push(*r);
            }
        }
        let mut bindings = Vec::new();
        for r in replicas {
            bindings.push(Binding::resolve(&spec.tun, r)?);
        }
        Ok(Plan::with_bindings(spec, bindings))
    }

    /// The rules for given bindings (no system call; [`Plan::new`] resolves
    /// them).
    pub fn with_bindings(spec: &RoutingSpec, bindings: Vec<Binding>) -> Plan {
        let t = spec.table.to_string();
        let anchor = spec.table.saturating_add(1).to_string();
        let dev_of = |r: &Ipv4Addr| {
            bindings
                .iter()
                .find(|b| b.replica == *r)
                .map(|b| b.dev.clone())
        };
        let steer = |sel: &[&str]| {
            let mut v = strings(sel);
            v.extend(strings(&["lookup", &t, "pref", &t]));
            v
        };
        // The anchor first, so that the gotos resolve as they are added.
        let mut rules = vec![strings(&["pref", &anchor, "nop"])];
        for vip in &spec.vips {
            rules.push(steer(&["to", &format!("{vip}/32")]));
        }
        for (r, port) in &spec.replica_ports {
            if let Some(dev) = dev_of(r) {
                rules.push(steer(&[
                    "from",
                    &r.to_string(),
                    "iif",
                    &dev,
                    "ipproto",
                    "tcp",
                    "sport",
                    &port.to_string(),
                ]));
            }
        }
        let mut devs: Vec<&str> = Vec::new();
        for b in &bindings {
            if !devs.contains(&b.dev.as_str()) {
                devs.push(&b.dev);
                rules.push(steer(&["iif", &b.dev, "ipproto", "icmp"]));
            }
        }
        for b in &bindings {
            rules.push(strings(&[
                "from",
                &b.replica.to_string(),
                "iif",
                &b.dev,
                "goto",
                &anchor,
                "pref",
                &t,
            ]));
            rules.push(strings(&[
                "from",
                &b.replica.to_string(),
                "blackhole",
                "pref",
                &t,
            ]));
        }
        // The TUN's route, and behind it a blackhole: if the router dies
        // without cleaning up (kill -9), its TUN and that route vanish but
        // the rules stay, and the captured packets must be dropped — never
        // forwarded as they are (a replica's raw reply reaching the client
        // draws a RST that would reset the replica's side of a live
        // connection).
        let routes = vec![
            strings(&["default", "dev", &spec.tun, "table", &t]),
            strings(&[
                "blackhole",
                "default",
                "table",
                &t,
                "metric",
                BLACKHOLE_METRIC,
            ]),
        ];
        Plan {
            table: spec.table,
            tun: spec.tun.clone(),
            bindings,
            rules,
            routes,
        }
    }

    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    /// What a successor must remove if this process dies: one line per rule
    /// (`rule <ip rule add arguments>`) and route (`route <arguments>`).
    pub fn record(&self) -> Vec<String> {
        self.rules
            .iter()
            .map(|r| format!("rule {}", r.join(" ")))
            .chain(self.routes.iter().map(|r| format!("route {}", r.join(" "))))
            .collect()
    }
}

impl Routing {
    /// The interfaces replicas are bound to, as installed.
    pub fn devs(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for rule in &self.rules {
            if let Some(i) = rule.iter().position(|w| w == "iif") {
                if let Some(d) = rule.get(i + 1) {
                    if !v.contains(d) {
                        v.push(d.clone());
                    }
                }
            }
        }
        v
    }

    /// Add the rules of a replica added at run time (after the installed
    /// ones; removed with them). On error the ones added are removed again.
    pub fn add_replica(&mut self, rr: &ReplicaRules) -> Result<(), Error> {
        if let Some(b) = &rr.binding {
            let via = b.via.map(|v| format!(" via {v}")).unwrap_or_default();
            info!(
                replica = %b.replica, dev = %b.dev,
                "replica {} (added) bound to {}{via}", b.replica, b.dev
            );
        }
        let mut done = 0;
        for rule in &rr.rules {
            if let Err(e) = netlink::rule_add(&words(rule)) {
                for rule in rr.rules[..done].iter().rev() {
                    let _ = netlink::rule_del(&words(rule));
                }
                return Err(e);
            }
            info!("ip rule add {}", rule.join(" "));
            done += 1;
        }
        self.rules.extend(rr.rules.iter().cloned());
        Ok(())
    }

    /// The interface replica `replica` is bound to and the ports its
    /// replies are steered on, as installed (`None`: no rules for it).
    pub fn replica_ports(&self, replica: Ipv4Addr) -> Option<(String, Vec<u16>)> {
        let from = replica.to_string();
        let mut dev = None;
        let mut ports = Vec::new();
        for r in &self.rules {
            if r.first().map(String::as_str) != Some("from") || r.get(1) != Some(&from) {
                continue;
            }
            let after = |k: &str| r.iter().position(|w| w == k).and_then(|i| r.get(i + 1));
            if let Some(d) = after("iif") {
                dev = Some(d.clone());
            }
            if let Some(p) = after("sport").and_then(|p| p.parse().ok()) {
                ports.push(p);
            }
        }
        dev.map(|d| (d, ports))
    }

    /// Whether packets to `vip` are steered into the table.
    pub fn steers_vip(&self, vip: Ipv4Addr) -> bool {
        let to = format!("{vip}/32");
        self.rules
            .iter()
            .any(|r| r.first().map(String::as_str) == Some("to") && r.get(1) == Some(&to))
    }

    /// Install forwarding sysctls, the table's routes and the rules of
    /// `plan`. On error whatever was installed so far is removed again.
    pub fn install(plan: Plan) -> Result<Routing, Error> {
        let table = plan.table.to_string();
        let mut r = Routing {
            table: table.clone(),
            rules: Vec::new(),
            routes: Vec::new(),
            sysctls: Vec::new(),
        };
        r.set_sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
        for dev in ["all", "default", plan.tun.as_str()] {
            r.set_sysctl(&format!("/proc/sys/net/ipv4/conf/{dev}/rp_filter"), "0")?;
        }
        for b in &plan.bindings {
            let via = b.via.map(|v| format!(" via {v}")).unwrap_or_default();
            info!(
                replica = %b.replica, dev = %b.dev,
                "replica {} bound to {}{via}: its replies enter the TUN only from there, packets with its address from elsewhere are dropped",
                b.replica, b.dev
            );
        }
        for route in plan.routes {
            // `replace` rather than `add`: a crashed run may have left the
            // route in the table (it vanishes with the TUN, but the TUN may
            // persist).
            netlink::route_replace(&words(&route))?;
            info!("ip route replace {}", route.join(" "));
            r.routes.push(route);
        }
        for rule in plan.rules {
            netlink::rule_add(&words(&rule))?;
            info!("ip rule add {}", rule.join(" "));
            r.rules.push(rule);
        }
        Ok(r)
    }

    fn set_sysctl(&mut self, path: &str, value: &str) -> Result<(), Error> {
        let old = std::fs::read_to_string(path)
            .map_err(|source| Error::Sysctl {
                path: path.to_string(),
                source,
            })?
            .trim()
            .to_string();
        if old != value {
            std::fs::write(path, value).map_err(|source| Error::Sysctl {
                path: path.to_string(),
                source,
            })?;
            info!("sysctl {path} = {value} (was {old})");
            self.sysctls.push((path.to_string(), old));
        }
        Ok(())
    }
}

impl Drop for Routing {
    fn drop(&mut self) {
        for rule in self.rules.drain(..).rev() {
            if let Err(e) = netlink::rule_del(&words(&rule)) {
                warn!("cleanup: {e}");
            }
        }
        for route in self.routes.drain(..).rev() {
            // The TUN's route is gone already if the TUN was closed first;
            // that is fine.
            let _ = netlink::route_del(&words(&route));
        }
        for (path, old) in self.sysctls.drain(..).rev() {
            // The per-device entry disappears with the TUN; nothing to restore then.
            if std::path::Path::new(&path).exists() {
                if let Err(e) = std::fs::write(&path, &old) {
                    warn!("cleanup: restoring {path} to {old}: {e}");
                }
            }
        }
        info!(table = %self.table, "routing removed");
    }
}

/// Remove exactly the rules and routes of a [`Plan::record`] (those of a
/// dead router, or our own from a panic hook). Lines that are not a record
/// line are skipped; what is already gone is not an error. Returns how many
/// were removed.
pub fn remove_recorded(lines: &[String]) -> usize {
    let mut n = 0;
    // Rules in reverse order (the drop rules before their anchor), routes
    // after them.
    let rules = lines.iter().rev().filter_map(|l| l.strip_prefix("rule "));
    let routes = lines.iter().rev().filter_map(|l| l.strip_prefix("route "));
    for (rule, args) in rules.map(|a| (true, a)).chain(routes.map(|a| (false, a))) {
        let w: Vec<&str> = args.split_whitespace().collect();
        let removed = if rule {
            netlink::rule_del(&w)
        } else {
            netlink::route_del(&w)
        };
        if removed.is_ok() {
            n += 1;
        }
    }
    n
}

/// Rules at priority `table - 1` (ports added at run time), `table` or
/// `table + 1` (ours), as `ip rule show` prints them: after a dead router's
/// record was removed, any left belong to someone else (or to a router of
/// an older version, which kept no record) and are left alone.
pub fn rules_at(table: u32) -> Vec<String> {
    let mut out = Vec::new();
    for pref in [table.saturating_sub(1), table, table.saturating_add(1)] {
        if let Ok(lines) = netlink::rules_show(pref) {
            out.extend(lines);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RoutingSpec {
        RoutingSpec {
            tun: "ftnet0".into(),
            table: 7000,
            vips: vec![Ipv4Addr::new(198, 19, 0, 1)],
            replica_ports: vec![
                (Ipv4Addr::new(198, 18, 11, 2), 6379),
                (Ipv4Addr::new(198, 18, 12, 2), 6379),
            ],
        }
    }

    fn bind(r: [u8; 4], dev: &str) -> Binding {
        Binding {
            replica: r.into(),
            dev: dev.into(),
            via: None,
        }
    }

    /// A replica with installed rules gains a port (a service added at run
    /// time): the kernel evaluates one priority's rules in the order they
    /// were added, so the new steering rule takes the priority before the
    /// replica's skip rule, and matches only its TCP replies on that port
    /// from its own interface.
    #[test]
    fn more_ports_come_before_the_replicas_skip_rule() {
        let rr = ReplicaRules::more_ports(7000, bind([198, 18, 11, 2], "r1"), &[7001, 7002]);
        assert_eq!(
            rr.rules,
            [7001, 7002]
                .iter()
                .map(|p| strings(&[
                    "from",
                    "198.18.11.2",
                    "iif",
                    "r1",
                    "ipproto",
                    "tcp",
                    "sport",
                    &p.to_string(),
                    "lookup",
                    "7000",
                    "pref",
                    "6999"
                ]))
                .collect::<Vec<_>>()
        );
    }

    /// Every replica-sourced rule names the replica's interface; ICMP is
    /// matched by interface, once per interface; each replica's address is
    /// dropped when it comes from elsewhere, after its own interface skipped
    /// the drop.
    #[test]
    fn replicas_are_bound_to_their_interfaces() {
        let p = Plan::with_bindings(
            &spec(),
            vec![bind([198, 18, 11, 2], "r1"), bind([198, 18, 12, 2], "r1")],
        );
        let rec = p.record();
        let expect = [
            "rule pref 7001 nop",
            "rule to 198.19.0.1/32 lookup 7000 pref 7000",
            "rule from 198.18.11.2 iif r1 ipproto tcp sport 6379 lookup 7000 pref 7000",
            "rule from 198.18.12.2 iif r1 ipproto tcp sport 6379 lookup 7000 pref 7000",
            "rule iif r1 ipproto icmp lookup 7000 pref 7000",
            "rule from 198.18.11.2 iif r1 goto 7001 pref 7000",
            "rule from 198.18.11.2 blackhole pref 7000",
            "rule from 198.18.12.2 iif r1 goto 7001 pref 7000",
            "rule from 198.18.12.2 blackhole pref 7000",
            "route default dev ftnet0 table 7000",
            "route blackhole default table 7000 metric 4294967295",
        ];
        assert_eq!(rec, expect);
        // No rule steers a replica's address without naming an interface.
        for l in &rec {
            if l.contains("from 198.18.") && !l.contains("blackhole") {
                assert!(l.contains(" iif "), "{l}");
            }
        }
    }
}
