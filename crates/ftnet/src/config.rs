//! The operator's configuration file (`ftnet.toml`): parsing, validation
//! with `file:line:col` errors, and mapping to [`ftnet_core::Config`].

use ftnet_core::{Limits, Service, Timeouts};
use serde::Deserialize;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// Most data-plane threads (and TUN queues) a router runs.
pub const MAX_THREADS: u32 = 16;

/// The default number of data-plane threads: the CPUs rounded down to even,
/// at most 8; 1 on a single CPU.
pub fn default_threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        1
    } else {
        (cpus - cpus % 2).min(8)
    }
}

/// Packets the kernel may queue for each of the router's TUN queues
/// (`txqueuelen`): about a quarter second of a busy router's input, so that
/// a data-plane thread the scheduler holds back on a loaded host loses
/// nothing. With 1,000 (Linux's default) a 2-core host running the router,
/// three Redis replicas and their clients dropped 0.3 % of what went to
/// the router; each loss is repaired by TCP, but a burst of them delays a
/// replica's reply by its retransmission back-off (seconds) and makes it
/// look stalled.
pub const DEFAULT_TUN_QUEUE_LEN: u32 = 8192;

/// A validated configuration file.
#[derive(Debug, Clone)]
pub struct FileConfig {
    pub tun: String,
    pub table: u32,
    pub mtu: u32,
    pub status_socket: PathBuf,
    /// `status_group`: the group (its id) whose members may read the
    /// status socket (`ftnet status` without root); `None`: root only.
    /// Operator requests on it (drain, replica changes) stay root's.
    pub status_group: Option<(String, u32)>,
    /// `metrics_listen`: where `/metrics` (Prometheus) and `/healthz` are
    /// served over HTTP; `None` = not served.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Data-plane threads, one TUN queue each: 1, or an even number split
    /// evenly between the two directions. Default: the number of CPUs
    /// rounded down to even, at most 8 (1 on a single CPU).
    pub threads: usize,
    /// How long a data-plane thread keeps polling its queue after the last
    /// packet before it sleeps (0 = never spin).
    pub busy_poll: Duration,
    /// Packets the kernel queues for each TUN queue before it drops them
    /// (the device's `txqueuelen`).
    pub tun_queue_len: u32,
    /// `[control]`: agents register here; `None` = no agents.
    pub control: Option<ControlConfig>,
    /// `[fault]`: test-only loss towards one replica.
    pub fault: Option<FaultConfig>,
    pub core: ftnet_core::Config,
}

/// A configuration error, already formatted as
/// `file:line:col: what is wrong — how to fix`.
#[derive(Debug)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.msg)
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    router: Option<Spanned<RawRouter>>,
    #[serde(default)]
    limits: Option<RawLimits>,
    #[serde(default)]
    timeouts: Option<RawTimeouts>,
    #[serde(default)]
    control: Option<Spanned<RawControl>>,
    #[serde(default)]
    fault: Option<Spanned<RawFault>>,
    #[serde(default)]
    service: Vec<RawService>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFault {
    drop_data_to: Option<Spanned<String>>,
    drop_every: Option<Spanned<u32>>,
    drop_acks: Option<bool>,
}

/// `[fault]`: a test hook (there is no netem here). Every `every`-th packet
/// carrying data that the router writes to `replica` is dropped, so that
/// replica sees loss and retransmissions the others do not. With
/// `drop_acks = true`, every `every`-th pure ACK (no data, no SYN, FIN or
/// RST) instead: the last ACK of a handshake among them, which leaves that
/// replica's connection in SYN-RECEIVED until the next segment.
#[derive(Debug, Clone, Copy)]
pub struct FaultConfig {
    pub drop_data_to: Ipv4Addr,
    pub every: u32,
    pub acks: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawControl {
    listen: Option<Spanned<String>>,
    secret_file: Option<Spanned<String>>,
    heartbeat_ms: Option<Spanned<u64>>,
    dead_after_ms: Option<Spanned<u64>>,
    commit_wait_ms: Option<Spanned<u64>>,
    realtime_priority: Option<Spanned<i64>>,
    tick_ms: Option<Spanned<u64>>,
}

/// The agents' control channel (`[control]`): where the router listens,
/// the shared secret, the heartbeat timing.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    pub listen: std::net::SocketAddrV4,
    pub secret: Vec<u8>,
    pub secret_file: PathBuf,
    pub heartbeat: Duration,
    pub dead_after: Duration,
    /// How long a SYN-ACK waits for the agents to confirm the connection's
    /// record (output commit); zero sends it at once.
    pub commit_wait: Duration,
    /// SCHED_RR priority of the threads that talk to the agents (0: normal
    /// scheduling): their delay on a loaded host would read as an agent's
    /// silence.
    pub realtime_priority: i32,
    /// How often each service's input order gets a clock tick, the time
    /// the servers under the shim see (zero: no ticks; the servers keep
    /// the kernel's clock and timers).
    pub tick: Duration,
}

/// Read a shared secret file: its bytes, trailing whitespace removed; at
/// least 16 bytes. The error says how to make one.
/// The id of the group called `name` on this host (`getgrnam_r`).
pub fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: an all-zero `group` is a valid value of this plain C struct
    // (null pointers, zero ids); getgrnam_r fills it in.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: `c` is NUL-terminated,
    // `grp` and `res` are writable, `buf` is writable for its length.
    let rc =
        unsafe { libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut res) };
    (rc == 0 && !res.is_null()).then_some(grp.gr_gid)
}

