//! `ftnet lab`: a local testbed of network namespaces joined by veth pairs.
//!
//! ```text
//!   ftnet-<name>-client            ftnet-<name>-router               ftnet-<name>-r<i>
//!  ┌──────────────────┐          ┌──────────────────────────┐       ┌──────────────────┐
//!  │ 198.18.1.2/24    ├─veth─────┤ 198.18.1.1   ftnet0 (TUN)│       │ server (redis…)  │
//!  │ default via .1.1 │          │ 198.18.(10+i).1 ─────────┼─veth──┤ 198.18.(10+i).2  │
//!  └──────────────────┘          │ ftnet router, VIP        │       │ default via .1   │
//!                                │ 198.19.0.1 (policy rules)│       └──────────────────┘
//!                                └──────────────────────────┘
//! ```
//!
//! Veth pairs are created directly inside their namespaces, so nothing of a
//! lab ever exists in the caller's namespace: deleting the namespaces (after
//! killing every process in them) removes all of it. State lives in
//! `/run/ftnet/lab/<name>/` (config, logs, pid files, status socket).

#[path = "lab_ha.rs"]
mod ha;

use crate::{config, status, sys};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use ftnet_io::ip;
use std::io::{BufRead, Read, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const LAB_ROOT: &str = "/run/ftnet/lab";
const VIP: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
const MAX_REPLICAS: usize = 16;
const DEFAULT_SERVER: &str = "redis-server --port {port} --bind 0.0.0.0 --save '' --appendonly no --protected-mode no --enable-debug-command yes --dir {dir}";
const READY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Subcommand)]
pub enum LabCmd {
    /// Create the namespaces, start the router and one server per replica, wait until all listen.
    #[command(after_help = "\
Addresses: client 198.18.1.2, router 198.18.1.1 and 198.18.(10+i).1, replica i 198.18.(10+i).2, VIP 198.19.0.1.
Namespaces: ftnet-<name>-client, ftnet-<name>-router, ftnet-<name>-r1 .. -rN.
Files: /run/ftnet/lab/<name>/{ftnet.toml,router.log,router.sock,router.pid,r<i>/server.log,r<i>/server.pid}.

Examples:
  ftnet lab up                                   # 3 redis replicas on port 6379
  ftnet lab up --name web --port 80 --server \"printf 'pid {dir}/nginx.pid; events {} http { server { listen {port}; root /usr/share/nginx/html; } }' > nginx.conf && exec nginx -c {dir}/nginx.conf -g 'daemon off;'\"
  ftnet lab up --replicas 2 --port 7000 --server 'socat TCP-LISTEN:{port},fork,reuseaddr EXEC:cat'")]
    Up(UpArgs),
    /// Run a command inside one of the lab's namespaces; its exit code becomes ours.
    #[command(after_help = "\
Examples:
  ftnet lab exec client -- redis-cli -h 198.19.0.1 PING
  ftnet lab exec r2 -- redis-cli -p 6379 DEBUG DIGEST
  ftnet lab exec router -- ip rule")]
    Exec {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
        /// Namespace: client, router, or rN for replica N (r1, r2, ...).
        target: String,
        /// Command and arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
    /// Process crash: kill -9 the server process group of replica N (returns once every member is gone).
    #[command(after_help = "Example:\n  ftnet lab kill 2")]
    Kill {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
        /// Replica number, 1-based.
        n: usize,
    },
    /// Process restart: start replica N's server again, as `lab up` started it (after `kill`).
    #[command(after_help = "Example:\n  ftnet lab kill 2 && sleep 1 && ftnet lab restart 2")]
    Restart {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
        /// Replica number, 1-based.
        n: usize,
    },
    /// Host loss: set replica N's link down on both ends (server keeps running, unreachable).
    #[command(after_help = "Example:\n  ftnet lab cut 3")]
    Cut {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
        /// Replica number, 1-based.
        n: usize,
    },
    /// Undo `cut`: replica N's link up again on both ends (a host that comes back with the
    /// state it had when it was cut; the router keeps it out until `ftnet replica enable`).
    #[command(after_help = "Example:\n  ftnet lab heal 3")]
    Heal {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
        /// Replica number, 1-based.
        n: usize,
    },
    /// HA lab: kill -9 the ftnet router that holds the gateway addresses; the other takes over.
    #[command(name = "kill-router", after_help = "Example:\n  ftnet lab kill-router")]
    KillRouter {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
    },
    /// HA lab: stop the router host that holds the addresses (its ftnet and keepalived, SIGSTOP)
    /// for a while, then let it go on (SIGCONT): a host that was not scheduled. The other takes
    /// over when the adverts stop; the stalled one comes back with what it knew before.
    #[command(
        name = "stall-router",
        after_help = "Example:\n  ftnet lab stall-router --ms 2000"
    )]
    StallRouter {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
        /// How long the router host stays stopped, in milliseconds.
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
        ms: u64,
    },
    /// HA lab: take every link of the router that holds the addresses down (router host loss).
    #[command(name = "cut-router", after_help = "Example:\n  ftnet lab cut-router")]
    CutRouter {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
    },
    /// HA lab: bring a killed or cut router back (links up, ftnet restarted); it stays backup.
    #[command(
        name = "restart-router",
        after_help = "Example:\n  ftnet lab restart-router"
    )]
    RestartRouter {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
    },
    /// `ftnet status` against the lab's router (with --ha: the one holding the addresses).
    Status {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
        /// Print the raw JSON snapshot.
        #[arg(long)]
        json: bool,
    },
    /// Kill every process in the lab's namespaces, delete them and the lab's files. Idempotent.
    #[command(
        after_help = "Examples:\n  ftnet lab down\n  ftnet lab down --all     # also leftovers of crashed labs (every ftnet-* namespace)"
    )]
    Down {
        /// Lab name.
        #[arg(long, default_value = "lab", conflicts_with = "all")]
        name: String,
        /// Remove every lab and every ftnet-* namespace.
        #[arg(long)]
        all: bool,
    },
    /// Bring a lab up, run CMD in the client namespace, tear down; exit code = CMD's.
    /// Teardown is guaranteed on Ctrl-C and even if this process is killed with -9.
    #[command(after_help = "\
