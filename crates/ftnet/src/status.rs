//! `ftnet status`: read a snapshot from the router's socket and print it.

use anyhow::Context;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// Connect to the router's status socket (answers within 3 s).
fn connect(socket: &Path) -> anyhow::Result<std::os::unix::net::UnixStream> {
    let s = std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        anyhow::anyhow!(
            "no router answering on {}: is `ftnet router` running in this network namespace? ({e})",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    Ok(s)
}

/// Fetch the raw JSON snapshot.
pub fn fetch(socket: &Path) -> anyhow::Result<Value> {
    let mut s = connect(socket)?;
    // No request: the snapshot.
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut text = String::new();
    s.read_to_string(&mut text)
        .with_context(|| format!("reading status from {}", socket.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("router on {} sent unparsable status", socket.display()))
}

/// Send one operator request (`replica enable ADDR [SERVICE]`) and print
/// the router's answer; an error if the router refused it.
pub fn request(socket: &Path, req: &str) -> anyhow::Result<()> {
    let mut s = connect(socket)?;
    s.write_all(req.as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .with_context(|| format!("reading the answer from {}", socket.display()))?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("router on {} sent an unparsable answer", socket.display()))?;
    if v["ok"].as_bool() != Some(true) {
        anyhow::bail!(
            "the router refused `{req}`: {}",
            v["error"].as_str().unwrap_or("no reason given")
        );
    }
    let list: Vec<&str> = v["enabled_in"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    let verb = req.split_whitespace().nth(1).unwrap_or("");
    let service = v["service"].as_str().unwrap_or("?");
    match (verb, v["note"].as_str()) {
        ("add", Some(n)) => println!("added to service {service}: {n}"),
        (_, Some(n)) => println!("{n}"),
        ("drain", None) => println!(
            "draining in service {service}: no new connections; {} connection(s) still use it (the router logs when the last one ends)",
            v["connections"]
        ),
        ("remove", None) => println!(
            "removed from service {service}: left {} connection(s) at once; stays in {} as their last replica until they end",
            v["left_connections"], v["stays_last_replica_in"]
        ),
        _ => {
            if !list.is_empty() {
                println!("back in service in: {}", list.join(", "));
            }
            for j in v["joining"].as_array().into_iter().flatten() {
                let name = j["service"].as_str().unwrap_or("?");
                match (j["join"].as_u64(), j["error"].as_str()) {
                    (Some(id), _) => println!("joining {name} (join {id}): it missed input while out, so it comes back with the group's state, proven; `ftnet status` and the router's log say when it serves"),
                    (_, Some(e)) => println!("not back in {name}: it missed input while out and comes back only by a join, which cannot start: {e}"),
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

pub fn show(socket: &Path, json: bool) -> anyhow::Result<()> {
    let v = fetch(socket)?;
    let text = if json {
        serde_json::to_string_pretty(&v)? + "\n"
    } else {
        render(&v)
    };
    // A reader that stops early (`ftnet status | head`) is not an error.
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// A stream offset the router may not know (null): `-` then.
fn known(v: &Value) -> String {
    v.as_u64()
        .map_or_else(|| "-".to_string(), |n| n.to_string())
}

/// A replica's membership for the table: alive (serving), awaiting its
/// agent, draining, joining, removed, or down with the verdict's reason;
/// with how long it has been so where the router says since when.
fn member_state(r: &Value, now_ms: Option<u64>) -> String {
    let alive = r["alive"].as_bool().unwrap_or(false);
    let state = match r["state"].as_str() {
        _ if alive => return "alive".into(),
        Some("serving") => return "awaiting its agent".into(),
        Some("down") => format!(
            "down: {}",
            r["down"]["reason"]
                .as_str()
                .unwrap_or("?")
                .replace('_', " ")
        ),
        Some(s) => s.to_string(),
        None => "?".into(),
    };
    match (r["since_ms"].as_u64(), now_ms) {
        (Some(since), Some(now)) if now >= since => {
            format!("{state}, {:.1} s", (now - since) as f64 / 1000.0)
        }
        _ => state,
    }
}

/// Human-readable table of a snapshot.
pub fn render(v: &Value) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let st = &v["status"];
    let _ = writeln!(
        o,
        "router pid {} on {} (ftnet {}, {}), up {:.1} s — {} connection(s), {} half-open",
        u(&v["pid"]),
        v["tun"].as_str().unwrap_or("?"),
        v["version"].as_str().unwrap_or("?"),
        v["role"].as_str().unwrap_or("?"),
        v["uptime_s"].as_f64().unwrap_or(0.0),
        u(&st["connections"]),
        u(&st["half_open"]),
    );
    if let Some(d) = v.get("draining").filter(|d| d.is_object()) {
        let _ = writeln!(
            o,
            "DRAINING for {:.1} s (`ftnet drain`): no new connections; stops when its {} open connection(s) closed, or in {:.1} s",
            d["since_s"].as_f64().unwrap_or(0.0),
            u(&d["open_connections"]),
            d["deadline_in_s"].as_f64().unwrap_or(0.0),
        );
    }
    let services = st["services"].as_array().cloned().unwrap_or_default();
    if services.is_empty() {
        let _ = writeln!(o, "(the router reports no per-service state yet)");
    }
    for s in &services {
        let ports: Vec<String> = s["ports"]
            .as_array()
            .map(|a| a.iter().map(|p| u(p).to_string()).collect())
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "\nservice {}  vip {}  ports {}  connections {}{}",
            s["name"].as_str().unwrap_or("?"),
            s["vip"].as_str().unwrap_or("?"),
            ports.join(","),
            u(&s["connections"]),
            if s["removed"].as_bool() == Some(true) {
                "  REMOVED (gone from the config file): no new connections; these finish"
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "  {:<16} {:<34} {:>11} {:>14} {:>13}",
            "replica", "state", "connections", "lag out bytes", "lag in bytes"
        );
        for r in s["replicas"].as_array().cloned().unwrap_or_default() {
            let _ = writeln!(
                o,
                "  {:<16} {:<34} {:>11} {:>14} {:>13}",
                r["addr"].as_str().unwrap_or("?"),
                member_state(&r, v["now_ms"].as_u64()),
                u(&r["connections"]),
                u(&r["lag_out_bytes"]),
                u(&r["lag_in_bytes"]),
            );
        }
    }
    if let Some(agents) = v["control"]["agents"].as_array() {
        let _ = writeln!(
            o,
            "\nagents ({} registered)",
            agents.iter().filter(|a| a["state"] == "registered").count()
        );
        let _ = writeln!(
            o,
            "  {:<16} {:<11} {:<20} {:>8} {:>8}",
            "replica", "state", "host", "for s", "records"
        );
        for a in agents {
            let _ = writeln!(
                o,
                "  {:<16} {:<11} {:<20} {:>8.1} {:>8}",
                a["replica"].as_str().unwrap_or("?"),
                a["state"].as_str().unwrap_or("?"),
                a["host"].as_str().unwrap_or("?"),
                a["for_s"].as_f64().unwrap_or(0.0),
                u(&a["records"]),
            );
        }
        let rejected = u(&v["control"]["rejected_frames"]);
        if rejected > 0 {
            let _ = writeln!(o, "  frames that failed their tag (forged, replayed; each ended its session): {rejected}");
        }
        let dropped = u(&v["control"]["dropped_records"]);
        if dropped > 0 {
            let _ = writeln!(o, "  records not delivered (agent queue full): {dropped}");
        }
    }
    let c = &st["counters"];
    let _ = writeln!(o, "\ncounters:");
    for k in [
        "packets_in",
        "packets_out",
        "client_bytes_in",
        "client_bytes_out",
        "suppressed_bytes",
        "connections_opened",
        "evictions",
        "connections_lost",
        "acks_on_behalf",
    ] {
        let _ = writeln!(o, "  {k:<20} {}", u(&c[k]));
    }
    // Takeover, when this router adopted connections from the agents.
    if u(&c["connections_adopted"]) > 0 {
        for k in [
            "connections_adopted",
            "connections_rebuilt",
            "rto_prompts",
            "rebuild_dup_acks",
            "rebuild_synacks",
            "rebuild_resends",
            "orphans_kept",
            "orphans_replayed",
        ] {
            let _ = writeln!(o, "  {k:<20} {}", u(&c[k]));
        }
    }
    // Output commit and probes, once they happened.
    for k in [
        "synacks_committed",
        "synacks_uncommitted",
        "probes_passed",
        "log_bytes",
        "log_resent_bytes",
        "log_full",
    ] {
        if u(&c[k]) > 0 {
            let _ = writeln!(o, "  {k:<20} {}", u(&c[k]));
        }
    }
    if let Some(pc) = v["control"]["pending_commits"].as_u64().filter(|&n| n > 0) {
        let _ = writeln!(o, "  SYN-ACKs waiting for the agents: {pc}");
    }
    // Output voting and the output policy, where anything happened.
    if u(&c["voted_bytes"]) > 0 || u(&c["divergences"]) > 0 {
        for k in ["voted_bytes", "divergences", "pace_updates"] {
            let _ = writeln!(o, "  {k:<20} {}", u(&c[k]));
        }
    }
    for k in [
        "detached",
        "failover_sent_on",
        "follower_repeats",
        "ack_prompts",
    ] {
        if u(&c[k]) > 0 {
            let _ = writeln!(o, "  {k:<20} {}", u(&c[k]));
        }
    }
    // A few connections in detail: stream offsets (bytes after the SYN).
    if let Some(sample) = st["sample"].as_array().filter(|a| !a.is_empty()) {
        let _ = writeln!(
            o,
            "\nconnections (first {}; stream offsets in bytes):",
            sample.len()
        );
        for c in sample {
            let _ = writeln!(
                o,
                "  {} {}{}: client sent {} | client was sent {}, acked {}, window {}",
                c["conn"].as_str().unwrap_or("?"),
                c["phase"].as_str().unwrap_or("?"),
                if c["recovering"] == true {
                    " (rebuilding)"
                } else if c["adopted"] == true {
                    " (adopted)"
                } else {
                    ""
                },
                u(&c["client_sent"]),
                u(&c["client_was_sent"]),
                u(&c["client_acked"]),
                u(&c["client_window"]),
            );
            for l in c["legs"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    o,
                    "    {:<16} {:<8} sent {} | acked {}, window edge {}",
                    l["addr"].as_str().unwrap_or("?"),
                    l["state"].as_str().unwrap_or("?"),
                    known(&l["sent"]),
                    known(&l["acked"]),
                    known(&l["window_edge"]),
                );
            }
        }
    }
    let drops: Vec<(String, u64)> = st["drops"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| Some((d.get(0)?.as_str()?.to_string(), d.get(1)?.as_u64()?)))
                .filter(|(_, n)| *n > 0)
                .collect()
        })
        .unwrap_or_default();
    if drops.is_empty() {
        let _ = writeln!(o, "drops: none");
    } else {
        let _ = writeln!(o, "drops:");
        for (k, n) in drops {
            let _ = writeln!(o, "  {k:<20} {n}");
        }
    }
    o
}