pub fn read_secret(path: &Path) -> Result<Vec<u8>, String> {
    let raw = std::fs::read(path).map_err(|e| format!("cannot read secret file {}: {e} — create one with `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > {}`", path.display(), path.display()))?;
    let mut s = raw;
    while s.last().is_some_and(|b| b.is_ascii_whitespace()) {
        s.pop();
    }
    if s.len() < 16 {
        return Err(format!(
            "secret file {} holds {} bytes — use at least 16 random bytes (e.g. 64 hex digits)",
            path.display(),
            s.len()
        ));
    }
    Ok(s)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRouter {
    tun: Option<Spanned<String>>,
    table: Option<Spanned<u32>>,
    mtu: Option<Spanned<u32>>,
    status_socket: Option<Spanned<String>>,
    status_group: Option<Spanned<String>>,
    metrics_listen: Option<Spanned<String>>,
    threads: Option<Spanned<u32>>,
    busy_poll_us: Option<Spanned<u64>>,
    tun_queue_len: Option<Spanned<u32>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_connections: Option<Spanned<u64>>,
    max_half_open: Option<Spanned<u64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    failure_detection_ms: Option<Spanned<u64>>,
    syn_retries: Option<Spanned<u32>>,
    idle_s: Option<Spanned<u64>>,
    handshake_s: Option<Spanned<u64>>,
    time_wait_ms: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: Spanned<String>,
    vip: Spanned<String>,
    ports: Spanned<Vec<Spanned<u16>>>,
    replicas: Spanned<Vec<Spanned<String>>>,
    vote: Option<Spanned<String>>,
    vote_tie: Option<Spanned<String>>,
    output: Option<Spanned<String>>,
    stateless: Option<Spanned<bool>>,
    ack: Option<Spanned<String>>,
    ack_replicas: Option<Spanned<u8>>,
    delivery: Option<Spanned<String>>,
}

/// Read and validate `path`.
pub fn load(path: &Path) -> anyhow::Result<FileConfig> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    Ok(parse(&path.display().to_string(), &text)?)
}