Examples:
  ftnet lab run -- redis-cli -h 198.19.0.1 PING
  ftnet lab run --replicas 2 --port 7000 --server 'socat TCP-LISTEN:{port},fork,reuseaddr EXEC:cat' -- sh -c 'echo hi | socat - TCP:198.19.0.1:7000'")]
    Run {
        #[command(flatten)]
        up: UpArgs,
        /// Command and arguments to run in the client namespace, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
    /// The showcase: 3 redis replicas, redis-benchmark through the VIP, replica 2 killed
    /// mid-run, then status and the survivors' DEBUG DIGEST (they must agree).
    #[command(after_help = "Example:\n  ftnet lab demo")]
    Demo {
        /// Number of replicas.
        #[arg(long, default_value_t = 3)]
        replicas: usize,
        /// Lab name.
        #[arg(long, default_value = "demo")]
        name: String,
    },
    /// Internal: wait for EOF on stdin (the parent died), then tear the lab down.
    #[command(hide = true)]
    Reap {
        #[arg(long)]
        name: String,
    },
}

#[derive(Args, Clone)]
pub struct UpArgs {
    /// Lab name: 1 to 8 characters from [a-z0-9]; namespaces are ftnet-<name>-*.
    #[arg(long, default_value = "lab")]
    pub name: String,
    /// Number of replicas (1 to 16).
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Service port; repeat for several. The servers must listen on all of them.
    #[arg(long = "port", default_values_t = vec![6379u16])]
    pub ports: Vec<u16>,
    /// Server command, run with `sh -c` in each replica namespace. Placeholders: {i} replica
    /// number, {dir} its directory /run/ftnet/lab/<name>/r<i>, {port} the first port.
    /// Environment: FTNET_REPLICA=<i>. [default: redis-server on {port}, debug commands on]
    #[arg(long, value_name = "CMD")]
    pub server: Option<String>,
    /// Router failure-detection time in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub failure_ms: u64,
    /// Router data-plane threads: 1, or an even number up to 16 (half per direction) [default: the router's, the CPUs rounded down to even, at most 8].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=16))]
    pub threads: Option<u8>,
    /// Router busy polling in µs after the last packet (0 = sleep at once) [default: the router's, 0].
    #[arg(long, value_name = "US")]
    pub busy_poll_us: Option<u64>,
    /// How long the router holds a SYN-ACK for the agents to confirm the connection's
    /// record (output commit; with agents only; 0 = no wait) [default: the router's, 100].
    #[arg(long, value_name = "MS")]
    pub commit_wait_ms: Option<u64>,
    /// How often the router's clock ticks into the input order: the time and timers of the
    /// servers under the shim (with agents only; 0 = none: the servers keep the kernel's clock)
    /// [default: the router's, 10].
    #[arg(long, value_name = "MS")]
    pub tick_ms: Option<u64>,
    /// Run `ftnet agent` in every replica namespace (control channel on the router's
    /// 198.18.(10+i).1:7400, secret in /run/ftnet/lab/<name>/secret) and wait until all registered.
    #[arg(long)]
    pub agents: bool,
    /// Start every server under `ftnet run` (the determinism shim), fed by its agent; implies --agents.
    #[arg(long)]
    pub shim: bool,
    /// Run every server under `ftnet run --supervise` (implies --shim): a server that ends is
    /// started again, and a fresh one joins with the group's state (`lab kill N` ends the
    /// supervisor too; end only the server with `kill -9` on its pid to see it heal).
    #[arg(long)]
    pub supervise: bool,
    /// Test hook (no netem here): the router drops every N-th data packet it writes to replica R
    /// (R:N:acks: every N-th pure ACK instead, handshakes' last ACKs among them).
    #[arg(long, value_name = "R:N[:acks]")]
    pub fault_drop: Option<String>,
    /// The last K replicas get their namespace and server but are not in the router's
    /// config: spares for `ftnet replica add` (their addresses as usual).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub spares: usize,
    /// The service is stateless (`stateless = true`): a replica that left the group is probed
    /// and serves again once it answers.
    #[arg(long)]
    pub stateless: bool,
    /// When clients are acknowledged: `all` (once every replica has the bytes, the default) or
    /// `log` (once the router's input log and one replica have them; the router repairs a
    /// replica that lost a segment itself).
    #[arg(long, value_name = "MODE", value_parser = ["all", "log"])]
    pub ack: Option<String>,
    /// When the servers get client input: `best-effort` (as it arrives, the default) or `safe`
    /// (once every live replica holds it; with agents only).
    #[arg(long, value_name = "MODE", value_parser = ["best-effort", "safe"])]
    pub delivery: Option<String>,
    /// Two routers (namespaces router and router2) sharing the gateway addresses through
    /// keepalived's VRRP, joined to clients and replicas by bridges in namespace switch;
    /// implies --agents (a router that takes over rebuilds its table from their records).
    /// Then `kill-router`, `cut-router`, `restart-router`.
    #[arg(long)]
    pub ha: bool,
    /// Output voting for the lab service: `majority` (a reply byte reaches the client once most
    /// replicas sent the same) or `majority-reset` (the same, with vote_tie = "reset").
    #[arg(long, value_name = "MODE", value_parser = ["off", "majority", "majority-reset"])]
    pub vote: Option<String>,
    /// The output policy without voting: `primary` (the default: the client follows one
    /// replica per connection, the others are compared) or `fastest` (first copy of each byte
    /// wins; where replies differ, the client's stream is spliced).
    #[arg(long, value_name = "POLICY", value_parser = ["primary", "fastest"], conflicts_with = "vote")]
    pub output: Option<String>,
}

