//! `ftnet lab up --ha`: two router hosts that share the gateway addresses
//! through keepalived's VRRP (Debian's `keepalived`, not a home-made
//! election), so that one takes over when the other dies.
//!
//! ```text
//!  client ─┐                         ┌─ router  (A, 198.18.x.3) ─┐
//!          ├─ bridge (ns …-switch) ──┤                            ├─ bridge ── replica i
//!          │                         └─ router2 (B, 198.18.x.4) ─┘
//! ```
//!
//! Every segment (the client's and each replica's) is a bridge in the
//! switch namespace with both routers on it. The addresses clients and
//! replicas route through — 198.18.1.1 and 198.18.(10+i).1 — are VRRP
//! virtual addresses held by whichever router is master (VRRPv3,
//! `advert_int` 0.05 s, [`ADVERT_S`]). Both ftnet routers run all the time; the backup
//! gets no traffic until it holds the addresses. Agents connect to the
//! replica-side address, so they reach the master, and register again with
//! the new one after a takeover, sending their connection records.
//!
//! keepalived watches its router through a track file that the router's
//! supervising shell sets to 1 when ftnet exits (`kill-router` kills ftnet
//! with SIGKILL): the instance goes to FAULT at once and the backup takes
//! over. `cut-router` takes all the master's links down instead (host
//! loss): the backup takes over when adverts stop (3 × 0.05 s + skew).
//! Both instances start as BACKUP with `nopreempt`, so a restarted router
//! stays backup.

use super::{ip, launch, Lab};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// VRRP advert interval (VRRPv3 allows centiseconds). The standby takes
/// over when adverts stop for 3 intervals and its skew (VRRPv3: (256 −
/// priority) / 256 of one): 180 ms at 0.05 s and priority 100. A client
/// whose segment was lost in the cut repeats it at its first RTO (~205 ms
/// on a low-latency path); a table rebuilt by then serves that repeat,
/// one rebuilt later waits for the next (~410 ms, or one RTO more).
pub const ADVERT_S: &str = "0.05";

/// `[control]` heartbeat_ms for both routers: the agents give a silent
/// router whose host does not acknowledge them up after three heartbeats
/// (150 ms, `ftnet_control::router_silence_ms`), before VRRP's standby
/// holds the address, and find it as soon as it does.
pub const HEARTBEAT_MS: u64 = 50;

/// `[control]` dead_after_ms for both routers: an agent silent this long
/// is taken for its host lost. Not the default of five heartbeats (250 ms
/// at [`HEARTBEAT_MS`]): under the fault campaign's load on 2 cores,
/// healthy agents went 255 ms unheard and their replicas were taken out
/// (3 false verdicts in 1,000 faults); 500 ms as with heartbeats of 100 ms.
pub const DEAD_AFTER_MS: u64 = 500;

/// The two routers: namespace suffix, own host address byte, priority.
pub const ROUTERS: [(&str, u8, u8); 2] = [("router", 3, 150), ("router2", 4, 100)];

impl Lab {
    pub(super) fn ns_router_n(&self, k: usize) -> String {
        format!("ftnet-{}-{}", self.name, ROUTERS[k].0)
    }
    pub(super) fn ns_switch(&self) -> String {
        format!("ftnet-{}-switch", self.name)
    }
    pub(super) fn socket_n(&self, k: usize) -> PathBuf {
        self.dir().join(format!("{}.sock", ROUTERS[k].0))
    }
    /// When router `k` became VRRP master, one epoch-ms line per time.
    pub(super) fn master_file(&self, k: usize) -> PathBuf {
        self.dir().join(format!("{}.master", ROUTERS[k].0))
    }
    fn down_file(&self, k: usize) -> PathBuf {
        self.dir().join(format!("{}.down", ROUTERS[k].0))
    }
    pub(super) fn is_ha(&self) -> bool {
        self.dir().join("ha").exists()
    }
}

/// The segments' addresses: (router-side interface, /24 prefix).
fn segments(n: usize) -> Vec<(String, String)> {
    let mut v = vec![("c".to_string(), "198.18.1".to_string())];
    v.extend((1..=n).map(|i| (format!("r{i}"), format!("198.18.{}", 10 + i))));
    v
}