/// Parse and validate configuration text; `file` is used in error messages.
pub fn parse(file: &str, text: &str) -> Result<FileConfig, ConfigError> {
    let err = |span: Option<Range<usize>>, msg: String| {
        let (line, col) = line_col(text, span.map(|s| s.start).unwrap_or(0));
        ConfigError {
            file: file.to_string(),
            line,
            col,
            msg,
        }
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        let msg = e.message().trim().to_string();
        let hint = if msg.contains("unknown field") {
            " — remove it or check the spelling (see `ftnet router --help` for the format)"
        } else if msg.contains("missing field") {
            " — every [[service]] needs name, vip, ports and replicas"
        } else if msg.contains("invalid type") || msg.contains("invalid value") {
            " — change the value to what is expected (see `ftnet router --help` for the format)"
        } else {
            " — see `ftnet router --help` for the format"
        };
        err(e.span(), format!("{msg}{hint}"))
    })?;

    // [router]
    let router = raw.router.map(|r| r.into_inner()).unwrap_or_default();
    let tun = match router.tun {
        Some(t) => {
            let name = t.get_ref();
            if name.is_empty()
                || name.len() > 15
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            {
                return Err(err(Some(t.span()), format!("tun name {name:?} is not a valid interface name — use 1 to 15 characters from [A-Za-z0-9._-]")));
            }
            name.clone()
        }
        None => "ftnet0".to_string(),
    };
    let table = match router.table {
        Some(t) => {
            let v = *t.get_ref();
            // The table number doubles as the priority of our rules, which
            // must come before the main table's rule at 32766.
            if v == 0 || v > 32765 || (253..=255).contains(&v) {
                return Err(err(Some(t.span()), format!("table {v} is not usable — pick a number from 1 to 32765 other than 253, 254, 255 (reserved; it is also the rules' priority)")));
            }
            v
        }
        None => 7000,
    };
    let mtu = match router.mtu {
        Some(m) => {
            let v = *m.get_ref();
            if !(576..=65535).contains(&v) {
                return Err(err(
                    Some(m.span()),
                    format!("mtu {v} out of range — use 576 to 65535 (1500 matches Ethernet)"),
                ));
            }
            v
        }
        None => 1500,
    };
    let status_socket = match router.status_socket {
        Some(s) if s.get_ref().is_empty() => {
            return Err(err(
                Some(s.span()),
                "status_socket is empty — give a path such as \"/run/ftnet/ftnet0.sock\"".into(),
            ))
        }
        Some(s) => PathBuf::from(s.into_inner()),
        None => PathBuf::from(format!("/run/ftnet/{tun}.sock")),
    };
    let status_group = match router.status_group {
        Some(g) => match group_id(g.get_ref()) {
            Some(gid) => Some((g.get_ref().clone(), gid)),
            None => {
                return Err(err(
                    Some(g.span()),
                    format!("status_group {:?}: no such group on this host — create it (`groupadd {}`) or leave status_group out (root only)", g.get_ref(), g.get_ref()),
                ))
            }
        },
        None => None,
    };

    let metrics_listen = match router.metrics_listen {
        Some(m) => Some(m.get_ref().parse::<std::net::SocketAddr>().map_err(|_| {
            err(
                Some(m.span()),
                format!("metrics_listen = {:?} is not an address and port — use e.g. \"127.0.0.1:9100\" (HTTP: /metrics for Prometheus, /healthz)", m.get_ref()),
            )
        })?),
        None => None,
    };

    let threads = match router.threads {
        Some(t) => {
            let v = *t.get_ref();
            if !(v == 1 || (v % 2 == 0 && (2..=MAX_THREADS).contains(&v))) {
                return Err(err(Some(t.span()), format!("threads = {v} is not supported — use 1, or an even number from 2 to {MAX_THREADS} (half the threads read client packets, half replica replies)")));
            }
            v as usize
        }
        None => default_threads(),
    };
    let busy_poll = match router.busy_poll_us {
        Some(b) => {
            let v = *b.get_ref();
            if v > 100_000 {
                return Err(err(Some(b.span()), format!("busy_poll_us = {v} is too long — use 0 (off) to 100000; 50 to 200 covers a request/response turn-around")));
            }
            Duration::from_micros(v)
        }
        None => Duration::ZERO,
    };
    let tun_queue_len = match router.tun_queue_len {
        Some(q) => {
            let v = *q.get_ref();
            if !(64..=1_000_000).contains(&v) {
                return Err(err(Some(q.span()), format!("tun_queue_len = {v} is out of range — use 64 to 1000000 packets (default {DEFAULT_TUN_QUEUE_LEN})")));
            }
            v
        }
        None => DEFAULT_TUN_QUEUE_LEN,
    };

    // [control]
    let control: Option<ControlConfig> = match raw.control {
        None => None,
        Some(c) => {
            let whole = c.span();
            let c = c.into_inner();
            let listen = match c.listen {
                Some(l) => l.get_ref().parse::<std::net::SocketAddrV4>().map_err(|_| err(Some(l.span()), format!("listen = {:?} is not an IPv4 address and port — use e.g. \"0.0.0.0:7400\"", l.get_ref())))?,
                None => return Err(err(Some(whole), "[control] needs listen = \"ADDR:PORT\" (where agents connect, e.g. \"0.0.0.0:7400\")".into())),
            };
            let (secret_file, secret) = match c.secret_file {
                Some(f) => {
                    let p = PathBuf::from(f.get_ref());
                    let secret = read_secret(&p).map_err(|m| err(Some(f.span()), m))?;
                    (p, secret)
                }
                None => return Err(err(Some(whole), "[control] needs secret_file = \"PATH\" (the secret shared with the agents, at least 16 bytes)".into())),
            };
            let heartbeat = match c.heartbeat_ms {
                Some(h) if !(10..=60_000).contains(h.get_ref()) => {
                    return Err(err(
                        Some(h.span()),
                        format!(
                            "heartbeat_ms = {} out of range — use 10 to 60000",
                            h.get_ref()
                        ),
                    ))
                }
                Some(h) => Duration::from_millis(*h.get_ref()),
                None => Duration::from_millis(100),
            };
            let dead_after = match c.dead_after_ms {
                Some(d) if *d.get_ref() < u64::try_from(2 * heartbeat.as_millis()).unwrap_or(u64::MAX) => return Err(err(Some(d.span()), format!("dead_after_ms = {} is shorter than two heartbeats ({} ms) — one lost heartbeat would evict a healthy host", d.get_ref(), 2 * heartbeat.as_millis()))),
                Some(d) => Duration::from_millis(*d.get_ref()),
                None => heartbeat * 5,
            };
            let commit_wait = match c.commit_wait_ms {
                Some(w) if *w.get_ref() > 5_000 => return Err(err(Some(w.span()), format!("commit_wait_ms = {} out of range — use 0 (send SYN-ACKs without waiting for the agents) to 5000; the default, 100, is far above a healthy agent's answer (well under 1 ms)", w.get_ref()))),
                Some(w) => Duration::from_millis(*w.get_ref()),
                None => Duration::from_millis(100),
            };
            let realtime_priority = match c.realtime_priority {
                Some(p) if !(0..=99).contains(p.get_ref()) => return Err(err(Some(p.span()), format!("realtime_priority = {} out of range — use 1 to 99 (SCHED_RR, as corosync and keepalived run their heartbeats), or 0 for normal scheduling; the default is 10", p.get_ref()))),
                Some(p) => i32::try_from(*p.get_ref()).unwrap_or(0),
                None => 10,
            };
            let tick = match c.tick_ms {
                Some(t) if *t.get_ref() > 1_000 => return Err(err(Some(t.span()), format!("tick_ms = {} out of range — use 1 to 1000 (how often the servers' clock moves; their timers fire at the ticks), or 0 to leave the servers the kernel's clock; the default is 10", t.get_ref()))),
                Some(t) => Duration::from_millis(*t.get_ref()),
                None => Duration::from_millis(10),
            };
            Some(ControlConfig {
                listen,
                secret,
                secret_file,
                heartbeat,
                dead_after,
                commit_wait,
                realtime_priority,
                tick,
            })
        }
    };

    // [fault]
    let fault = match raw.fault {
        None => None,
        Some(f) => {
            let whole = f.span();
            let f = f.into_inner();
            let addr = match f.drop_data_to {
                Some(a) => a.get_ref().parse::<Ipv4Addr>().map_err(|_| {
                    err(
                        Some(a.span()),
                        format!(
                            "drop_data_to = {:?} is not an IPv4 address — name a replica",
                            a.get_ref()
                        ),
                    )
                })?,
                None => {
                    return Err(err(
                        Some(whole),
                        "[fault] needs drop_data_to = \"REPLICA\"".into(),
                    ))
                }
            };
            let every = match f.drop_every {
                Some(e) if *e.get_ref() < 2 => {
                    return Err(err(
                        Some(e.span()),
                        "drop_every must be at least 2 (1 would drop everything)".into(),
                    ))
                }
                Some(e) => *e.get_ref(),
                None => 20,
            };
            Some(FaultConfig {
                drop_data_to: addr,
                every,
                acks: f.drop_acks.unwrap_or(false),
            })
        }
    };

    // [limits]
    let rl = raw.limits.unwrap_or_default();
    let mut limits = Limits::default();
    if let Some(v) = rl.max_connections {
        if *v.get_ref() == 0 {
            return Err(err(
                Some(v.span()),
                "max_connections is 0 — the router could accept nothing; use e.g. 65536".into(),
            ));
        }
        limits.max_connections = usize::try_from(*v.get_ref()).unwrap_or(usize::MAX);
    }
    if let Some(v) = rl.max_half_open {
        if *v.get_ref() == 0 {
            return Err(err(
                Some(v.span()),
                "max_half_open is 0 — no handshake could start; use e.g. 8192".into(),
            ));
        }
        if usize::try_from(*v.get_ref()).unwrap_or(usize::MAX) > limits.max_connections {
            return Err(err(
                Some(v.span()),
                format!(
                    "max_half_open {} exceeds max_connections {} — lower it",
                    v.get_ref(),
                    limits.max_connections
                ),
            ));
        }
        limits.max_half_open = usize::try_from(*v.get_ref()).unwrap_or(usize::MAX);
    }

    // [timeouts]
    let rt = raw.timeouts.unwrap_or_default();
    let mut timeouts = Timeouts::default();
    if let Some(v) = rt.failure_detection_ms {
        if *v.get_ref() == 0 {
            return Err(err(Some(v.span()), "failure_detection_ms is 0 — every replica would be declared failed at once; use e.g. 100".into()));
        }
        timeouts.failure_detection = Duration::from_millis(*v.get_ref());
    }
    if let Some(v) = rt.syn_retries {
        if *v.get_ref() > 10 {
            return Err(err(Some(v.span()), format!("syn_retries {} is too many — a replica that ignores that many SYNs is dead; use 0 to 10", v.get_ref())));
        }
        timeouts.syn_retries = *v.get_ref();
    }
    if let Some(v) = rt.idle_s {
        if *v.get_ref() == 0 {
            return Err(err(
                Some(v.span()),
                "idle_s is 0 — connections would be forgotten immediately; use e.g. 600".into(),
            ));
        }
        timeouts.idle = Duration::from_secs(*v.get_ref());
    }
    if let Some(v) = rt.handshake_s {
        if *v.get_ref() == 0 {
            return Err(err(
                Some(v.span()),
                "handshake_s is 0 — no handshake could complete; use e.g. 20".into(),
            ));
        }
        timeouts.handshake = Duration::from_secs(*v.get_ref());
    }
    if let Some(v) = rt.time_wait_ms {
        timeouts.time_wait = Duration::from_millis(*v.get_ref());
    }

    // [[service]]
    if raw.service.is_empty() {
        return Err(err(
            None,
            "no [[service]] defined — add one with name, vip, ports and replicas".into(),
        ));
    }
    let mut services: Vec<Service> = Vec::new();
    let mut names: HashMap<String, ()> = HashMap::new();
    // (vip, port) -> service name, and (replica, port) -> service name: a
    // reply from a replica port must map to exactly one service.
    let mut claimed: HashMap<(Ipv4Addr, u16), String> = HashMap::new();
    let mut replica_claimed: HashMap<(Ipv4Addr, u16), String> = HashMap::new();
    let mut replica_spans: Vec<(Ipv4Addr, Range<usize>)> = Vec::new();
    for s in raw.service {
        let name = s.name.get_ref().clone();
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(err(Some(s.name.span()), format!("service name {name:?} is empty or has whitespace — use a short identifier such as \"redis\"")));
        }
        if names.insert(name.clone(), ()).is_some() {
            return Err(err(
                Some(s.name.span()),
                format!("service name {name:?} is used twice — give each [[service]] its own name"),
            ));
        }
        let vip = parse_ip(s.vip.get_ref()).map_err(|m| {
            err(
                Some(s.vip.span()),
                format!("vip {:?}: {m}", s.vip.get_ref()),
            )
        })?;
        if s.ports.get_ref().is_empty() {
            return Err(err(
                Some(s.ports.span()),
                format!("service {name:?} has no ports — list at least one, e.g. ports = [6379]"),
            ));
        }
        let mut ports = Vec::new();
        for p in s.ports.get_ref() {
            let port = *p.get_ref();
            if port == 0 {
                return Err(err(
                    Some(p.span()),
                    "port 0 is not a real port — use 1 to 65535".into(),
                ));
            }
            if ports.contains(&port) {
                return Err(err(
                    Some(p.span()),
                    format!("port {port} is listed twice — remove the duplicate"),
                ));
            }
            if let Some(other) = claimed.insert((vip, port), name.clone()) {
                return Err(err(Some(p.span()), format!("{vip}:{port} is already served by service {other:?} — one VIP:port belongs to one service")));
            }
            ports.push(port);
        }
        if s.replicas.get_ref().is_empty() {
            return Err(err(Some(s.replicas.span()), format!("service {name:?} has no replicas — list at least one address, e.g. replicas = [\"198.18.11.2\"]")));
        }
        let mut replicas = Vec::new();
        for r in s.replicas.get_ref() {
            let ip = parse_ip(r.get_ref())
                .map_err(|m| err(Some(r.span()), format!("replica {:?}: {m}", r.get_ref())))?;
            if replicas.contains(&ip) {
                return Err(err(
                    Some(r.span()),
                    format!("replica {ip} is listed twice — remove the duplicate"),
                ));
            }
            for port in &ports {
                if let Some(other) = replica_claimed.insert((ip, *port), name.clone()) {
                    return Err(err(Some(r.span()), format!("replica {ip} port {port} already belongs to service {other:?} — its replies could not be told apart; use another replica address or port")));
                }
            }
            replica_spans.push((ip, r.span()));
            replicas.push(ip);
        }
        let tie = match s
            .vote_tie
            .as_ref()
            .map(|t| (t.get_ref().as_str(), t.span()))
        {
            None | Some(("first", _)) => ftnet_core::Tie::First,
            Some(("reset", _)) => ftnet_core::Tie::Reset,
            Some((other, span)) => {
                return Err(err(Some(span), format!("vote_tie = {other:?} is not a policy — use \"first\" (the replica listed first wins a tie) or \"reset\" (the client's connection is reset)")));
            }
        };
        let output = match s.output.as_ref().map(|o| (o.get_ref().as_str(), o.span())) {
            None | Some(("primary", _)) => ftnet_core::Voting::Primary,
            Some(("fastest", _)) => ftnet_core::Voting::Fastest,
            Some((other, span)) => {
                return Err(err(Some(span), format!("output = {other:?} is not an output policy — use \"primary\" (the client follows one replica per connection, the others are compared; the default) or \"fastest\" (first copy of each byte wins: only for servers whose replies are identical byte for byte)")));
            }
        };
        let voting = match s.vote.as_ref().map(|v| (v.get_ref().as_str(), v.span())) {
            None | Some(("off", _)) => {
                if let Some(t) = &s.vote_tie {
                    return Err(err(Some(t.span()), format!("vote_tie needs vote = \"majority\" in service {name:?} — add it, or remove vote_tie")));
                }
                output
            }
            Some(("majority", _)) => {
                if let Some(o) = &s.output {
                    return Err(err(Some(o.span()), format!("output applies without voting, and service {name:?} has vote = \"majority\" (the client gets what a majority sent) — remove one of them")));
                }
                ftnet_core::Voting::Majority { tie }
            }
            Some((other, span)) => {
                return Err(err(Some(span), format!("vote = {other:?} is not a voting mode — use \"off\" (no vote: `output` decides) or \"majority\" (bytes go out once most replicas sent the same)")));
            }
        };
        let ack = match s.ack.as_ref().map(|a| (a.get_ref().as_str(), a.span())) {
            None | Some(("all", _)) => {
                if let Some(k) = &s.ack_replicas {
                    return Err(err(Some(k.span()), format!("ack_replicas needs ack = \"log\" in service {name:?} — add it, or remove ack_replicas")));
                }
                ftnet_core::Ack::All
            }
            Some(("log", _)) => {
                let k = s.ack_replicas.as_ref().map_or(1, |k| *k.get_ref());
                if k == 0 || usize::from(k) > replicas.len() {
                    let span = s.ack_replicas.as_ref().map(|k| k.span());
                    return Err(err(span, format!("ack_replicas = {k} in service {name:?} — use 1 to {} (how many replicas must hold a byte, besides the router's log, before the client is acknowledged)", replicas.len())));
                }
                ftnet_core::Ack::Log { replicas: k }
            }
            Some((other, span)) => {
                return Err(err(Some(span), format!("ack = {other:?} is not an ack strategy — use \"all\" (the client is acknowledged once every replica has its bytes) or \"log\" (once the router's log and ack_replicas replicas have them)")));
            }
        };
        let delivery = match s
            .delivery
            .as_ref()
            .map(|d| (d.get_ref().as_str(), d.span()))
        {
            None | Some(("best-effort", _)) => ftnet_core::Delivery::BestEffort,
            Some(("safe", _)) => {
                if control.is_none() {
                    let span = s.delivery.as_ref().map(|d| d.span());
                    return Err(err(span, format!("delivery = \"safe\" in service {name:?} orders the servers' input through the agents — add a [control] section (the sequencer runs only with agents)")));
                }
                ftnet_core::Delivery::Safe
            }
            Some((other, span)) => {
                return Err(err(Some(span), format!("delivery = {other:?} is not a delivery mode — use \"best-effort\" (servers read client bytes as they arrive; the default) or \"safe\" (only once every live replica holds them: a client's reset or crash never leaves the replicas with different input)")));
            }
        };
        services.push(Service {
            name,
            vip,
            ports,
            replicas,
            voting,
            stateless: s.stateless.map(|b| *b.get_ref()).unwrap_or(false),
            ack,
            delivery,
        });
    }
    // Checked after all services are known: a replica may be listed before
    // the service whose VIP it collides with.
    for (ip, span) in &replica_spans {
        if let Some(s) = services.iter().find(|s| s.vip == *ip) {
            return Err(err(Some(span.clone()), format!("replica {ip} is the virtual IP of service {:?} — a replica needs its own real address", s.name)));
        }
    }
    Ok(FileConfig {
        tun,
        table,
        mtu,
        status_socket,
        status_group,
        metrics_listen,
        threads,
        busy_poll,
        tun_queue_len,
        core: ftnet_core::Config {
            services,
            timeouts: ftnet_core::Timeouts {
                // Output commit: a SYN-ACK waits for its record at the
                // agents, so a router that takes over finds every
                // connection a client holds a SYN-ACK for.
                record_commit: control
                    .as_ref()
                    .map(|c| c.commit_wait)
                    .filter(|w| !w.is_zero()),
                ..timeouts
            },
            limits,
            // The input order goes to the replicas' shims through the agents.
            sequencer: control.is_some(),
            // Clock ticks into the order: the servers' time and timers.
            tick: control.as_ref().map(|c| c.tick).filter(|t| !t.is_zero()),
            // Its agents fix the checkpoint's point with a fork and hold
            // a joiner's server until its state is proven.
            join_live: control.is_some(),
        },
        control,
        fault,
    })
}