pub fn run(cmd: LabCmd) -> anyhow::Result<i32> {
    match cmd {
        LabCmd::Up(args) => {
            sys::install_session_stop_handler();
            let lab = Lab::new(&args.name)?;
            up(&lab, &args)?;
            print_summary(&lab, &args);
            Ok(0)
        }
        LabCmd::Exec { name, target, cmd } => {
            let lab = Lab::new(&name)?;
            let ns = lab.target_ns(&target)?;
            if !lab.namespaces()?.contains(&ns) {
                bail!(
                    "namespace {ns} does not exist — is the lab up? (`ftnet lab up --name {name}`)"
                );
            }
            // A handler rather than SIG_IGN: ignored signals stay ignored
            // across exec, handlers do not, so the command still gets Ctrl-C.
            sys::install_session_stop_handler();
            let st = Command::new("ip")
                .args(["netns", "exec", &ns])
                .args(&cmd)
                .status()
                .context("running ip netns exec")?;
            Ok(exit_code(st))
        }
        LabCmd::Kill { name, n } => {
            let lab = Lab::new(&name)?;
            kill(&lab, n)?;
            Ok(0)
        }
        LabCmd::Cut { name, n } => {
            let lab = Lab::new(&name)?;
            cut(&lab, n)?;
            Ok(0)
        }
        LabCmd::Restart { name, n } => {
            let lab = Lab::new(&name)?;
            restart(&lab, n)?;
            Ok(0)
        }
        LabCmd::Heal { name, n } => {
            let lab = Lab::new(&name)?;
            heal(&lab, n)?;
            Ok(0)
        }
        LabCmd::Status { name, json } => {
            let lab = Lab::new(&name)?;
            let sock = if lab.is_ha() {
                let k = ha::active(&lab).unwrap_or(0);
                if !json {
                    println!("router holding the addresses: {}", ha::ROUTERS[k].0);
                }
                lab.socket_n(k)
            } else {
                lab.socket()
            };
            status::show(&sock, json)?;
            Ok(0)
        }
        LabCmd::KillRouter { name } => {
            ha::kill_router(&Lab::new(&name)?)?;
            Ok(0)
        }
        LabCmd::CutRouter { name } => {
            ha::cut_router(&Lab::new(&name)?)?;
            Ok(0)
        }
        LabCmd::StallRouter { name, ms } => {
            ha::stall_router(&Lab::new(&name)?, ms)?;
            Ok(0)
        }
        LabCmd::RestartRouter { name } => {
            ha::restart_router(&Lab::new(&name)?)?;
            Ok(0)
        }
        LabCmd::Down { name, all } => {
            if all {
                down_all()?;
            } else {
                let lab = Lab::new(&name)?;
                down(&lab)?;
            }
            Ok(0)
        }
        LabCmd::Run { up: args, cmd } => run_guarded(&args, |lab| run_in(&lab.ns_client(), &cmd)),
        LabCmd::Demo { replicas, name } => {
            let args = UpArgs {
                name,
                replicas,
                ports: vec![6379],
                server: None,
                failure_ms: 100,
                threads: None,
                busy_poll_us: None,
                commit_wait_ms: None,
                tick_ms: None,
                agents: false,
                shim: false,
                supervise: false,
                fault_drop: None,
                spares: 0,
                stateless: false,
                ack: None,
                delivery: None,
                vote: None,
                output: None,
                ha: false,
            };
            run_guarded(&args, |lab| demo(lab, replicas))
        }
        LabCmd::Reap { name } => reap(&name),
    }
}

/// Names and paths of one lab.
pub struct Lab {
    name: String,
}

impl Lab {
    fn new(name: &str) -> anyhow::Result<Lab> {
        if name.is_empty()
            || name.len() > 8
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            bail!("lab name {name:?} is invalid — use 1 to 8 characters from [a-z0-9] (it becomes part of interface names)");
        }
        Ok(Lab {
            name: name.to_string(),
        })
    }
    fn prefix(&self) -> String {
        format!("ftnet-{}-", self.name)
    }
    fn ns_client(&self) -> String {
        format!("ftnet-{}-client", self.name)
    }
    fn ns_router(&self) -> String {
        format!("ftnet-{}-router", self.name)
    }
    fn ns_replica(&self, i: usize) -> String {
        format!("ftnet-{}-r{i}", self.name)
    }
    /// Client-side and router-side veth of the client link (≤ 15 bytes).
    fn veth_client(&self) -> (String, String) {
        (format!("ft{}-c", self.name), format!("ft{}-cr", self.name))
    }
    /// Replica-side and router-side veth of replica i's link (≤ 15 bytes for i ≤ 99).
    fn veth_replica(&self, i: usize) -> (String, String) {
        (
            format!("ft{}-r{i}", self.name),
            format!("ft{}-r{i}r", self.name),
        )
    }
    fn dir(&self) -> PathBuf {
        Path::new(LAB_ROOT).join(&self.name)
    }
    fn replica_dir(&self, i: usize) -> PathBuf {
        self.dir().join(format!("r{i}"))
    }
    fn socket(&self) -> PathBuf {
        self.dir().join("router.sock")
    }
    fn target_ns(&self, target: &str) -> anyhow::Result<String> {
        match target {
            "client" => Ok(self.ns_client()),
            "router" => Ok(self.ns_router()),
            "router2" => Ok(self.ns_router_n(1)),
            "switch" => Ok(self.ns_switch()),
            t => match t.strip_prefix('r').and_then(|n| n.parse::<usize>().ok()) {
                Some(i) if i >= 1 => Ok(self.ns_replica(i)),
                _ => bail!(
                    "unknown target {t:?} — use client, router, or rN for replica N (r1, r2, ...)"
                ),
            },
        }
    }
    /// This lab's namespaces that exist now.
    fn namespaces(&self) -> anyhow::Result<Vec<String>> {
        let p = self.prefix();
        Ok(list_namespaces()?
            .into_iter()
            .filter(|n| n.starts_with(&p))
            .collect())
    }
}

fn replica_ip(i: usize) -> Ipv4Addr {
    // `lab up` allows at most MAX_REPLICAS replicas.
    Ipv4Addr::new(198, 18, u8::try_from(10 + i).unwrap_or(u8::MAX), 2)
}

fn list_namespaces() -> anyhow::Result<Vec<String>> {
    let out = ip(&["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

fn exit_code(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Bail out between steps when the user pressed Ctrl-C.
fn check_interrupt() -> anyhow::Result<()> {
    if sys::stop_requested() {
        bail!(
            "interrupted by signal {} before the lab was ready",
            sys::last_signal()
        );
    }
    Ok(())
}

/// Tears the lab down if `up` does not complete.
struct UpGuard<'a> {
    lab: &'a Lab,
    armed: bool,
}

impl Drop for UpGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            eprintln!(
                "ftnet lab: setup did not complete, tearing down lab {:?}",
                self.lab.name
            );
            // The error names logs under the lab directory, which teardown
            // deletes; keep a copy so they can still be read.
            match keep_logs(self.lab) {
                Ok(Some(dir)) => eprintln!(
                    "ftnet lab: logs of the failed setup kept in {}",
                    dir.display()
                ),
                Ok(None) => {}
                Err(e) => eprintln!("ftnet lab: could not keep the logs: {e:#}"),
            }
            if let Err(e) = down(self.lab) {
                eprintln!("ftnet lab: teardown: {e:#}");
            }
        }
    }
}

/// Copy the lab's logs to /tmp/ftnet-lab-<name>-logs/ (replacing an older copy).
fn keep_logs(lab: &Lab) -> anyhow::Result<Option<PathBuf>> {
    let dest = PathBuf::from(format!("/tmp/ftnet-lab-{}-logs", lab.name));
    let mut logs: Vec<(PathBuf, String)> =
        vec![(lab.dir().join("router.log"), "router.log".into())];
    for i in 1..=MAX_REPLICAS {
        logs.push((
            lab.replica_dir(i).join("server.log"),
            format!("r{i}-server.log"),
        ));
    }
    let logs: Vec<_> = logs.into_iter().filter(|(p, _)| p.exists()).collect();
    if logs.is_empty() {
        return Ok(None);
    }
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
    for (src, name) in logs {
        std::fs::copy(&src, dest.join(name))
            .with_context(|| format!("copying {}", src.display()))?;
    }
    Ok(Some(dest))
}

