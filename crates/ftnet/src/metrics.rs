//! `metrics_listen`: an HTTP listener with `/metrics` (OpenMetrics text, which
//! Prometheus scrapes, encoded by the `prometheus-client` crate) and
//! `/healthz` (for keepalived's `vrrp_script` or a load balancer's check).
//!
//! The figures come from the status snapshot the first data-plane thread
//! refreshes every 250 ms (router-wide counters, drops by reason, each
//! replica's state, lag and connections, the agents), plus what the router's
//! events tell as they are logged (`observe`): evictions per replica and
//! reason, joins and their pauses, takeover rebuild times. A scrape never
//! takes the data plane's lock.
//!
//! `/` is a live status page (`page/`: services, replicas with state and
//! lag, counters with rates, the recent failovers as a timeline), drawn by
//! its script from `/status.json` (the snapshot and the timeline) every
//! 250 ms; it loads nothing from anywhere else (a Content-Security-Policy
//! says so to the browser).
//!
//! `/healthz` answers 200 while the data plane makes progress (its loop
//! refreshed the snapshot within the last 2 s) and 503 otherwise.
//!
//! Hostile peers: one request at a time, at most 8 KiB of request read,
//! 2 s to send it, only `GET`; anything else gets 400/404/405.

use ftnet_core::Event;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing::{info, warn};

type Labels = Vec<(String, String)>;

/// What the events add up to (kept across scrapes).
struct FromEvents {
    evictions: Family<Labels, Counter>,
    joins: Family<Labels, Counter>,
    join_pause: Histogram,
    join_time: Histogram,
    rebuild: Histogram,
    detection: Histogram,
    divergences: Family<Labels, Counter>,
}

fn from_events() -> &'static FromEvents {
    static M: OnceLock<FromEvents> = OnceLock::new();
    M.get_or_init(|| FromEvents {
        evictions: Family::default(),
        joins: Family::default(),
        // Milliseconds: 1 ms to ~65 s.
        join_pause: Histogram::new(exponential_buckets(1.0, 2.0, 17)),
        join_time: Histogram::new(exponential_buckets(1.0, 2.0, 17)),
        rebuild: Histogram::new(exponential_buckets(1.0, 2.0, 17)),
        detection: Histogram::new(exponential_buckets(1.0, 2.0, 17)),
        divergences: Family::default(),
    })
}