fn parse_ip(s: &str) -> Result<Ipv4Addr, String> {
    let ip: Ipv4Addr = s
        .parse()
        .map_err(|_| "not an IPv4 address — write it like \"198.19.0.1\"".to_string())?;
    if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || ip.is_loopback() {
        return Err("is not a unicast host address — use a routable unicast address".into());
    }
    Ok(ip)
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary_compat(offset)];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

trait FloorCharBoundary {
    fn floor_char_boundary_compat(&self, i: usize) -> usize;
}

impl FloorCharBoundary for str {
    fn floor_char_boundary_compat(&self, mut i: usize) -> usize {
        while i > 0 && !self.is_char_boundary(i) {
            i -= 1;
        }
        i
    }
}

/// Data-plane settings a lab passes through to its router (`None` = the router's default).
#[derive(Debug, Clone, Default)]
pub struct LabTuning {
    /// `[fault]` drop_data_to, drop_every and drop_acks.
    pub fault_drop: Option<(Ipv4Addr, u32, bool)>,
    pub threads: Option<u8>,
    pub busy_poll_us: Option<u64>,
    /// Write a `[control]` section with this secret file.
    pub control_secret: Option<PathBuf>,
    /// `[control]` commit_wait_ms.
    pub commit_wait_ms: Option<u64>,
    /// `[control]` tick_ms.
    pub tick_ms: Option<u64>,
    /// `[control]` heartbeat_ms and dead_after_ms.
    pub heartbeat_ms: Option<(u64, u64)>,
    /// Voting lines for the service.
    pub vote: Option<&'static str>,
    /// `stateless = true` for the service.
    pub stateless: bool,
    /// `ack = "log"` for the service.
    pub ack_log: bool,
    /// `delivery = "safe"` for the service.
    pub delivery_safe: bool,
}