fn up(lab: &Lab, args: &UpArgs) -> anyhow::Result<()> {
    let n = args.replicas;
    if n == 0 || n > MAX_REPLICAS {
        bail!("--replicas {n} out of range — use 1 to {MAX_REPLICAS}");
    }
    if args.ports.is_empty() || args.ports.contains(&0) {
        bail!("--port must be 1 to 65535");
    }
    if args.failure_ms == 0 {
        bail!("--failure-ms must be at least 1");
    }
    if let Some(t) = args.threads {
        if t != 1 && t % 2 == 1 {
            bail!("--threads {t}: use 1 or an even number (half the threads read client packets, half replica replies)");
        }
    }
    ensure_not_up(lab)?;
    let mut guard = UpGuard { lab, armed: true };

    std::fs::create_dir_all(lab.dir())
        .with_context(|| format!("creating {}", lab.dir().display()))?;
    let (c, r) = (lab.ns_client(), lab.ns_router());
    let mut all = vec![c.clone(), r.clone()];
    if args.ha {
        all.extend([lab.ns_router_n(1), lab.ns_switch()]);
    }
    all.extend((1..=n).map(|i| lab.ns_replica(i)));
    for ns in &all {
        check_interrupt()?;
        ip(&["netns", "add", ns])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
    }
    // Created directly in their namespaces (see the module comment).
    let link =
        |a_ns: &str, a: &str, a_ip: &str, b_ns: &str, b: &str, b_ip: &str| -> anyhow::Result<()> {
            check_interrupt()?;
            ip(&[
                "link", "add", "name", a, "netns", a_ns, "type", "veth", "peer", "name", b,
                "netns", b_ns,
            ])?;
            ip(&["-n", a_ns, "addr", "add", a_ip, "dev", a])?;
            ip(&["-n", b_ns, "addr", "add", b_ip, "dev", b])?;
            ip(&["-n", a_ns, "link", "set", a, "up"])?;
            ip(&["-n", b_ns, "link", "set", b, "up"])?;
            Ok(())
        };
    let (vc, vcr) = lab.veth_client();
    if args.ha {
        ha::network(lab, n)?;
    } else {
        link(&c, &vc, "198.18.1.2/24", &r, &vcr, "198.18.1.1/24")?;
        ip(&["-n", &c, "route", "add", "default", "via", "198.18.1.1"])?;
    }
    for i in (1..=n).filter(|_| !args.ha) {
        let (v, vr) = lab.veth_replica(i);
        let ns = lab.ns_replica(i);
        link(
            &ns,
            &v,
            &format!("198.18.{}.2/24", 10 + i),
            &r,
            &vr,
            &format!("198.18.{}.1/24", 10 + i),
        )?;
        ip(&[
            "-n",
            &ns,
            "route",
            "add",
            "default",
            "via",
            &format!("198.18.{}.1", 10 + i),
        ])?;
    }

    let secret = lab.dir().join("secret");
    let shim = args.shim || args.supervise;
    let agents = args.agents || shim || args.ha;
    if shim {
        crate::run::shim_library()?;
    }
    if agents {
        let key = sys::random_secret().context("reading /dev/urandom")?;
        let hex: String = key
            .iter()
            .chain(sys::random_secret()?.iter())
            .map(|b| format!("{b:02x}"))
            .collect();
        std::fs::write(&secret, hex + "\n")
            .with_context(|| format!("writing {}", secret.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600))?;
        // Agents before the servers: a server under the shim connects to its
        // agent when it starts listening. (They retry until the router is up.)
        for i in 1..=n {
            check_interrupt()?;
            std::fs::create_dir_all(lab.replica_dir(i))?;
            start_agent(lab, i, &secret, args.supervise)?;
        }
        // Their shim sockets exist before any server looks for them.
        wait_until(
            Duration::from_secs(5),
            || (1..=n).all(|i| lab.replica_dir(i).join("shim.sock").exists()),
            || {
                format!(
                    "agents did not open their shim sockets within 5 s — read {}/r<i>/agent.log",
                    lab.dir().display()
                )
            },
        )?;
    }

    // Servers before the router: the router's SYNs find them listening sooner.
    let template = args.server.as_deref().unwrap_or(DEFAULT_SERVER);
    let mut servers: Vec<Child> = Vec::new();
    for i in 1..=n {
        check_interrupt()?;
        let mode = match (shim, args.supervise) {
            (true, true) => ServerMode::Supervised,
            (true, false) => ServerMode::Shim,
            _ => ServerMode::Plain,
        };
        servers.push(start_server(lab, i, template, args.ports[0], mode)?);
    }

    check_interrupt()?;
    if args.spares >= n {
        anyhow::bail!(
            "--spares {} leaves no replica in the router's config (of --replicas {n})",
            args.spares
        );
    }
    let replicas: Vec<Ipv4Addr> = (1..=n - args.spares).map(replica_ip).collect();
    let cfg_path = lab.dir().join("ftnet.toml");
    let fault_drop = match &args.fault_drop {
        None => None,
        Some(spec) => {
            let bad = || {
                anyhow::anyhow!("--fault-drop {spec:?}: use R:N (replica number, drop every N-th data packet to it, N ≥ 2), e.g. 2:20, or R:N:acks (every N-th pure ACK instead)")
            };
            let (spec_rk, acks) = match spec.strip_suffix(":acks") {
                Some(rk) => (rk, true),
                None => (spec.as_str(), false),
            };
            let (r, k) = spec_rk.split_once(':').ok_or_else(bad)?;
            let (r, k): (usize, u32) =
                (r.parse().map_err(|_| bad())?, k.parse().map_err(|_| bad())?);
            if r == 0 || r > n || k < 2 {
                return Err(bad());
            }
            Some((replica_ip(r), k, acks))
        }
    };
    let tuning = config::LabTuning {
        fault_drop,
        threads: args.threads,
        busy_poll_us: args.busy_poll_us,
        control_secret: agents.then(|| secret.clone()),
        commit_wait_ms: args.commit_wait_ms,
        tick_ms: args.tick_ms,
        // Two routers: the agents give a cut-off one up after three
        // unanswered heartbeats (`router_silence_ms`), as soon as VRRP's
        // standby holds the address (`lab_ha::ADVERT_S`).
        heartbeat_ms: args.ha.then_some((ha::HEARTBEAT_MS, ha::DEAD_AFTER_MS)),
        vote: match args.vote.as_deref() {
            Some("majority") => Some("vote = \"majority\"\n"),
            Some("majority-reset") => Some("vote = \"majority\"\nvote_tie = \"reset\"\n"),
            _ => match args.output.as_deref() {
                Some("fastest") => Some("output = \"fastest\"\n"),
                _ => None,
            },
        },
        stateless: args.stateless,
        ack_log: args.ack.as_deref() == Some("log"),
        delivery_safe: args.delivery.as_deref() == Some("safe"),
    };
    std::fs::write(
        &cfg_path,
        config::render_lab(
            VIP,
            &args.ports,
            &replicas,
            args.failure_ms,
            &tuning,
            &lab.socket(),
        ),
    )
    .with_context(|| format!("writing {}", cfg_path.display()))?;
    if args.ha {
        for k in 0..ha::ROUTERS.len() {
            let cfg = lab.dir().join(format!("{}.toml", ha::ROUTERS[k].0));
            std::fs::write(
                &cfg,
                config::render_lab(
                    VIP,
                    &args.ports,
                    &replicas,
                    args.failure_ms,
                    &tuning,
                    &lab.socket_n(k),
                ),
            )
            .with_context(|| format!("writing {}", cfg.display()))?;
            ha::start_router(lab, k, &cfg)?;
        }
        wait_ready(lab, args, None, &mut servers)?;
        for k in 0..ha::ROUTERS.len() {
            ha::start_keepalived(lab, k, n)?;
        }
        ha::wait_master(lab, n, Duration::from_secs(10))?;
    } else {
        let mut router = start_router(lab, &cfg_path)?;
        wait_ready(lab, args, Some(&mut router), &mut servers)?;
    }
    if agents {
        wait_agents(lab, n - args.spares)?;
    }
    if shim {
        wait_shims(lab, n)?;
    }
    guard.armed = false;
    Ok(())
}