fn labels(kv: &[(&str, String)]) -> Labels {
    kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// Entries the status page's timeline keeps (the oldest go first).
const TIMELINE_LEN: usize = 200;
/// Entries of one kind for one replica this close together are one entry
/// with a count (an eviction from 60 connections is one line).
const TIMELINE_MERGE_MS: u64 = 1000;

/// The recent failovers and changes, for the status page.
static TIMELINE: Mutex<std::collections::VecDeque<Value>> =
    Mutex::new(std::collections::VecDeque::new());

/// Add to the timeline: `kind` (a CSS-safe word: down, up, evicted,
/// diverged, joined, …), the replica it is about (if any) and a sentence.
pub fn note(kind: &str, replica: Option<std::net::Ipv4Addr>, text: String) {
    let t_ms = crate::sys::epoch_micros() / 1000;
    let mut tl = TIMELINE.lock().unwrap_or_else(|p| p.into_inner());
    let replica = replica.map(|r| r.to_string());
    if let Some(last) = tl.back_mut() {
        if last["kind"] == kind
            && last["replica"].as_str() == replica.as_deref()
            && t_ms.saturating_sub(last["t_ms"].as_u64().unwrap_or(0)) < TIMELINE_MERGE_MS
        {
            last["count"] = Value::from(last["count"].as_u64().unwrap_or(1) + 1);
            return;
        }
    }
    if tl.len() >= TIMELINE_LEN {
        tl.pop_front();
    }
    tl.push_back(serde_json::json!({
        "t_ms": t_ms, "kind": kind, "replica": replica, "text": text, "count": 1,
    }));
}

/// The timeline as JSON (oldest first).
fn timeline_json() -> String {
    let tl = TIMELINE.lock().unwrap_or_else(|p| p.into_inner());
    Value::Array(tl.iter().cloned().collect()).to_string()
}

/// What `ev` adds to the timeline, if anything.
fn note_event(ev: &Event) {
    let name = |r: &ftnet_core::EvictReason| {
        serde_json::to_value(r)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{r:?}"))
    };
    match ev {
        Event::ReplicaDown {
            service,
            replica,
            reason,
            connections,
            silent_ms,
        } => note(
            "down",
            Some(*replica),
            format!(
                "{service}: replica {replica} declared down ({}), out of {connections} connection(s){}",
                name(reason),
                silent_ms.map_or(String::new(), |ms| format!(", last heard {ms} ms before"))
            ),
        ),
        Event::Evicted {
            replica, reason, ..
        } => note(
            "evicted",
            Some(*replica),
            format!("replica {replica} left a connection ({})", name(reason)),
        ),
        Event::ConnectionLost { conn } => note(
            "lost",
            None,
            format!("connection {conn} lost its last replica"),
        ),
        Event::ConnectionEnded { conn, why } => note(
            "ended",
            None,
            format!("connection {conn} ended by the router: {why}"),
        ),
        Event::ReplicaUp { service, replica } => note(
            "up",
            Some(*replica),
            format!("{service}: replica {replica} back in service (operator)"),
        ),
        Event::ReplicaRejoined {
            service,
            replica,
            down_ms,
            ..
        } => note(
            "up",
            Some(*replica),
            format!("{service}: replica {replica} answers again, back after {down_ms} ms"),
        ),
        Event::ReplicaAdded {
            service, replica, ..
        } => note(
            "change",
            Some(*replica),
            format!("{service}: replica {replica} added"),
        ),
        Event::ReplicaDraining {
            service, replica, ..
        } => note(
            "change",
            Some(*replica),
            format!("{service}: replica {replica} draining"),
        ),
        Event::ReplicaDrained { service, replica } => note(
            "change",
            Some(*replica),
            format!("{service}: replica {replica} drained"),
        ),
        Event::ReplicaRemoved {
            service, replica, ..
        } => note(
            "change",
            Some(*replica),
            format!("{service}: replica {replica} removed"),
        ),
        Event::ServiceAdded { service, vip, .. } => {
            note("change", None, format!("service {service} ({vip}) added"))
        }
        Event::ServiceRemoved { service, .. } => {
            note("change", None, format!("service {service} removed"))
        }
        Event::Diverged { replica, .. } | Event::OutputDiffers { replica, .. } => note(
            "diverged",
            Some(*replica),
            format!("replica {replica}: replies differ"),
        ),
        Event::TableRebuilt {
            connections,
            after_ms,
        } => note(
            "takeover",
            None,
            format!("takeover: {connections} connection(s) rebuilt in {after_ms} ms"),
        ),
        Event::JoinStarted {
            service, replica, ..
        } => note(
            "joining",
            Some(*replica),
            format!("{service}: replica {replica} joins"),
        ),
        Event::Joined {
            service,
            replica,
            pause_ms,
            join_ms,
            ..
        } => note(
            "joined",
            Some(*replica),
            format!("{service}: replica {replica} joined in {join_ms} ms (input paused {pause_ms} ms)"),
        ),
        Event::JoinFailed {
            service,
            replica,
            reason,
            ..
        } => note(
            "down",
            Some(*replica),
            format!("{service}: join of replica {replica} failed: {reason}"),
        ),
        _ => {}
    }
}

/// Count what `ev` tells (called for every event as it is logged).
pub fn observe(ev: &Event) {
    note_event(ev);
    let m = from_events();
    let name = |r: &ftnet_core::EvictReason| {
        serde_json::to_value(r)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{r:?}"))
    };
    match ev {
        Event::Evicted {
            replica, reason, ..
        } => {
            m.evictions
                .get_or_create(&labels(&[
                    ("replica", replica.to_string()),
                    ("reason", name(reason)),
                ]))
                .inc();
        }
        Event::Joined {
            service,
            replica,
            pause_ms,
            ..
        }
        | Event::JoinFailed {
            service,
            replica,
            pause_ms,
            ..
        } => {
            let result = if matches!(ev, Event::Joined { .. }) {
                "joined"
            } else {
                "failed"
            };
            m.joins
                .get_or_create(&labels(&[
                    ("service", service.clone()),
                    ("replica", replica.to_string()),
                    ("result", result.into()),
                ]))
                .inc();
            m.join_pause.observe(*pause_ms as f64);
            if let Event::Joined { join_ms, .. } = ev {
                m.join_time.observe(*join_ms as f64);
            }
        }
        Event::ReplicaDown {
            silent_ms: Some(ms),
            ..
        } => m.detection.observe(*ms as f64),
        Event::TableRebuilt { after_ms, .. } => m.rebuild.observe(*after_ms as f64),
        Event::Diverged { replica, .. } | Event::OutputDiffers { replica, .. } => {
            m.divergences
                .get_or_create(&labels(&[("replica", replica.to_string())]))
                .inc();
        }
        _ => {}
    }
}

/// When the data plane last refreshed the status snapshot (µs on
/// `origin()`).
static REFRESHED_US: AtomicU64 = AtomicU64::new(0);

fn origin() -> Instant {
    static O: OnceLock<Instant> = OnceLock::new();
    *O.get_or_init(Instant::now)
}

/// The data plane refreshed the snapshot (it makes progress).
pub fn refreshed() {
    let us = u64::try_from(origin().elapsed().as_micros()).unwrap_or(u64::MAX);
    REFRESHED_US.store(us.max(1), Ordering::Relaxed);
}

/// How long since the data plane last refreshed the snapshot (`None`: never).
pub(crate) fn since_refresh() -> Option<Duration> {
    let us = REFRESHED_US.load(Ordering::Relaxed);
    (us > 0).then(|| origin().elapsed().saturating_sub(Duration::from_micros(us)))
}

/// `/healthz` fails once the data plane made no progress for this long.
pub(crate) const STALLED_AFTER: Duration = Duration::from_secs(2);

// A float in the snapshot (uptime) becomes whole units; Rust's float to
// integer cast saturates, nothing wraps.
#[allow(clippy::cast_possible_truncation)]
fn num(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_f64().map(|f| f.max(0.0) as u64))
        .unwrap_or(0)
}

