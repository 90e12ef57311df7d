//! Policy routing that steers the service's traffic into the TUN device.
//!
//! In the router's network namespace:
//! - packets *to* a virtual IP go to table T, whose default route is the TUN;
//! - packets *from* a replica's service port (and ICMP from a replica) go to
//!   table T as well, so the router sees the replies it must merge.
//!
//! What the router itself writes to the TUN has src = client (towards a
//! replica) or src = VIP (towards a client), so none of it matches a rule
//! again and nothing loops. Forwarding must be on, and reverse-path
//! filtering off, because packets written to the TUN carry source addresses
//! the kernel would otherwise route elsewhere.

use crate::{ip, Error};
use std::net::Ipv4Addr;
use tracing::{info, warn};

/// What to route into the TUN.
#[derive(Debug, Clone)]
pub struct RoutingSpec {
    pub tun: String,
    /// Policy routing table; also used as the priority of every rule we add,
    /// so leftovers of a crashed run can be found and removed by priority.
    pub table: u32,
    pub vips: Vec<Ipv4Addr>,
    /// (replica, port) pairs whose replies the router must see.
    pub replica_ports: Vec<(Ipv4Addr, u16)>,
}

/// Installed routing state; removes exactly what it added when dropped.
#[derive(Debug)]
pub struct Routing {
    table: String,
    tun: String,
    rules: Vec<Vec<String>>,
    route_added: bool,
    /// (sysctl path, value before we changed it).
    sysctls: Vec<(String, String)>,
}

/// Metric of the fallback blackhole route in our table (the last resort).
const BLACKHOLE_METRIC: &str = "4294967295";

impl Routing {
    /// Install forwarding sysctls, the table's default route and the rules.
    /// On error whatever was installed so far is removed again.
    pub fn setup(spec: &RoutingSpec) -> Result<Routing, Error> {
        let table = spec.table.to_string();
        let mut r = Routing {
            table: table.clone(),
            tun: spec.tun.clone(),
            rules: Vec::new(),
            route_added: false,
            sysctls: Vec::new(),
        };
        let removed = remove_leftovers(&table);
        if removed > 0 {
            warn!(table = %table, rules = removed, "removed leftover rules of an earlier run");
        }

        r.set_sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
        for dev in ["all", "default", spec.tun.as_str()] {
            r.set_sysctl(&format!("/proc/sys/net/ipv4/conf/{dev}/rp_filter"), "0")?;
        }

        // `replace` rather than `add`: a crashed run may have left the route
        // in the table (it vanishes with the TUN, but the TUN may persist).
        ip(&[
            "route", "replace", "default", "dev", &spec.tun, "table", &table,
        ])?;
        r.route_added = true;
        info!(table = %table, dev = %spec.tun, "route: default dev {} table {}", spec.tun, table);
        // Behind it, a blackhole: if the router dies without cleaning up
        // (kill -9), its TUN and that route vanish but the rules stay, and
        // the captured packets must be dropped — never forwarded as they
        // are (a replica's raw reply reaching the client draws a RST that
        // would reset the replica's side of a live connection).
        ip(&[
            "route",
            "replace",
            "blackhole",
            "default",
            "table",
            &table,
            "metric",
            BLACKHOLE_METRIC,
        ])?;

        let mut want: Vec<Vec<String>> = Vec::new();
        for vip in &spec.vips {
            want.push(vec!["to".into(), format!("{vip}/32")]);
        }
        let mut replicas: Vec<Ipv4Addr> = Vec::new();
        for (replica, port) in &spec.replica_ports {
            want.push(vec![
                "from".into(),
                replica.to_string(),
                "ipproto".into(),
                "tcp".into(),
                "sport".into(),
                port.to_string(),
            ]);
            if !replicas.contains(replica) {
                replicas.push(*replica);
            }
        }
        for replica in replicas {
            want.push(vec![
                "from".into(),
                replica.to_string(),
                "ipproto".into(),
                "icmp".into(),
            ]);
        }
        for sel in want {
            let mut args: Vec<String> = vec!["rule".into(), "add".into()];
            args.extend(sel.iter().cloned());
            args.extend(["lookup".into(), table.clone(), "pref".into(), table.clone()]);
            ip(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
            info!("rule: {} lookup {} pref {}", sel.join(" "), table, table);
            r.rules.push(sel);
        }
        Ok(r)
    }

    /// Remove every rule with priority `table` without any other state: the
    /// last resort of a process about to abort (release builds abort on
    /// panic, so `Drop` never runs). Returns how many rules were removed.
    pub fn purge(table: u32) -> usize {
        remove_leftovers(&table.to_string())
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
        for sel in self.rules.drain(..).rev() {
            let mut args: Vec<&str> = vec!["rule", "del"];
            args.extend(sel.iter().map(String::as_str));
            args.extend(["lookup", &self.table, "pref", &self.table]);
            if let Err(e) = ip(&args) {
                warn!("cleanup: {e}");
            }
        }
        if self.route_added {
            let _ = ip(&[
                "route",
                "del",
                "blackhole",
                "default",
                "table",
                &self.table,
                "metric",
                BLACKHOLE_METRIC,
            ]);
            // Gone already if the TUN was closed first; that is fine.
            let _ = ip(&[
                "route",
                "del",
                "default",
                "dev",
                &self.tun,
                "table",
                &self.table,
            ]);
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

/// Delete every rule with our priority (a crashed run leaves them behind).
/// Bounded: `ip rule del pref P` removes one rule per call.
fn remove_leftovers(pref: &str) -> usize {
    let mut n = 0;
    while n < 100_000 {
        match ip(&["rule", "show", "pref", pref]) {
            Ok(s) if !s.trim().is_empty() => {}
            _ => break,
        }
        if ip(&["rule", "del", "pref", pref]).is_err() {
            break;
        }
        n += 1;
    }
    n
}