/// The lab's control-channel port on the router.
pub const CONTROL_PORT: u16 = 7400;

fn start_agent(lab: &Lab, i: usize, secret: &Path, end_stale: bool) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding the ftnet executable")?;
    let dir = lab.replica_dir(i);
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.ns_replica(i)])
        .arg(&exe)
        .args([
            "agent",
            "--router",
            &format!("198.18.{}.1:{CONTROL_PORT}", 10 + i),
        ])
        .args([
            "--replica",
            &replica_ip(i).to_string(),
            "--host",
            &format!("{}-r{i}", lab.name),
            "--secret-file",
        ])
        .arg(secret)
        .arg("--shim-socket")
        .arg(dir.join("shim.sock"));
    if end_stale {
        cmd.arg("--end-stale-servers");
    }
    launch(
        cmd,
        &dir.join("agent.log"),
        &dir.join("agent.pid"),
        &format!("the agent of replica {i}"),
    )?;
    Ok(())
}

/// Wait until every replica's server has its shim connected to its agent.
fn wait_shims(lab: &Lab, n: usize) -> anyhow::Result<()> {
    let missing = || -> Vec<usize> {
        (1..=n)
            .filter(|&i| {
                !std::fs::read_to_string(lab.replica_dir(i).join("agent.log"))
                    .unwrap_or_default()
                    .contains("shim connected")
            })
            .collect()
    };
    wait_until(
        Duration::from_secs(10),
        || missing().is_empty(),
        || {
            format!(
            "the shim of replica(s) {:?} did not connect within 10 s — read {}/r<i>/server.log and agent.log",
            missing(),
            lab.dir().display()
        )
        },
    )
}

/// Wait until the router reports `n` registered agents.
fn wait_agents(lab: &Lab, n: usize) -> anyhow::Result<()> {
    // With --ha the agents register with whichever router is master.
    let socket = || match lab.is_ha() {
        true => lab.socket_n(ha::active(lab).unwrap_or(0)),
        false => lab.socket(),
    };
    let registered = || {
        status::fetch(&socket())
            .ok()
            .and_then(|v| {
                v["control"]["agents"]
                    .as_array()
                    .map(|a| a.iter().filter(|x| x["state"] == "registered").count())
            })
            .unwrap_or(0)
    };
    wait_until(
        Duration::from_secs(10),
        || registered() >= n,
        || {
            format!(
            "only {} of {n} agents registered within 10 s — read {d}/r<i>/agent.log and {d}/router.log",
            registered(),
            d = lab.dir().display()
        )
        },
    )
}

/// Check `ready` every 20 ms until it holds; after `limit`, fail with `why()`.
fn wait_until(
    limit: Duration,
    mut ready: impl FnMut() -> bool,
    why: impl Fn() -> String,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        check_interrupt()?;
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{}", why());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start `cmd` detached (its own session: `lab kill` kills its group, a
/// Ctrl-C here does not reach it), stdin closed, output to `log`, its pid
/// written to `pid`.
fn launch(mut cmd: Command, log: &Path, pid: &Path, what: &str) -> anyhow::Result<Child> {
    let (out, err) = log_file(log)?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    sys::detach(&mut cmd);
    let child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    std::fs::write(pid, format!("{}\n", child.id()))?;
    Ok(child)
}

/// Open `path` for a child's stdout and stderr.
fn log_file(path: &Path) -> anyhow::Result<(Stdio, Stdio)> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let g = f
        .try_clone()
        .with_context(|| format!("duplicating {}", path.display()))?;
    Ok((Stdio::from(f), Stdio::from(g)))
}

/// How a replica's server runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ServerMode {
    Plain,
    /// Under `ftnet run`.
    Shim,
    /// Under `ftnet run --supervise`.
    Supervised,
}

impl ServerMode {
    fn name(self) -> &'static str {
        match self {
            ServerMode::Plain => "plain",
            ServerMode::Shim => "shim",
            ServerMode::Supervised => "supervised",
        }
    }
}

fn start_server(
    lab: &Lab,
    i: usize,
    template: &str,
    port: u16,
    mode: ServerMode,
) -> anyhow::Result<Child> {
    let shim = mode != ServerMode::Plain;
    let dir = lab.replica_dir(i);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let cmdline = template
        .replace("{i}", &i.to_string())
        .replace("{dir}", &dir.display().to_string())
        .replace("{port}", &port.to_string());
    // For `lab restart`: the same command, the same way.
    std::fs::write(
        dir.join("server.cmd"),
        format!("{}\n{cmdline}\n", mode.name()),
    )
    .with_context(|| format!("writing {}", dir.join("server.cmd").display()))?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.ns_replica(i)]);
    if shim {
        let exe = std::env::current_exe().context("finding the ftnet executable")?;
        cmd.arg(exe)
            .args(["run", "--socket"])
            .arg(dir.join("shim.sock"));
        if mode == ServerMode::Supervised {
            cmd.arg("--supervise");
        }
        cmd.arg("--");
    }
    cmd.args(["sh", "-c", &cmdline])
        .current_dir(&dir)
        .env("FTNET_REPLICA", i.to_string());
    // `ip netns exec` execs the command in place, so the pid is the shell's
    // and its process group holds the server.
    launch(
        cmd,
        &dir.join("server.log"),
        &dir.join("server.pid"),
        &format!("server of replica {i}: {cmdline}"),
    )
}