fn counter(r: &mut Registry, name: &str, help: &str, v: u64) {
    let c: Counter = Counter::default();
    c.inc_by(v);
    r.register(name, help, c);
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: i64) {
    let g: Gauge = Gauge::default();
    g.set(v);
    r.register(name, help, g);
}

/// The OpenMetrics text of the snapshot `doc` (the status socket's JSON)
/// and of the events so far.
pub fn render(doc: &Value) -> String {
    let mut r = Registry::default();
    let st = &doc["status"];
    gauge(
        &mut r,
        "ftnet_connections",
        "Connections in the router's table",
        num(&st["connections"]) as i64,
    );
    gauge(
        &mut r,
        "ftnet_half_open",
        "Connections in their handshake",
        num(&st["half_open"]) as i64,
    );
    gauge(
        &mut r,
        "ftnet_rebuilding",
        "Connections adopted after a takeover, not rebuilt yet",
        num(&st["rebuilding"]) as i64,
    );
    gauge(
        &mut r,
        "ftnet_draining",
        "1 while the router drains before a stop (ftnet drain)",
        i64::from(doc.get("draining").is_some_and(Value::is_object)),
    );
    if let Some(d) = doc["tun_dropped"].as_u64() {
        gauge(
            &mut r,
            "ftnet_tun_dropped",
            "Packets the kernel dropped because a TUN queue of the router was full (the device's tx_dropped)",
            i64::try_from(d).unwrap_or(i64::MAX),
        );
    }
    gauge(
        &mut r,
        "ftnet_up_seconds",
        "Seconds since the router started",
        num(&doc["uptime_s"]) as i64,
    );
    if let Some(c) = st["counters"].as_object() {
        for (k, v) in c {
            if k == "log_bytes" {
                // A level, not a count.
                gauge(
                    &mut r,
                    "ftnet_log_bytes",
                    "Client bytes the input logs hold (ack = \"log\")",
                    v.as_i64().unwrap_or(0),
                );
                continue;
            }
            if k == "evictions" {
                // `ftnet_evictions_total{replica, reason}` below: one
                // name, one metric (their sum is this counter).
                continue;
            }
            if let Some(n) = v.as_u64() {
                counter(
                    &mut r,
                    &format!("ftnet_{k}"),
                    &format!("Router counter {k} (ftnet status)"),
                    n,
                );
            }
        }
    }
    let drops: Family<Labels, Counter> = Family::default();
    for d in st["drops"].as_array().into_iter().flatten() {
        if let (Some(reason), Some(n)) = (d[0].as_str(), d[1].as_u64()) {
            drops
                .get_or_create(&labels(&[("reason", reason.into())]))
                .inc_by(n);
        }
    }
    r.register("ftnet_drops", "Packets dropped, by reason", drops);
    let up: Family<Labels, Gauge> = Family::default();
    let state: Family<Labels, Gauge> = Family::default();
    let conns: Family<Labels, Gauge> = Family::default();
    let lag_in: Family<Labels, Gauge> = Family::default();
    let lag_out: Family<Labels, Gauge> = Family::default();
    let svc_conns: Family<Labels, Gauge> = Family::default();
    let svc_in: Family<Labels, Counter> = Family::default();
    let svc_out: Family<Labels, Counter> = Family::default();
    let rep_bytes: Family<Labels, Counter> = Family::default();
    for s in st["services"].as_array().into_iter().flatten() {
        let service = s["name"].as_str().unwrap_or("?").to_string();
        svc_conns
            .get_or_create(&labels(&[("service", service.clone())]))
            .set(num(&s["connections"]) as i64);
        svc_in
            .get_or_create(&labels(&[("service", service.clone())]))
            .inc_by(num(&s["client_bytes_in"]));
        svc_out
            .get_or_create(&labels(&[("service", service.clone())]))
            .inc_by(num(&s["client_bytes_out"]));
        for rp in s["replicas"].as_array().into_iter().flatten() {
            let replica = rp["addr"].as_str().unwrap_or("?").to_string();
            let l = labels(&[("service", service.clone()), ("replica", replica.clone())]);
            let st_name = rp["state"].as_str().unwrap_or("unknown").to_string();
            let serving = st_name == "serving" && rp["alive"].as_bool() == Some(true);
            up.get_or_create(&l).set(i64::from(serving));
            let mut ls = l.clone();
            ls.push(("state".into(), st_name));
            state.get_or_create(&ls).set(1);
            conns.get_or_create(&l).set(num(&rp["connections"]) as i64);
            rep_bytes.get_or_create(&l).inc_by(num(&rp["bytes_from"]));
            lag_in
                .get_or_create(&l)
                .set(num(&rp["lag_in_bytes"]) as i64);
            lag_out
                .get_or_create(&l)
                .set(num(&rp["lag_out_bytes"]) as i64);
        }
    }
    r.register(
        "ftnet_service_connections",
        "Open connections per service",
        svc_conns,
    );
    r.register(
        "ftnet_service_client_bytes_in",
        "Payload bytes from the service's clients (counted once)",
        svc_in,
    );
    r.register(
        "ftnet_service_client_bytes_out",
        "Payload bytes to the service's clients",
        svc_out,
    );
    r.register(
        "ftnet_replica_bytes",
        "Payload bytes that came from the replica (every copy, withheld ones too)",
        rep_bytes,
    );
    r.register(
        "ftnet_replica_up",
        "1 while the replica serves and its agent (if any) is there",
        up,
    );
    r.register(
        "ftnet_replica_state",
        "The replica's membership state (the label that is 1)",
        state,
    );
    r.register(
        "ftnet_replica_connections",
        "Connections the replica is part of",
        conns,
    );
    r.register(
        "ftnet_replica_lag_in_bytes",
        "Client bytes the replica has not acknowledged that another has",
        lag_in,
    );
    r.register(
        "ftnet_replica_lag_out_bytes",
        "Reply bytes the replica is behind the furthest one",
        lag_out,
    );
    if let Some(c) = doc.get("control").filter(|c| c.is_object()) {
        let n = c["agents"].as_array().map_or(0, |a| {
            a.iter().filter(|x| x["state"] == "registered").count()
        });
        gauge(
            &mut r,
            "ftnet_agents",
            "Agents registered with the router",
            n as i64,
        );
        counter(
            &mut r,
            "ftnet_dropped_records",
            "Connection records an agent could not take",
            num(&c["dropped_records"]),
        );
        counter(
            &mut r,
            "ftnet_control_rejected_frames",
            "Control frames that failed their authentication tag (forged, replayed, altered); each ended its session",
            num(&c["rejected_frames"]),
        );
        gauge(
            &mut r,
            "ftnet_pending_commits",
            "SYN-ACKs waiting for their record at the agents",
            num(&c["pending_commits"]) as i64,
        );
    }
    let m = from_events();
    r.register(
        "ftnet_evictions",
        "Replicas taken out of connections, by replica and reason",
        m.evictions.clone(),
    );
    r.register(
        "ftnet_replica_divergences",
        "Replies found to differ, by replica",
        m.divergences.clone(),
    );
    r.register(
        "ftnet_joins",
        "Joins by service, replica and result",
        m.joins.clone(),
    );
    r.register(
        "ftnet_join_pause_milliseconds",
        "How long a join held the service's input",
        m.join_pause.clone(),
    );
    r.register(
        "ftnet_join_milliseconds",
        "A join from its start to the joiner serving",
        m.join_time.clone(),
    );
    r.register(
        "ftnet_failure_detection_milliseconds",
        "A replica declared down: how long before the verdict a segment of its connections last came from it",
        m.detection.clone(),
    );
    for (key, name, help) in [
        (
            "commit_wait",
            "ftnet_commit_wait_milliseconds",
            "Output commit: how long SYN-ACKs waited for their record at the agents",
        ),
        (
            "stall_after_eviction",
            "ftnet_stall_after_eviction_milliseconds",
            "The gap in reply bytes to a client around a replica leaving its connection (connections sending when it left)",
        ),
    ] {
        if let Some(h) = CoreHistogram::from_json(&st["counters"][key]) {
            r.register(name, help, h);
        }
    }
    r.register(
        "ftnet_takeover_rebuild_milliseconds",
        "After a takeover: first record to every adopted connection rebuilt",
        m.rebuild.clone(),
    );
    let mut out = String::new();
    if encode(&mut out, &r).is_err() {
        out = "# EOF\n".into();
    }
    out
}