/// Namespaces, bridges, veths and addresses of the HA topology.
pub(super) fn network(lab: &Lab, n: usize) -> anyhow::Result<()> {
    let sw = lab.ns_switch();
    let (vc, _) = lab.veth_client();
    let pair = |a_ns: &str, a: &str, b_ns: &str, b: &str| -> anyhow::Result<()> {
        super::check_interrupt()?;
        ip(&[
            "link", "add", "name", a, "netns", a_ns, "type", "veth", "peer", "name", b, "netns",
            b_ns,
        ])?;
        ip(&["-n", a_ns, "link", "set", a, "up"])?;
        ip(&["-n", b_ns, "link", "set", b, "up"])?;
        Ok(())
    };
    for (k, (iface, prefix)) in segments(n).iter().enumerate() {
        let br = format!("b{iface}");
        ip(&["-n", &sw, "link", "add", &br, "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", &br, "up"])?;
        // The host end: the client (k = 0) or replica k.
        let (host_ns, host_if) = if k == 0 {
            (lab.ns_client(), vc.clone())
        } else {
            (lab.ns_replica(k), lab.veth_replica(k).0)
        };
        let sw_if = format!("h{iface}");
        pair(&host_ns, &host_if, &sw, &sw_if)?;
        ip(&["-n", &sw, "link", "set", &sw_if, "master", &br])?;
        ip(&[
            "-n",
            &host_ns,
            "addr",
            "add",
            &format!("{prefix}.2/24"),
            "dev",
            &host_if,
        ])?;
        ip(&[
            "-n",
            &host_ns,
            "route",
            "add",
            "default",
            "via",
            &format!("{prefix}.1"),
        ])?;
        // Take the routers' gratuitous ARPs even for an address this host
        // has not resolved yet (or failed to, before a master existed).
        let st = Command::new("ip")
            .args(["netns", "exec", &host_ns, "sysctl", "-qw"])
            .args(["net.ipv4.conf.all.arp_accept=1"])
            .status()
            .context("sysctl arp_accept")?;
        if !st.success() {
            bail!("sysctl net.ipv4.conf.all.arp_accept=1 failed in {host_ns}");
        }
        for (r, (_, host, _)) in ROUTERS.iter().enumerate() {
            let rns = lab.ns_router_n(r);
            let sw_if = format!("{iface}{}", letter(r));
            pair(&rns, iface, &sw, &sw_if)?;
            ip(&["-n", &sw, "link", "set", &sw_if, "master", &br])?;
            ip(&[
                "-n",
                &rns,
                "addr",
                "add",
                &format!("{prefix}.{host}/24"),
                "dev",
                iface,
            ])?;
        }
    }
    std::fs::write(lab.dir().join("ha"), "two routers under keepalived\n")?;
    Ok(())
}

fn keepalived_conf(lab: &Lab, k: usize, n: usize) -> String {
    let (_, _, prio) = ROUTERS[k];
    let segs = segments(n);
    let ifaces: Vec<String> = segs.iter().map(|(i, _)| format!("    {i}")).collect();
    let vips: Vec<String> = segs
        .iter()
        .map(|(i, p)| format!("    {p}.1/24 dev {i}"))
        .collect();
    format!(
        "# written by `ftnet lab up --ha`
global_defs {{
  router_id ftnet-{name}-{r}
  vrrp_version 3
  enable_script_security
  script_user root
  vrrp_garp_master_delay 1
  vrrp_garp_master_repeat 2
}}
track_file router_down {{
  file \"{down}\"
  weight 0
}}
vrrp_instance ftnet {{
  state BACKUP
  nopreempt
  interface c
  virtual_router_id 51
  priority {prio}
  advert_int {ADVERT_S}
  track_interface {{
{ifaces}
  }}
  track_file {{
    router_down
  }}
  # The moment it became master (epoch ms), for the takeover figures.
  notify_master \"/bin/sh -c 'date +%s%3N >> {master}'\"
  virtual_ipaddress {{
{vips}
  }}
}}
",
        name = lab.name,
        r = ROUTERS[k].0,
        down = lab.down_file(k).display(),
        master = lab.master_file(k).display(),
        ifaces = ifaces.join("\n"),
        vips = vips.join("\n"),
    )
}