/// Write a lab configuration (used by `ftnet lab up`).
pub fn render_lab(
    vip: Ipv4Addr,
    ports: &[u16],
    replicas: &[Ipv4Addr],
    failure_ms: u64,
    tuning: &LabTuning,
    socket: &Path,
) -> String {
    let q = |v: &[String]| v.join(", ");
    let mut threads = tuning
        .threads
        .map(|t| format!("threads = {t}\n"))
        .unwrap_or_default();
    if let Some(b) = tuning.busy_poll_us {
        threads.push_str(&format!("busy_poll_us = {b}\n"));
    }
    if let Some((a, n, acks)) = tuning.fault_drop {
        threads.push_str(&format!(
            "\n[fault]\ndrop_data_to = \"{a}\"\ndrop_every = {n}\n"
        ));
        if acks {
            threads.push_str("drop_acks = true\n");
        }
    }
    if let Some(f) = &tuning.control_secret {
        threads.push_str(&format!(
            "\n[control]\nlisten = \"0.0.0.0:7400\"\nsecret_file = \"{}\"\n",
            f.display()
        ));
        if let Some(w) = tuning.commit_wait_ms {
            threads.push_str(&format!("commit_wait_ms = {w}\n"));
        }
        if let Some(t) = tuning.tick_ms {
            threads.push_str(&format!("tick_ms = {t}\n"));
        }
        if let Some((h, d)) = tuning.heartbeat_ms {
            threads.push_str(&format!("heartbeat_ms = {h}\ndead_after_ms = {d}\n"));
        }
    }
    format!(
        "# written by `ftnet lab up`\n[router]\ntun = \"ftnet0\"\ntable = 7000\nstatus_socket = \"{}\"\nmetrics_listen = \"127.0.0.1:9100\"\n{threads}\n[timeouts]\nfailure_detection_ms = {failure_ms}\n\n[[service]]\nname = \"lab\"\nvip = \"{vip}\"\nports = [{}]\nreplicas = [{}]\n{}",
        socket.display(),
        q(&ports.iter().map(|p| p.to_string()).collect::<Vec<_>>()),
        q(&replicas.iter().map(|r| format!("\"{r}\"")).collect::<Vec<_>>()),
        format!(
            "{}{}{}{}",
            tuning.vote.unwrap_or(""),
            if tuning.stateless { "stateless = true\n" } else { "" },
            if tuning.ack_log { "ack = \"log\"\n" } else { "" },
            if tuning.delivery_safe { "delivery = \"safe\"\n" } else { "" }
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[router]
tun = "ftnet0"
table = 7000
status_socket = "/run/ftnet/ftnet0.sock"
[limits]
max_connections = 65536
max_half_open = 8192
[timeouts]
failure_detection_ms = 100
syn_retries = 1
idle_s = 600
handshake_s = 20
time_wait_ms = 2000
[[service]]
name = "redis"
vip = "198.19.0.1"
ports = [6379]
replicas = ["198.18.11.2", "198.18.12.2", "198.18.13.2"]
"#;

    /// Parse, expect an error, and check it points at `line` and mentions `needle`.
    fn bad(text: &str, line: usize, needle: &str) {
        let e = parse("t.toml", text).expect_err("config should be rejected");
        let s = e.to_string();
        assert!(
            s.starts_with(&format!("t.toml:{line}:")),
            "wrong line in {s:?}, want {line}"
        );
        assert!(s.contains(needle), "{s:?} should mention {needle:?}");
        assert!(s.contains(" — "), "{s:?} should say how to fix it");
    }

    #[test]
    fn good_config_maps_to_core() {
        let c = parse("t.toml", GOOD).unwrap();
        assert_eq!(c.tun, "ftnet0");
        assert_eq!(c.table, 7000);
        assert_eq!(c.status_socket, PathBuf::from("/run/ftnet/ftnet0.sock"));
        assert_eq!(c.core.services.len(), 1);
        let s = &c.core.services[0];
        assert_eq!(s.vip, Ipv4Addr::new(198, 19, 0, 1));
        assert_eq!(s.ports, vec![6379]);
        assert_eq!(s.replicas.len(), 3);
        assert_eq!(
            c.core.timeouts.failure_detection,
            Duration::from_millis(100)
        );
        assert_eq!(c.core.timeouts.time_wait, Duration::from_millis(2000));
        assert_eq!(c.core.limits.max_half_open, 8192);
    }

    #[test]
    fn defaults() {
        let c = parse("t.toml", "[[service]]\nname = \"a\"\nvip = \"10.0.0.1\"\nports = [80]\nreplicas = [\"10.0.1.1\"]\n").unwrap();
        assert_eq!(c.tun, "ftnet0");
        assert_eq!(c.table, 7000);
        assert_eq!(c.mtu, 1500);
        assert_eq!(c.tun_queue_len, DEFAULT_TUN_QUEUE_LEN);
        assert_eq!(c.status_socket, PathBuf::from("/run/ftnet/ftnet0.sock"));
        assert_eq!(c.core.timeouts, Timeouts::default());
    }

    #[test]
    fn lab_rendering_parses() {
        let r = [Ipv4Addr::new(198, 18, 11, 2), Ipv4Addr::new(198, 18, 12, 2)];
        let t = render_lab(
            Ipv4Addr::new(198, 19, 0, 1),
            &[6379, 80],
            &r,
            50,
            &LabTuning {
                threads: Some(1),
                busy_poll_us: Some(70),
                control_secret: None,
                commit_wait_ms: None,
                tick_ms: None,
                heartbeat_ms: None,
                fault_drop: Some((r[1], 7, true)),
                vote: Some("vote = \"majority\"\n"),
                stateless: true,
                ack_log: true,
                delivery_safe: false,
            },
            Path::new("/run/x.sock"),
        );
        let c = parse("lab.toml", &t).unwrap();
        assert!(c.core.services[0].stateless);
        assert_eq!(c.core.services[0].ack, ftnet_core::Ack::Log { replicas: 1 });
        assert_eq!(c.threads, 1);
        assert_eq!(
            c.core.services[0].voting,
            ftnet_core::Voting::Majority {
                tie: ftnet_core::Tie::First
            }
        );
        assert!(c
            .fault
            .is_some_and(|f| f.drop_data_to == r[1] && f.every == 7 && f.acks));
        assert_eq!(c.busy_poll, Duration::from_micros(70));
        assert_eq!(c.core.services[0].ports, vec![6379, 80]);
        assert_eq!(c.core.timeouts.failure_detection, Duration::from_millis(50));
    }

    /// `[control] commit_wait_ms`: default 100 ms of output commit, 0 turns
    /// it off, past 5 s is refused with its line named.
    #[test]
    fn commit_wait() {
        let dir = std::env::temp_dir().join(format!("ftnet-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
        let with = |extra: &str| {
            format!(
                "{GOOD}\n[control]\nlisten = \"0.0.0.0:7400\"\nsecret_file = \"{}\"\n{extra}",
                secret.display()
            )
        };
        let c = parse("t.toml", &with("")).unwrap();
        assert_eq!(
            c.core.timeouts.record_commit,
            Some(Duration::from_millis(100))
        );
        let c = parse("t.toml", &with("commit_wait_ms = 0\n")).unwrap();
        assert_eq!(c.core.timeouts.record_commit, None);
        let c = parse("t.toml", &with("commit_wait_ms = 40\n")).unwrap();
        assert_eq!(
            c.core.timeouts.record_commit,
            Some(Duration::from_millis(40))
        );
        let line = with("").lines().count() + 1;
        bad(
            &with("commit_wait_ms = 9000\n"),
            line,
            "commit_wait_ms = 9000 out of range",
        );
        // Without agents nothing waits.
        assert_eq!(
            parse("t.toml", GOOD).unwrap().core.timeouts.record_commit,
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `[control] realtime_priority`: SCHED_RR 10 by default for the
    /// threads that hear the agents, 0 for normal scheduling, past 99
    /// refused with its line named.
    #[test]
    fn realtime_priority() {
        let dir = std::env::temp_dir().join(format!("ftnet-cfg-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(
            &secret,
            "0123456789abcdef0123456789abcdef
",
        )
        .unwrap();
        let with = |extra: &str| {
            format!(
                "{GOOD}\n[control]\nlisten = \"0.0.0.0:7400\"\nsecret_file = \"{}\"\n{extra}",
                secret.display()
            )
        };
        let prio = |extra: &str| {
            parse("t.toml", &with(extra))
                .unwrap()
                .control
                .unwrap()
                .realtime_priority
        };
        assert_eq!(prio(""), 10);
        assert_eq!(prio("realtime_priority = 0\n"), 0);
        assert_eq!(prio("realtime_priority = 50\n"), 50);
        let line = with("").lines().count() + 1;
        bad(
            &with("realtime_priority = 100\n"),
            line,
            "realtime_priority = 100 out of range",
        );
        bad(
            &with("realtime_priority = -1\n"),
            line,
            "realtime_priority = -1 out of range",
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unknown_key() {
        bad(
            &GOOD.replace("idle_s = 600", "idle_secs = 600"),
            12,
            "unknown field",
        );
        bad(
            &GOOD.replace("[router]\n", "[router]\nfoo = 1\n"),
            3,
            "unknown field",
        );
        bad(&format!("{GOOD}color = \"red\"\n"), 20, "unknown field");
    }

    #[test]
    fn invalid_vip() {
        bad(
            &GOOD.replace("198.19.0.1", "198.19.0.300"),
            17,
            "not an IPv4 address",
        );
        bad(&GOOD.replace("198.19.0.1", "224.0.0.1"), 17, "unicast");
    }

    #[test]
    fn invalid_replica() {
        bad(
            &GOOD.replace("\"198.18.12.2\"", "\"198.18.12\""),
            19,
            "not an IPv4 address",
        );
    }

    #[test]
    fn empty_replicas() {
        bad(
            &GOOD.replace(r#"["198.18.11.2", "198.18.12.2", "198.18.13.2"]"#, "[]"),
            19,
            "no replicas",
        );
    }

    #[test]
    fn ack_strategy() {
        let base = r#"replicas = ["198.18.11.2", "198.18.12.2", "198.18.13.2"]"#;
        let svc = |extra: &str| {
            parse("t.toml", &GOOD.replace(base, &format!("{base}\n{extra}")))
                .map(|c| c.core.services[0].ack)
        };
        assert_eq!(svc("").unwrap(), ftnet_core::Ack::All);
        assert_eq!(svc("ack = \"all\"").unwrap(), ftnet_core::Ack::All);
        assert_eq!(
            svc("ack = \"log\"").unwrap(),
            ftnet_core::Ack::Log { replicas: 1 }
        );
        assert_eq!(
            svc("ack = \"log\"\nack_replicas = 2").unwrap(),
            ftnet_core::Ack::Log { replicas: 2 }
        );
        bad(
            &GOOD.replace(base, &format!("{base}\nack = \"fast\"")),
            20,
            "not an ack strategy",
        );
        bad(
            &GOOD.replace(base, &format!("{base}\nack = \"log\"\nack_replicas = 4")),
            21,
            "use 1 to 3",
        );
        bad(
            &GOOD.replace(base, &format!("{base}\nack_replicas = 2")),
            20,
            "needs ack = \"log\"",
        );
    }

    #[test]
    fn voting() {
        let base = r#"replicas = ["198.18.11.2", "198.18.12.2", "198.18.13.2"]"#;
        assert_eq!(
            parse("t.toml", GOOD).unwrap().core.services[0].voting,
            ftnet_core::Voting::Primary
        );
        for (line, want) in [
            ("vote = \"off\"", ftnet_core::Voting::Primary),
            ("output = \"primary\"", ftnet_core::Voting::Primary),
            ("output = \"fastest\"", ftnet_core::Voting::Fastest),
        ] {
            let t = GOOD.replace(base, &format!("{base}\n{line}"));
            assert_eq!(
                parse("t.toml", &t).unwrap().core.services[0].voting,
                want,
                "{line}"
            );
        }
        bad(
            &GOOD.replace(base, &format!("{base}\noutput = \"first\"")),
            20,
            "not an output policy",
        );
        bad(
            &GOOD.replace(
                base,
                &format!("{base}\nvote = \"majority\"\noutput = \"primary\""),
            ),
            21,
            "output applies without voting",
        );
        let t = GOOD.replace(base, &format!("{base}\nvote = \"majority\""));
        assert_eq!(
            parse("t.toml", &t).unwrap().core.services[0].voting,
            ftnet_core::Voting::Majority {
                tie: ftnet_core::Tie::First
            }
        );
        let t = GOOD.replace(
            base,
            &format!("{base}\nvote = \"majority\"\nvote_tie = \"reset\""),
        );
        assert_eq!(
            parse("t.toml", &t).unwrap().core.services[0].voting,
            ftnet_core::Voting::Majority {
                tie: ftnet_core::Tie::Reset
            }
        );
        bad(
            &GOOD.replace(base, &format!("{base}\nvote = \"most\"")),
            20,
            "not a voting mode",
        );
        bad(
            &GOOD.replace(
                base,
                &format!("{base}\nvote = \"majority\"\nvote_tie = \"coin\""),
            ),
            21,
            "not a policy",
        );
        bad(
            &GOOD.replace(base, &format!("{base}\nvote_tie = \"reset\"")),
            20,
            "vote_tie needs vote",
        );
    }

    #[test]
    fn duplicate_replica() {
        bad(
            &GOOD.replace("198.18.13.2", "198.18.11.2"),
            19,
            "listed twice",
        );
    }

    #[test]
    fn port_zero_and_range() {
        bad(
            &GOOD.replace("ports = [6379]", "ports = [6379, 0]"),
            18,
            "port 0",
        );
        bad(&GOOD.replace("ports = [6379]", "ports = [70000]"), 18, "");
        bad(
            &GOOD.replace("ports = [6379]", "ports = []"),
            18,
            "no ports",
        );
    }

    #[test]
    fn vip_port_claimed_twice() {
        let t = format!("{GOOD}\n[[service]]\nname = \"other\"\nvip = \"198.19.0.1\"\nports = [80, 6379]\nreplicas = [\"198.18.21.2\"]\n");
        bad(&t, 24, "already served by service \"redis\"");
    }

    #[test]
    fn replica_equals_vip() {
        let t = format!("{GOOD}\n[[service]]\nname = \"other\"\nvip = \"198.19.0.2\"\nports = [80]\nreplicas = [\"198.19.0.1\"]\n");
        bad(&t, 25, "virtual IP");
    }

    #[test]
    fn failure_detection_zero() {
        bad(
            &GOOD.replace("failure_detection_ms = 100", "failure_detection_ms = 0"),
            10,
            "failure_detection_ms is 0",
        );
    }

    #[test]
    fn bad_table_and_tun() {
        bad(&GOOD.replace("table = 7000", "table = 254"), 4, "table 254");
        bad(
            &GOOD.replace("tun = \"ftnet0\"", "tun = \"a-very-long-tun-name\""),
            3,
            "interface name",
        );
    }

    #[test]
    fn tun_queue_len() {
        let with = |v: &str| {
            GOOD.replace(
                "table = 7000",
                &format!("table = 7000\ntun_queue_len = {v}"),
            )
        };
        assert_eq!(
            parse("t.toml", &with("20000")).unwrap().tun_queue_len,
            20000
        );
        bad(&with("10"), 5, "tun_queue_len = 10 is out of range");
    }

    #[test]
    fn missing_field_and_no_service() {
        bad(
            &GOOD.replace("ports = [6379]\n", ""),
            15,
            "missing field `ports`",
        );
        bad("[router]\ntun = \"x\"\n", 1, "no [[service]]");
    }

    #[test]
    fn wrong_type() {
        bad(
            &GOOD.replace("syn_retries = 1", "syn_retries = \"one\""),
            11,
            "",
        );
    }
}