/// A histogram the router core keeps (`ftnet_core::Histogram`: power-of-two
/// millisecond buckets), read back from the snapshot's JSON.
#[derive(Debug)]
struct CoreHistogram {
    /// (upper bound in ms, count in that bucket), the last one +Inf.
    buckets: Vec<(f64, u64)>,
    sum_ms: f64,
}

impl CoreHistogram {
    fn from_json(v: &Value) -> Option<CoreHistogram> {
        let counts = v["counts"].as_array()?;
        let buckets = counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let upper = ftnet_core::Histogram::upper_ms(i).map_or(f64::MAX, |u| u as f64);
                (upper, c.as_u64().unwrap_or(0))
            })
            .collect();
        Some(CoreHistogram {
            buckets,
            sum_ms: num(&v["sum_us"]) as f64 / 1000.0,
        })
    }
}

impl prometheus_client::encoding::EncodeMetric for CoreHistogram {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        let count = self.buckets.iter().map(|b| b.1).sum();
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.sum_ms,
            count,
            &self.buckets,
            None,
        )
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

/// Serve `/metrics` and `/healthz` on `addr` from a thread of its own.
pub fn serve(addr: SocketAddr, snapshot: Arc<Mutex<String>>) -> anyhow::Result<()> {
    let l = TcpListener::bind(addr)
        .map_err(|e| anyhow::anyhow!("metrics_listen {addr}: cannot listen: {e}"))?;
    info!(listen = %addr, "status page: http://{addr}/ ; metrics: http://{addr}/metrics (Prometheus); health: http://{addr}/healthz");
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for s in l.incoming() {
                match s {
                    Ok(s) => {
                        let _ = answer(s, &snapshot);
                    }
                    Err(e) => {
                        warn!("metrics listener: accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
    Ok(())
}

/// Read one request (bounded) and answer it.
fn answer(mut s: TcpStream, snapshot: &Mutex<String>) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        if buf.len() >= 8192 {
            return reply(
                &mut s,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request too large\n",
            );
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut first = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    if method.is_empty() {
        return reply(&mut s, "400 Bad Request", "text/plain", "bad request\n");
    }
    if method != "GET" && method != "HEAD" {
        return reply(&mut s, "405 Method Not Allowed", "text/plain", "only GET\n");
    }
    let path = path.split('?').next().unwrap_or("");
    match path {
        "/" | "/index.html" => reply(
            &mut s,
            "200 OK",
            "text/html; charset=utf-8",
            include_str!("page/index.html"),
        ),
        "/status.js" => reply(
            &mut s,
            "200 OK",
            "text/javascript; charset=utf-8",
            include_str!("page/status.js"),
        ),
        "/favicon.svg" | "/favicon.ico" => reply(
            &mut s,
            "200 OK",
            "image/svg+xml",
            include_str!("page/favicon.svg"),
        ),
        "/status.css" => reply(
            &mut s,
            "200 OK",
            "text/css; charset=utf-8",
            include_str!("page/status.css"),
        ),
        "/status.json" => {
            let text = snapshot.lock().map(|t| t.clone()).unwrap_or_default();
            let text = if text.trim().is_empty() {
                "{}".into()
            } else {
                text
            };
            let body = format!("{{\"snapshot\":{text},\"timeline\":{}}}", timeline_json());
            reply(&mut s, "200 OK", "application/json", &body)
        }
        "/metrics" => {
            let text = snapshot.lock().map(|t| t.clone()).unwrap_or_default();
            let doc: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let body = render(&doc);
            reply(
                &mut s,
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                &body,
            )
        }
        "/healthz" => match since_refresh() {
            Some(d) if d < STALLED_AFTER => reply(
                &mut s,
                "200 OK",
                "text/plain",
                "ok: the data plane makes progress\n",
            ),
            Some(d) => reply(
                &mut s,
                "503 Service Unavailable",
                "text/plain",
                &format!(
                    "the data plane made no progress for {:.1} s\n",
                    d.as_secs_f64()
                ),
            ),
            None => reply(
                &mut s,
                "503 Service Unavailable",
                "text/plain",
                "the data plane has not started\n",
            ),
        },
        _ => reply(
            &mut s,
            "404 Not Found",
            "text/plain",
            "not found: / (status page), /status.json, /metrics or /healthz\n",
        ),
    }
}

fn reply(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    // The page loads nothing from anywhere but this listener (the policy
    // makes a browser refuse to), and nothing is cached.
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nContent-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_renders_as_openmetrics() {
        let doc = serde_json::json!({
            "uptime_s": 12.5,
            "tun_dropped": 7,
            "status": {
                "connections": 3, "half_open": 1, "rebuilding": 0,
                "counters": {"packets_in": 10, "divergences": 2, "evictions": 1,
                    "commit_wait": {"counts": [3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], "sum_us": 1500}},
                "drops": [["truncated", 4], ["draining", 1]],
                "services": [{"name": "redis", "connections": 3, "client_bytes_in": 100, "client_bytes_out": 900, "replicas": [
                    {"addr": "198.18.11.2", "state": "serving", "alive": true, "connections": 3, "lag_in_bytes": 0, "lag_out_bytes": 5, "bytes_from": 900},
                    {"addr": "198.18.12.2", "state": "down", "alive": false, "connections": 0, "lag_in_bytes": 0, "lag_out_bytes": 0}
                ]}]
            },
            "control": {"agents": [{"replica": "198.18.11.2", "state": "registered"}], "dropped_records": 0, "rejected_frames": 2, "pending_commits": 0}
        });
        observe(&Event::Evicted {
            conn: "c".into(),
            replica: "198.18.12.2".parse().unwrap(),
            reason: ftnet_core::EvictReason::Stalled,
            remaining: 1,
            detail: String::new(),
        });
        let t = render(&doc);
        let mut names: Vec<&str> = t
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a metric name registered twice:\n{t}");
        for want in [
            "ftnet_connections 3\n",
            "ftnet_tun_dropped 7\n",
            "ftnet_packets_in_total 10\n",
            "ftnet_drops_total{reason=\"truncated\"} 4\n",
            "ftnet_replica_up{service=\"redis\",replica=\"198.18.11.2\"} 1\n",
            "ftnet_replica_up{service=\"redis\",replica=\"198.18.12.2\"} 0\n",
            "ftnet_replica_state{service=\"redis\",replica=\"198.18.12.2\",state=\"down\"} 1\n",
            "ftnet_agents 1\n",
            "ftnet_control_rejected_frames_total 2\n",
            "ftnet_evictions_total{replica=\"198.18.12.2\",reason=\"stalled\"} 1\n",
            "# TYPE ftnet_join_pause_milliseconds histogram\n",
            "ftnet_service_client_bytes_in_total{service=\"redis\"} 100\n",
            "ftnet_service_client_bytes_out_total{service=\"redis\"} 900\n",
            "ftnet_replica_bytes_total{service=\"redis\",replica=\"198.18.11.2\"} 900\n",
            "ftnet_commit_wait_milliseconds_bucket{le=\"1.0\"} 3\n",
            "ftnet_commit_wait_milliseconds_bucket{le=\"2.0\"} 4\n",
            "ftnet_commit_wait_milliseconds_bucket{le=\"+Inf\"} 5\n",
            "ftnet_commit_wait_milliseconds_count 5\n",
            "ftnet_commit_wait_milliseconds_sum 1.5\n",
            "ftnet_failure_detection_milliseconds_count",
            "# EOF\n",
        ] {
            assert!(t.contains(want), "{want:?} missing in:\n{t}");
        }
    }

    #[test]
    fn the_timeline_keeps_failovers_and_merges_bursts() {
        let r2: std::net::Ipv4Addr = "198.18.99.2".parse().unwrap();
        for _ in 0..50 {
            observe(&Event::Evicted {
                conn: "c".into(),
                replica: r2,
                reason: ftnet_core::EvictReason::Reset,
                remaining: 2,
                detail: String::new(),
            });
        }
        observe(&Event::ReplicaDown {
            service: "redis".into(),
            replica: r2,
            reason: ftnet_core::EvictReason::Reset,
            connections: 50,
            silent_ms: Some(3),
        });
        let tl: Value = serde_json::from_str(&timeline_json()).unwrap();
        let tl = tl.as_array().unwrap();
        let ev: Vec<&Value> = tl
            .iter()
            .filter(|e| e["replica"] == "198.18.99.2")
            .collect();
        assert_eq!(ev.len(), 2, "{tl:?}");
        assert_eq!(ev[0]["kind"], "evicted");
        assert_eq!(ev[0]["count"], 50, "a burst is one entry");
        assert_eq!(ev[1]["kind"], "down");
        assert!(ev[1]["text"]
            .as_str()
            .unwrap()
            .contains("declared down (reset)"));
        assert!(ev[1]["text"]
            .as_str()
            .unwrap()
            .contains("last heard 3 ms before"));
        for _ in 0..(TIMELINE_LEN + 10) {
            note("change", None, "x".into());
            // Not merged: another kind between.
            note("up", None, "y".into());
        }
        let tl: Value = serde_json::from_str(&timeline_json()).unwrap();
        assert_eq!(tl.as_array().unwrap().len(), TIMELINE_LEN, "bounded");
    }

    #[test]
    fn the_status_page_loads_only_from_its_router() {
        let html = include_str!("page/index.html");
        let js = include_str!("page/status.js");
        for text in [html, js, include_str!("page/status.css")] {
            assert!(
                !text.contains("http://") && !text.contains("https://") && !text.contains("//cdn"),
                "absolute URL in the page"
            );
        }
        assert!(html.contains("src=\"/status.js\""));
        assert!(js.contains("fetch(\"/status.json\""));
    }
}