/// Start router `k`'s ftnet under a supervising shell that marks it down
/// for keepalived when it exits.
pub(super) fn start_router(lab: &Lab, k: usize, cfg: &Path) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding the ftnet executable")?;
    let down = lab.down_file(k);
    std::fs::write(&down, "0\n")?;
    // kill -9 of ftnet leaves the shell: it says so to keepalived (FAULT,
    // the backup takes over) and stops forwarding in this namespace.
    let script = "\"$0\" router --log-level info --config \"$1\"; rc=$?; echo 1 > \"$2\"; \
                  echo \"ftnet router exited ($rc); keepalived told\" >&2";
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.ns_router_n(k), "sh", "-c", script])
        .arg(&exe)
        .arg(cfg)
        .arg(&down);
    let name = ROUTERS[k].0;
    let log = lab.dir().join(format!("{name}.log"));
    // Keep what the router logged before (a restart appends it to .log.1).
    let mut prev = std::fs::read(&log).unwrap_or_default();
    launch(cmd, &log, &lab.dir().join(format!("{name}.pid")), name)?;
    if !prev.is_empty() {
        // Every earlier run, oldest first.
        prev.extend_from_slice(b"---- restarted ----\n");
        let old = lab.dir().join(format!("{name}.log.1"));
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&old)
            .and_then(|mut f| f.write_all(&prev))
            .with_context(|| format!("appending to {}", old.display()))?;
    }
    Ok(())
}

pub(super) fn start_keepalived(lab: &Lab, k: usize, n: usize) -> anyhow::Result<()> {
    let name = ROUTERS[k].0;
    let conf = lab.dir().join(format!("keepalived-{name}.conf"));
    std::fs::write(&conf, keepalived_conf(lab, k, n))?;
    let d = lab.dir();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.ns_router_n(k), "keepalived"])
        .args(["--dont-fork", "--log-console", "--log-detail", "--vrrp"])
        .arg("--use-file")
        .arg(&conf)
        .arg("--pid")
        .arg(d.join(format!("keepalived-{name}.pid")))
        .arg("--vrrp_pid")
        .arg(d.join(format!("keepalived-{name}-vrrp.pid")));
    launch(
        cmd,
        &d.join(format!("keepalived-{name}.log")),
        &d.join(format!("keepalived-{name}.spid")),
        "keepalived",
    )
    .context("starting keepalived (Debian package keepalived)")?;
    Ok(())
}

/// Which router holds the gateway addresses now.
pub(super) fn active(lab: &Lab) -> Option<usize> {
    (0..ROUTERS.len()).find(|&k| {
        Command::new("ip")
            .args([
                "-n",
                &lab.ns_router_n(k),
                "-4",
                "-o",
                "addr",
                "show",
                "dev",
                "c",
            ])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("198.18.1.1/"))
    })
}