fn start_router(lab: &Lab, cfg: &Path) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding the ftnet executable")?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.ns_router()])
        .arg(&exe)
        .args(["router", "--log-level", "info", "--config"])
        .arg(cfg);
    launch(
        cmd,
        &lab.dir().join("router.log"),
        &lab.dir().join("router.pid"),
        "ftnet router",
    )
}

/// Last `n` lines of a log, indented, for error messages.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..]
        .iter()
        .map(|l| format!("\n    {l}"))
        .collect()
}

fn listening_ports(ns: &str) -> Vec<u16> {
    let out = ip(&["netns", "exec", ns, "ss", "-ltnH"]).unwrap_or_default();
    out.lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .filter_map(|local| local.rsplit(':').next()?.parse().ok())
        .collect()
}

fn wait_ready(
    lab: &Lab,
    args: &UpArgs,
    mut router: Option<&mut Child>,
    servers: &mut [Child],
) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let router_log = lab.dir().join("router.log");
    loop {
        check_interrupt()?;
        if let Some(st) = router.as_mut().map(|r| r.try_wait()).transpose()?.flatten() {
            bail!(
                "ftnet router exited ({st}) — read {}:{}",
                router_log.display(),
                tail(&router_log, 8)
            );
        }
        let mut missing: Option<String> = None;
        for (k, s) in servers.iter_mut().enumerate() {
            let i = k + 1;
            let log = lab.replica_dir(i).join("server.log");
            if let Some(st) = s.try_wait()? {
                bail!(
                    "server of replica {i} exited ({st}) — read {}:{}",
                    log.display(),
                    tail(&log, 8)
                );
            }
            if missing.is_none() {
                let have = listening_ports(&lab.ns_replica(i));
                if let Some(p) = args.ports.iter().find(|p| !have.contains(p)) {
                    missing = Some(format!(
                        "server of replica {i} is not listening on port {p} — read {}:{}",
                        log.display(),
                        tail(&log, 8)
                    ));
                }
            }
        }
        if missing.is_none() && status::fetch(&lab.socket()).is_err()
            || args.ha && missing.is_none() && status::fetch(&lab.socket_n(1)).is_err()
        {
            missing = Some(format!(
                "router status socket {} does not answer — read {}:{}",
                lab.socket().display(),
                router_log.display(),
                tail(&router_log, 8)
            ));
        }
        match missing {
            None => return Ok(()),
            Some(why) if Instant::now() >= deadline => {
                bail!("lab not ready after {}s: {why}", READY_TIMEOUT.as_secs())
            }
            Some(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn print_summary(lab: &Lab, args: &UpArgs) {
    let name = &lab.name;
    let nf = if name == "lab" {
        String::new()
    } else {
        format!(" --name {name}")
    };
    let ports: Vec<String> = args.ports.iter().map(|p| p.to_string()).collect();
    let reps: Vec<String> = (1..=args.replicas)
        .map(|i| replica_ip(i).to_string())
        .collect();
    println!(
        "lab {name:?} is up: client 198.18.1.2 -> VIP {VIP} port(s) {} -> replicas {}",
        ports.join(","),
        reps.join(", ")
    );
    println!(
        "  exec:   ftnet lab exec{nf} client -- redis-cli -h {VIP} -p {} PING",
        args.ports[0]
    );
    println!("  kill:   ftnet lab kill{nf} 2        (kill -9 the server of replica 2)");
    println!("  cut:    ftnet lab cut{nf} 2         (take replica 2's link down)");
    println!("  status: ftnet lab status{nf}");
    println!("  down:   ftnet lab down{nf}");
    println!(
        "  logs:   {}/router.log, {}/r<i>/server.log",
        lab.dir().display(),
        lab.dir().display()
    );
}

/// Start replica `n`'s server again as `lab up` did (it must not be
/// running: `lab kill` first).
fn restart(lab: &Lab, n: usize) -> anyhow::Result<()> {
    let dir = lab.replica_dir(n);
    let saved = std::fs::read_to_string(dir.join("server.cmd")).with_context(|| {
        format!(
            "reading {} — is lab {:?} up with at least {n} replicas?",
            dir.join("server.cmd").display(),
            lab.name
        )
    })?;
    let (mode, cmdline) = saved.split_once('\n').ok_or_else(|| {
        anyhow::anyhow!(
            "{} is not a saved server command",
            dir.join("server.cmd").display()
        )
    })?;
    let in_ns = namespace_pids(&lab.ns_replica(n));
    if let Ok(pgid) = std::fs::read_to_string(dir.join("server.pid"))
        .unwrap_or_default()
        .trim()
        .parse::<i32>()
    {
        if sys::group_members(pgid)
            .iter()
            .any(|(p, _)| in_ns.contains(p))
        {
            bail!("replica {n}'s server (process group {pgid}) is still running — `ftnet lab kill {n}` first");
        }
    }
    // The command is already resolved: no placeholder is left to fill.
    let mode = match mode {
        "supervised" => ServerMode::Supervised,
        "shim" => ServerMode::Shim,
        _ => ServerMode::Plain,
    };
    let child = start_server(lab, n, cmdline.trim_end(), 0, mode)?;
    println!("replica {n}: server started again (pid {})", child.id());
    Ok(())
}

fn kill(lab: &Lab, n: usize) -> anyhow::Result<()> {
    let pidfile = lab.replica_dir(n).join("server.pid");
    let text = std::fs::read_to_string(&pidfile).with_context(|| {
        format!(
            "reading {} — is lab {:?} up with at least {n} replicas?",
            pidfile.display(),
            lab.name
        )
    })?;
    let pgid: i32 = text
        .trim()
        .parse()
        .with_context(|| format!("{} holds no pid", pidfile.display()))?;
    // Only members that live in the replica's namespace: the pid file may
    // outlive the group, and the number may have been reused since.
    let in_ns = namespace_pids(&lab.ns_replica(n));
    let members: Vec<(i32, String)> = sys::group_members(pgid)
        .into_iter()
        .filter(|(p, _)| in_ns.contains(p))
        .collect();
    if members.is_empty() {
        bail!("replica {n}'s server (process group {pgid}) is not running — nothing to kill");
    }
    sys::kill_group(pgid, libc::SIGKILL).with_context(|| format!("kill -9 -{pgid}"))?;
    // Dead when this returns: a killed process lives on while the kernel
    // tears it down (seconds for a large one on a loaded machine), and
    // `lab restart` refuses a group that still has members.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<i32> = sys::group_members(pgid)
            .into_iter()
            .filter(|(p, _)| in_ns.contains(p))
            .map(|(p, _)| p)
            .collect();
        if left.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!("replica {n}'s server (process group {pgid}): {left:?} still alive 10 s after SIGKILL");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let list: Vec<String> = members.iter().map(|(p, c)| format!("{p} {c}")).collect();
    println!(
        "replica {n}: killed process group {pgid} with SIGKILL ({})",
        list.join(", ")
    );
    Ok(())
}

fn cut(lab: &Lab, n: usize) -> anyhow::Result<()> {
    let (v, vr, ns) = replica_link(lab, n)?;
    ip(&["-n", &ns, "link", "set", &v, "down"])?;
    let (far_ns, far) = far_end(lab, n, &vr);
    ip(&["-n", &far_ns, "link", "set", &far, "down"])?;
    println!(
        "replica {n}: link {far} <-> {v} is down on both ends (host loss); server still running"
    );
    Ok(())
}

/// The other end of replica N's link: the router's veth, or in an HA lab
/// its port on the replica's bridge in the switch namespace (both routers
/// lose it at once, as with a host that is gone).
fn far_end(lab: &Lab, n: usize, router_end: &str) -> (String, String) {
    if lab.is_ha() {
        (lab.ns_switch(), format!("hr{n}"))
    } else {
        (lab.ns_router(), router_end.to_string())
    }
}

/// Replica N's veth (its end, the router's end) and its namespace, which must exist.
fn replica_link(lab: &Lab, n: usize) -> anyhow::Result<(String, String, String)> {
    let (v, vr) = lab.veth_replica(n);
    let ns = lab.ns_replica(n);
    if !lab.namespaces()?.contains(&ns) {
        bail!(
            "namespace {ns} does not exist — is lab {:?} up with at least {n} replicas?",
            lab.name
        );
    }
    Ok((v, vr, ns))
}

fn heal(lab: &Lab, n: usize) -> anyhow::Result<()> {
    let (v, vr, ns) = replica_link(lab, n)?;
    let (far_ns, far) = far_end(lab, n, &vr);
    ip(&["-n", &far_ns, "link", "set", &far, "up"])?;
    ip(&["-n", &ns, "link", "set", &v, "up"])?;
    // The default route went with the link.
    let gw = format!("198.18.{}.1", 10 + n);
    ip(&["-n", &ns, "route", "replace", "default", "via", &gw])?;
    println!("replica {n}: link {far} <-> {v} is up again on both ends");
    Ok(())
}

/// Tear one lab down. Idempotent; keeps going past individual failures and
/// reports the first one at the end.
fn down(lab: &Lab) -> anyhow::Result<()> {
    let namespaces = lab.namespaces()?;
    // Ask the router to stop first so it removes its rules and socket and
    // says so in its log; everything else is killed outright. The pids come
    // from the namespace, not from router.pid: a pid file outliving its
    // process could name an unrelated process by now.
    let router_ns = lab.ns_router();
    if namespaces.contains(&router_ns) {
        let pids = namespace_pids(&router_ns);
        for p in &pids {
            let _ = sys::kill_pid(*p, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !namespace_pids(&router_ns).is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut first_err: Option<anyhow::Error> = None;
    for ns in &namespaces {
        kill_namespace(ns);
    }
    for ns in &namespaces {
        // A router killed with SIGKILL leaves its lock files (and the record
        // of its routing, which dies with the namespace).
        crate::instance::forget_namespace(&Path::new("/run/netns").join(ns));
        if let Err(e) = ip(&["netns", "del", ns]) {
            first_err.get_or_insert(e.into());
        }
    }
    let dir = lab.dir();
    if dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            first_err.get_or_insert(
                anyhow::Error::new(e).context(format!("removing {}", dir.display())),
            );
        }
    }
    // Leave no empty directories of ours behind either; fails harmlessly if
    // another lab still uses them.
    let _ = std::fs::remove_dir(LAB_ROOT);
    let _ = std::fs::remove_dir("/run/ftnet");
    if !namespaces.is_empty() {
        eprintln!(
            "ftnet lab: lab {:?} is down ({} namespaces removed)",
            lab.name,
            namespaces.len()
        );
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
                .unwrap_or(false)
        })
        .unwrap_or(true)
}

/// Live (non-zombie) processes whose network namespace is `ns`.
fn namespace_pids(ns: &str) -> Vec<i32> {
    ip(&["netns", "pids", ns])
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| !is_zombie(*p))
        .collect()
}

/// kill -9 every process in `ns` until none is left (bounded).
fn kill_namespace(ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let pids = namespace_pids(ns);
        if pids.is_empty() || Instant::now() >= deadline {
            if !pids.is_empty() {
                eprintln!("ftnet lab: processes {pids:?} in {ns} survived SIGKILL for 3 s");
            }
            return;
        }
        for p in pids {
            let _ = sys::kill_pid(p, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn down_all() -> anyhow::Result<()> {
    let mut names: Vec<String> = Vec::new();
    if let Ok(rd) = std::fs::read_dir(LAB_ROOT) {
        for e in rd.flatten() {
            names.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    for ns in list_namespaces()? {
        if let Some(rest) = ns.strip_prefix("ftnet-") {
            if let Some((name, _)) = rest.split_once('-') {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    let mut first_err = None;
    for name in &names {
        match Lab::new(name) {
            Ok(lab) => {
                if let Err(e) = down(&lab) {
                    first_err.get_or_insert(e);
                }
            }
            // Not a name `lab up` could have made; still clean it up by hand.
            Err(_) => {
                for ns in list_namespaces()?
                    .into_iter()
                    .filter(|n| n.starts_with(&format!("ftnet-{name}-")))
                {
                    kill_namespace(&ns);
                    let _ = ip(&["netns", "del", &ns]);
                }
                let _ = std::fs::remove_dir_all(Path::new(LAB_ROOT).join(name));
            }
        }
    }
    // Namespaces named ftnet-* without a second dash.
    for ns in list_namespaces()?
        .into_iter()
        .filter(|n| n.starts_with("ftnet-"))
    {
        kill_namespace(&ns);
        let _ = ip(&["netns", "del", &ns]);
    }
    let _ = std::fs::remove_dir(LAB_ROOT);
    let _ = std::fs::remove_dir("/run/ftnet");
    println!("all ftnet labs removed");
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Run `cmd` in `ns` and return its exit code. On Ctrl-C the command gets the
/// signal from the terminal itself; if it ignores it we end it after 2 s.
fn run_in(ns: &str, cmd: &[String]) -> anyhow::Result<i32> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .spawn()
        .context("running ip netns exec")?;
    let mut interrupted_at: Option<Instant> = None;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(exit_code(st));
        }
        if sys::stop_requested() {
            let at = *interrupted_at.get_or_insert_with(Instant::now);
            if at.elapsed() > Duration::from_secs(2) {
                let _ = child.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `up`, then `body`, then `down`, with a reaper child that tears the lab
/// down if this process dies before it can.
/// Refuse to build over a lab of the same name that is still up.
fn ensure_not_up(lab: &Lab) -> anyhow::Result<()> {
    let existing = lab.namespaces()?;
    if let Some(ns) = existing.first() {
        bail!(
            "lab {:?} is already up (namespace {} exists) — run `ftnet lab down --name {}` first",
            lab.name,
            ns,
            lab.name
        );
    }
    Ok(())
}

fn run_guarded(
    args: &UpArgs,
    body: impl FnOnce(&Lab) -> anyhow::Result<i32>,
) -> anyhow::Result<i32> {
    sys::install_session_stop_handler();
    let lab = Lab::new(&args.name)?;
    ensure_not_up(&lab)?;
    let mut reaper = spawn_reaper(&lab)?;
    let result = up(&lab, args).and_then(|()| {
        eprintln!("ftnet lab: lab {:?} is up", lab.name);
        body(&lab)
    });
    let down_result = down(&lab);
    // Tell the reaper its job is done, then wait for it, so nothing of ours
    // outlives this command.
    if let Some(mut stdin) = reaper.stdin.take() {
        let _ = stdin.write_all(b"done\n");
    }
    let _ = reaper.wait();
    let code = result?;
    down_result?;
    Ok(code)
}

fn spawn_reaper(lab: &Lab) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding the ftnet executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(["lab", "reap", "--name", &lab.name])
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    // Its own session: the terminal's Ctrl-C (sent to our process group)
    // must not kill the one process that cleans up after us.
    sys::detach(&mut cmd);
    cmd.spawn().context("starting the teardown reaper")
}

fn reap(name: &str) -> anyhow::Result<i32> {
    sys::ignore_interrupts();
    let lab = Lab::new(name)?;
    let mut line = String::new();
    let mut stdin = std::io::stdin().lock();
    // "done" means the parent tore down itself; EOF without it means the
    // parent died (even by kill -9, which closes its end of the pipe).
    loop {
        line.clear();
        match stdin.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.trim() == "done" => return Ok(0),
            Ok(_) => {}
        }
    }
    // Give commands the dead parent had started (an `ip netns add`) a
    // moment to finish, so they do not recreate something after us.
    std::thread::sleep(Duration::from_millis(300));
    eprintln!("ftnet lab reap: parent is gone, tearing down lab {name:?}");
    down(&lab)?;
    Ok(0)
}

fn demo(lab: &Lab, replicas: usize) -> anyhow::Result<i32> {
    // One client connection: the replicas then see one input order. Several
    // concurrent connections need the deterministic input order of the agent
    // and shim, or the replicas' replies (INCR values) differ.
    let bench = [
        "redis-benchmark",
        "-h",
        "198.19.0.1",
        "-c",
        "1",
        "-n",
        "100000",
        "-t",
        "set,get,incr",
        "-q",
    ];
    println!("== running in the client namespace: {}", bench.join(" "));
    let mut child = Command::new("ip")
        .args(["netns", "exec", &lab.ns_client()])
        .args(bench)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting redis-benchmark")?;
    let mut out = child.stdout.take().context("benchmark stdout")?;
    let mut err = child.stderr.take().context("benchmark stderr")?;
    let out_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let started = Instant::now();
    let victim = if replicas >= 2 { Some(2) } else { None };
    let mut killed = false;
    let bound = Duration::from_secs(180);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if sys::stop_requested() || started.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        if !killed && started.elapsed() >= Duration::from_secs(2) {
            if let Some(v) = victim {
                println!(
                    "== {:.1} s in: killing replica {v}",
                    started.elapsed().as_secs_f64()
                );
                kill(lab, v)?;
            }
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&out_t.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned();
    // -q prints progress lines (`rps=… (overall: …)`) before each result; keep
    // only the results and anything unexpected, such as errors.
    let clean: Vec<&str> = stdout
        .split(['\r', '\n'])
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.ends_with("...") && !l.contains("rps="))
        .collect();
    let elapsed = started.elapsed().as_secs_f64();
    println!("== redis-benchmark finished after {elapsed:.1} s");
    for l in &clean {
        println!("   {l}");
    }
    if !stderr.trim().is_empty() {
        println!("   stderr: {}", stderr.trim());
    }
    let mut ok = true;
    match status {
        Some(st) if st.success() => println!("== benchmark exit status: 0"),
        Some(st) => {
            ok = false;
            println!("== benchmark exit status: {st}  <-- FAILED");
        }
        None => {
            ok = false;
            println!(
                "== benchmark did not finish within {} s (or interrupted); killed  <-- FAILED",
                bound.as_secs()
            );
        }
    }
    let errors = clean
        .iter()
        .chain(stderr.lines().collect::<Vec<_>>().iter())
        .filter(|l| l.to_lowercase().contains("error"))
        .count();
    if errors == 0 {
        println!("== errors seen by the client: none");
    } else {
        ok = false;
        println!("== errors seen by the client: {errors} line(s)  <-- FAILED");
    }
    println!("== ftnet status");
    match status::fetch(&lab.socket()) {
        Ok(v) => print!("{}", status::render(&v)),
        Err(e) => println!("   {e:#}"),
    }
    println!("== DEBUG DIGEST of the surviving replicas (queried inside each replica namespace)");
    let mut digests = Vec::new();
    for i in (1..=replicas).filter(|i| Some(*i) != victim) {
        let d = ip(&[
            "netns",
            "exec",
            &lab.ns_replica(i),
            "redis-cli",
            "-h",
            "127.0.0.1",
            "-p",
            "6379",
            "DEBUG",
            "DIGEST",
        ])
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("error: {e}"));
        println!("   replica {i} ({}): {d}", replica_ip(i));
        digests.push(d);
    }
    if digests.windows(2).all(|w| w[0] == w[1]) && !digests.iter().any(|d| d.starts_with("error")) {
        println!("== survivors agree");
    } else {
        ok = false;
        println!("== survivors DIFFER  <-- FAILED");
    }
    Ok(if ok { 0 } else { 1 })
}