/// Wait until a router is VRRP master and its status socket answers.
pub(super) fn wait_master(lab: &Lab, n: usize, limit: Duration) -> anyhow::Result<usize> {
    let t = Instant::now();
    loop {
        super::check_interrupt()?;
        if let Some(k) = active(lab) {
            if crate::status::fetch(&lab.socket_n(k)).is_ok() {
                // Neighbour entries that failed while no router held the
                // address resolve afresh.
                for h in 0..=n {
                    let ns = if h == 0 {
                        lab.ns_client()
                    } else {
                        lab.ns_replica(h)
                    };
                    let _ = ip(&["-n", &ns, "neigh", "flush", "all"]);
                }
                return Ok(k);
            }
        }
        if t.elapsed() > limit {
            bail!(
                "no router became VRRP master within {} s — read {}/keepalived-*.log",
                limit.as_secs(),
                lab.dir().display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The ftnet router process of router `k` (not its shell), if running.
fn router_pid(lab: &Lab, k: usize) -> Option<i32> {
    super::namespace_pids(&lab.ns_router_n(k))
        .into_iter()
        .find(|&p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
            args.len() > 1
                && args[0].ends_with(b"ftnet")
                && args[1] == b"router"
                && !super::is_zombie(p)
        })
}

/// `lab kill-router`: SIGKILL the master's ftnet router.
pub(super) fn kill_router(lab: &Lab) -> anyhow::Result<()> {
    require_ha(lab)?;
    let Some(k) = active(lab) else {
        bail!("no router holds the gateway addresses — is the lab up? (`ftnet lab status`)");
    };
    let Some(pid) = router_pid(lab, k) else {
        bail!(
            "router {} holds the addresses but its ftnet is not running",
            ROUTERS[k].0
        );
    };
    crate::sys::kill_pid(pid, libc::SIGKILL).with_context(|| format!("kill -9 {pid}"))?;
    println!(
        "{}: ftnet router (pid {pid}) killed with SIGKILL; keepalived hands the addresses to {}",
        ROUTERS[k].0,
        ROUTERS[1 - k].0
    );
    Ok(())
}

/// `lab stall-router`: SIGSTOP the master's ftnet router and keepalived for
/// `ms`, then SIGCONT (a router host that was not scheduled).
pub(super) fn stall_router(lab: &Lab, ms: u64) -> anyhow::Result<()> {
    require_ha(lab)?;
    let Some(k) = active(lab) else {
        bail!("no router holds the gateway addresses — is the lab up? (`ftnet lab status`)");
    };
    let name = ROUTERS[k].0;
    let mut pids: Vec<i32> = super::namespace_pids(&lab.ns_router_n(k))
        .into_iter()
        .filter(|&p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let arg0 = cmd.split(|&b| b == 0).next().unwrap_or_default();
            (arg0.ends_with(b"ftnet") || arg0.ends_with(b"keepalived")) && !super::is_zombie(p)
        })
        .collect();
    pids.sort_unstable();
    if router_pid(lab, k).is_none() {
        bail!("router {name} holds the addresses but its ftnet is not running");
    }
    for &p in &pids {
        crate::sys::kill_pid(p, libc::SIGSTOP).with_context(|| format!("kill -STOP {p}"))?;
    }
    println!(
        "{name}: ftnet and keepalived stopped (SIGSTOP, pids {pids:?}) for {ms} ms; {} takes over when the adverts stop",
        ROUTERS[1 - k].0
    );
    std::thread::sleep(Duration::from_millis(ms));
    for &p in &pids {
        // Each is woken even if one already went.
        let _ = crate::sys::kill_pid(p, libc::SIGCONT);
    }
    println!("{name}: going on (SIGCONT) with what it knew before");
    Ok(())
}

/// `lab cut-router`: take every link of the master down (host loss).
pub(super) fn cut_router(lab: &Lab) -> anyhow::Result<()> {
    require_ha(lab)?;
    let Some(k) = active(lab) else {
        bail!("no router holds the gateway addresses — is the lab up? (`ftnet lab status`)");
    };
    let sw = lab.ns_switch();
    let suffix = letter(k);
    for (iface, _) in segments(replicas(lab)) {
        ip(&[
            "-n",
            &sw,
            "link",
            "set",
            &format!("{iface}{suffix}"),
            "down",
        ])?;
        ip(&["-n", &lab.ns_router_n(k), "link", "set", &iface, "down"])?;
    }
    println!(
        "{}: every link down on both ends (host loss); {} takes over when the adverts stop",
        ROUTERS[k].0,
        ROUTERS[1 - k].0
    );
    Ok(())
}

/// `lab restart-router`: bring back a router that was killed or cut, as
/// the backup.
pub(super) fn restart_router(lab: &Lab) -> anyhow::Result<()> {
    require_ha(lab)?;
    let n = replicas(lab);
    let sw = lab.ns_switch();
    for (k, &(name, _, _)) in ROUTERS.iter().enumerate() {
        let suffix = letter(k);
        let down = |ns: &str, dev: &str| {
            Command::new("ip")
                .args(["-n", ns, "-o", "link", "show", dev])
                .output()
                .is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).contains(",UP"))
        };
        let cut = segments(n).iter().any(|(iface, _)| {
            down(&sw, &format!("{iface}{suffix}")) || down(&lab.ns_router_n(k), iface)
        });
        if cut {
            // A router that was cut off kept running alone: its table is
            // stale and it declared every replica's host lost (their agents
            // fell silent). It comes back as a fresh backup, as an operator
            // would bring back a router host that lost its links.
            if let Some(pid) = router_pid(lab, k) {
                crate::sys::kill_pid(pid, libc::SIGTERM)
                    .with_context(|| format!("stopping {name} (pid {pid})"))?;
                let t = Instant::now();
                while router_pid(lab, k).is_some() {
                    if t.elapsed() > Duration::from_secs(5) {
                        let _ = crate::sys::kill_pid(pid, libc::SIGKILL);
                    }
                    if t.elapsed() > Duration::from_secs(10) {
                        bail!("{name} (pid {pid}) did not stop within 10 s");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                println!("{name}: ftnet router stopped (its state went stale while cut off)");
            }
        }
        let mut did = Vec::new();
        for (iface, _) in segments(n) {
            let sw_if = format!("{iface}{suffix}");
            if down(&sw, &sw_if) || down(&lab.ns_router_n(k), &iface) {
                ip(&["-n", &lab.ns_router_n(k), "link", "set", &iface, "up"])?;
                ip(&["-n", &sw, "link", "set", &sw_if, "up"])?;
                did.push(iface);
            }
        }
        if !did.is_empty() {
            println!("{}: links up again ({})", name, did.join(", "));
        }
        if router_pid(lab, k).is_none() {
            // The shell that supervised the ftnet that ended writes "down"
            // into keepalived's track file as it exits: it must be gone
            // before the new one writes "up", or its late write leaves the
            // fresh router in FAULT for good (a backup that can never take
            // over, which nothing would show).
            let shell = std::fs::read_to_string(lab.dir().join(format!("{name}.pid")))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok());
            if let Some(pid) = shell {
                let t = Instant::now();
                while std::path::Path::new(&format!("/proc/{pid}")).exists()
                    && !super::is_zombie(pid)
                    && t.elapsed() < Duration::from_secs(5)
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let cfg = lab.dir().join(format!("{}.toml", name));
            start_router(lab, k, &cfg)?;
            let t = Instant::now();
            while crate::status::fetch(&lab.socket_n(k)).is_err() {
                if t.elapsed() > Duration::from_secs(10) {
                    bail!(
                        "{} did not come back within 10 s — read {}/{}.log",
                        name,
                        lab.dir().display(),
                        name
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            println!("{}: ftnet router restarted (backup)", name);
        }
    }
    Ok(())
}

fn require_ha(lab: &Lab) -> anyhow::Result<()> {
    if !lab.is_ha() {
        bail!(
            "lab {:?} has one router — bring it up with `ftnet lab up --ha` for two routers under keepalived",
            lab.name
        );
    }
    Ok(())
}

/// Replicas of an HA lab (from its namespaces).
fn replicas(lab: &Lab) -> usize {
    (1..=super::MAX_REPLICAS)
        .take_while(|&i| Path::new("/run/netns").join(lab.ns_replica(i)).exists())
        .count()
}

/// The interface suffix of router `k` (a, b, …): two routers in a lab.
fn letter(k: usize) -> char {
    char::from(b'a' + u8::try_from(k % 26).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// Both routers of an HA lab: heartbeats every 50 ms, so the agents give
    /// a cut-off router up (150 ms) before the standby holds the addresses
    /// (3 adverts and the skew: 180 ms), and an agent is taken for its host
    /// lost only after 500 ms unheard (the default, five heartbeats, took
    /// healthy agents out under the fault campaign's load).
    #[test]
    fn ha_routers_hear_agents_often_and_judge_them_slowly() {
        let dir = std::env::temp_dir().join(format!("ftnet-ha-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
        let tuning = crate::config::LabTuning {
            control_secret: Some(secret),
            heartbeat_ms: Some((HEARTBEAT_MS, DEAD_AFTER_MS)),
            ..Default::default()
        };
        let t = crate::config::render_lab(
            Ipv4Addr::new(198, 19, 0, 1),
            &[6379],
            &[Ipv4Addr::new(198, 18, 11, 2)],
            100,
            &tuning,
            Path::new("/run/x.sock"),
        );
        let c = crate::config::parse("ha.toml", &t).unwrap();
        let ctl = c.control.expect("[control]");
        assert_eq!(ctl.heartbeat, Duration::from_millis(50));
        assert_eq!(ctl.dead_after, Duration::from_millis(500));
        let silence = ftnet_control::router_silence_ms(HEARTBEAT_MS, DEAD_AFTER_MS);
        let advert_ms = ADVERT_S.parse::<f64>().unwrap() * 1000.0;
        let backup_prio = f64::from(ROUTERS[1].2);
        let takeover_ms = 3.0 * advert_ms + (256.0 - backup_prio) * advert_ms / 256.0;
        assert_eq!(silence, 150);
        assert!((takeover_ms - 180.0).abs() < 1.0, "{takeover_ms}");
        assert!((silence as f64) <= takeover_ms);
        std::fs::remove_dir_all(&dir).ok();
    }
}
