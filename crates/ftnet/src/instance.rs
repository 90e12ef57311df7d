//! One router per TUN and per routing table, enforced before anything is
//! touched.
//!
//! Two routers on one TUN share its queues (`TUNSETIFF` on a multi-queue
//! TUN succeeds for a second process) and each gets a share of the other's
//! packets; two on one table replace each other's routes, and either one's
//! clean-up removes the other's rules — the VIP becomes unreachable while
//! the first router's status still says all is well. So `ftnet router`
//! first takes an exclusive `flock(2)` on two lock files under
//! [`LOCK_DIR`], one named after its TUN and one after its table, and holds
//! both for its lifetime. The names carry the network namespace (TUNs and
//! rules are per namespace, `/run` usually is not). The kernel drops a
//! flock when its holder dies, however it dies, so a lock that can be taken
//! proves the previous holder dead.
//!
//! The table's lock file also records what its holder installed
//! ([`ftnet_io::Plan::record`]), written before it is installed. The next
//! router removes exactly that record of a dead one — never a rule of a live
//! router, and never a rule it does not know (those are reported).
//!
//! Holding the lock does not stop a program other than ftnet from having
//! the TUN open: [`check_tun_free`] refuses a TUN some process holds.

use anyhow::{bail, Context};
use ftnet_io::{Plan, Routing};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where the lock files live.
pub const LOCK_DIR: &str = "/run/ftnet/locks";

/// The locks of a running router, and the routing it installed under them.
/// Dropping it removes the routing, clears the record and releases the
/// locks (removing their files).
pub struct Instance {
    tun: LockFile,
    table: LockFile,
    /// The policy routing table (and rule priority).
    table_no: u32,
    routing: Option<Routing>,
    /// The record of what is installed, as written to the table's lock file.
    record: Vec<String>,
    /// The same, for a panic hook (which must not run destructors).
    hook_record: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// What a dead router left in the table's lock file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Leftovers {
    pub pid: Option<u32>,
    pub record: Vec<String>,
}

impl Instance {
    /// Take the locks for `tun` and `table` in this network namespace, or
    /// fail naming the router that holds them. Returns what a dead
    /// predecessor recorded (still to be removed with [`Instance::clean_up`]).
    pub fn lock(tun: &str, table: u32) -> anyhow::Result<(Instance, Leftovers)> {
        let net = netns_id().context("reading this process's network namespace")?;
        let dir = Path::new(LOCK_DIR);
        let mut tun_lock = LockFile::acquire(
            &dir.join(format!("net{net}-tun-{tun}.lock")),
            &format!("TUN {tun}"),
        )?;
        tun_lock.write(&format!("pid {}\n", std::process::id()))?;
        let mut table_lock = match LockFile::acquire(
            &dir.join(format!("net{net}-table-{table}.lock")),
            &format!("routing table {table}"),
        ) {
            Ok(l) => l,
            Err(e) => {
                tun_lock.unlink();
                return Err(e);
            }
        };
        let left = parse(&table_lock.read()?);
        let mut me = Instance {
            tun: tun_lock,
            table: table_lock,
            table_no: table,
            routing: None,
            record: left.record.clone(),
            hook_record: Default::default(),
        };
        // Our pid at once; the dead one's record stays until it is removed.
        me.write()?;
        Ok((me, left))
    }

    /// Remove what a dead router recorded; returns how many rules and routes
    /// were still there.
    pub fn clean_up(&mut self, left: &Leftovers) -> anyhow::Result<usize> {
        let n = ftnet_io::remove_recorded(&left.record);
        self.record.clear();
        self.write()?;
        Ok(n)
    }

    /// Record `plan`, then install it. On error nothing stays installed and
    /// the record is cleared again.
    pub fn install(&mut self, plan: Plan) -> anyhow::Result<()> {
        self.record = plan.record();
        self.write()?;
        match Routing::install(plan) {
            Ok(r) => {
                self.routing = Some(r);
                Ok(())
            }
            Err(e) => {
                self.record.clear();
                let _ = self.write();
                Err(e.into())
            }
        }
    }

    /// What is installed, kept up to date, for a panic hook that must
    /// remove it without running destructors ([`ftnet_io::remove_recorded`]).
    pub fn hook_record(&self) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
        self.hook_record.clone()
    }

    /// The policy routing table (and rule priority).
    pub fn table(&self) -> u32 {
        self.table_no
    }

    /// The interfaces the installed replicas are bound to.
    pub fn devs(&self) -> Vec<String> {
        self.routing.as_ref().map(Routing::devs).unwrap_or_default()
    }

    /// Record the rules of a replica added at run time, then install them
    /// (after the others). On error nothing of it stays, in the record or
    /// installed.
    pub fn add_replica(&mut self, rr: &ftnet_io::ReplicaRules) -> anyhow::Result<()> {
        if self.routing.is_none() {
            anyhow::bail!("no routing installed");
        }
        let before = self.record.len();
        self.record.extend(rr.record());
        if let Err(e) = self.write() {
            self.record.truncate(before);
            return Err(e);
        }
        let added = match self.routing.as_mut() {
            Some(routing) => routing.add_replica(rr),
            None => Ok(()),
        };
        if let Err(e) = added {
            self.record.truncate(before);
            let _ = self.write();
            return Err(e.into());
        }
        Ok(())
    }

    /// The interface a replica's rules bind it to and the ports they
    /// steer (`None`: no rules for it).
    pub fn replica_ports(&self, replica: std::net::Ipv4Addr) -> Option<(String, Vec<u16>)> {
        self.routing.as_ref()?.replica_ports(replica)
    }

    /// Whether packets to `vip` are steered into the TUN.
    pub fn steers_vip(&self, vip: std::net::Ipv4Addr) -> bool {
        self.routing.as_ref().is_some_and(|r| r.steers_vip(vip))
    }

    /// Remove the routing now (the locks stay held until drop).
    pub fn remove_routing(&mut self) {
        if let Some(r) = self.routing.take() {
            drop(r);
            self.record.clear();
            if let Err(e) = self.write() {
                tracing::warn!("clearing the routing record: {e:#}");
            }
        }
    }

    fn write(&mut self) -> anyhow::Result<()> {
        match self.hook_record.lock() {
            Ok(mut r) => r.clone_from(&self.record),
            Err(p) => p.into_inner().clone_from(&self.record),
        }
        let mut text = format!(
            "# ftnet router: what it installed (removed by the next router if it dies)\npid {}\n",
            std::process::id()
        );
        for l in &self.record {
            text.push_str(l);
            text.push('\n');
        }
        self.table.write(&text)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.remove_routing();
        // A record that could not be cleared keeps its file for the next
        // router; otherwise the files go (see `LockFile::acquire` for why
        // that is safe while others wait).
        if self.record.is_empty() {
            self.table.unlink();
            self.tun.unlink();
        }
    }
}

fn parse(text: &str) -> Leftovers {
    let mut left = Leftovers::default();
    for line in text.lines() {
        if let Some(p) = line.strip_prefix("pid ") {
            left.pid = p.trim().parse().ok();
        } else if line.starts_with("rule ") || line.starts_with("route ") {
            left.record.push(line.to_string());
        }
    }
    left
}

/// An exclusively locked file.
struct LockFile {
    file: File,
    path: PathBuf,
}

impl LockFile {
    /// Open (creating) and lock `path` without waiting. A holder unlinks its
    /// file when it exits cleanly, so a lock taken on a file that is no
    /// longer at `path` is worthless: try again on the new one.
    fn acquire(path: &Path, what: &str) -> anyhow::Result<LockFile> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        for _ in 0..10 {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(path)
                .with_context(|| format!("opening lock file {}", path.display()))?;
            // SAFETY: flock(2) on an fd we own; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                    return Err(e).with_context(|| format!("locking {}", path.display()));
                }
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let pid = parse(&text)
                    .pid
                    .map_or("pid unknown".to_string(), |p| format!("pid {p}"));
                bail!(
                    "another ftnet router ({pid}) is running with {what} in this network namespace (lock {} held) — \
                     one router per TUN and per routing table: stop that one first, or give this one another tun and table; nothing was changed",
                    path.display()
                );
            }
            let same = std::fs::metadata(path)
                .map(|m| m.ino() == file.metadata().map(|f| f.ino()).unwrap_or(0))
                .unwrap_or(false);
            if same {
                return Ok(LockFile {
                    file,
                    path: path.to_path_buf(),
                });
            }
        }
        bail!("could not lock {}: it keeps being replaced", path.display())
    }

    fn read(&mut self) -> anyhow::Result<String> {
        let mut text = String::new();
        self.file.seek(SeekFrom::Start(0))?;
        self.file
            .read_to_string(&mut text)
            .with_context(|| format!("reading {}", self.path.display()))?;
        Ok(text)
    }

    fn write(&mut self, text: &str) -> anyhow::Result<()> {
        (|| -> std::io::Result<()> {
            self.file.set_len(0)?;
            self.file.seek(SeekFrom::Start(0))?;
            self.file.write_all(text.as_bytes())?;
            self.file.sync_data()
        })()
        .with_context(|| format!("writing {}", self.path.display()))
    }

    fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The inode of this process's network namespace: unique while it exists.
fn netns_id() -> std::io::Result<u64> {
    Ok(std::fs::metadata("/proc/self/ns/net")?.ino())
}

/// Remove the lock files of a network namespace that is about to be
/// deleted (`ftnet lab down`: a router killed with SIGKILL leaves its
/// files). `ns_path` is the namespace's file, e.g. /run/netns/NAME.
pub fn forget_namespace(ns_path: &Path) {
    let Ok(m) = std::fs::metadata(ns_path) else {
        return;
    };
    let prefix = format!("net{}-", m.ino());
    if let Ok(rd) = std::fs::read_dir(LOCK_DIR) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(LOCK_DIR);
}

/// Refuse a TUN that some process holds open: the lock keeps other ftnet
/// routers away, this keeps us off a TUN another program (or an ftnet of an
/// older version) reads. A TUN that is not persistent exists only while a
/// process holds it; a persistent one may be attached to when no queue is.
pub fn check_tun_free(name: &str) -> anyhow::Result<()> {
    // A TUN whose holder just died may take a moment to go away: a held TUN
    // whose holder cannot be seen is looked at again for up to a second.
    for _ in 0..10 {
        // What `ip -d link show dev NAME` says, asked over netlink.
        let link = match ftnet_io::link_show(name) {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(()), // no such interface: we create it
            Err(e) => return Err(e.into()),
        };
        if link.kind.as_deref() != Some("tun") {
            bail!("interface {name} exists and is not a TUN device — choose another tun name");
        }
        let attached = link.queues.unwrap_or(0) > 0;
        let persist = link.persist;
        if persist && !attached {
            return Ok(());
        }
        let holders = tun_holders(name);
        if !holders.is_empty() {
            let who: Vec<String> = holders
                .iter()
                .map(|(p, c)| format!("pid {p} ({c})"))
                .collect();
            bail!(
                "TUN {name} is held open by {} — a second reader would take a share of its packets; stop it first; nothing was changed",
                who.join(", ")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bail!("TUN {name} is held open by a process this one cannot see (another PID namespace?) — a second reader would take a share of its packets; nothing was changed")
}

/// Processes of this network namespace with `/dev/net/tun` attached to
/// interface `name` (their fdinfo says `iff: name`): (pid, command).
fn tun_holders(name: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let net = netns_id().ok();
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let base = p.path();
        let same_net = std::fs::metadata(base.join("ns/net")).map(|m| m.ino()).ok() == net;
        let Ok(fds) = std::fs::read_dir(base.join("fd")) else {
            continue;
        };
        let holds = same_net
            && fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|t| t == Path::new("/dev/net/tun"))
                    && std::fs::read_to_string(base.join("fdinfo").join(fd.file_name())).is_ok_and(
                        |s| {
                            s.lines()
                                .any(|l| l.trim() == format!("iff:\t{name}").trim())
                        },
                    )
            });
        if holds {
            let comm = std::fs::read_to_string(base.join("comm")).unwrap_or_default();
            out.push((pid, comm.trim().to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_record() {
        let t =
            "# header\npid 42\nrule pref 7001 nop\nroute default dev ftnet0 table 7000\ngarbage\n";
        assert_eq!(
            parse(t),
            Leftovers {
                pid: Some(42),
                record: vec![
                    "rule pref 7001 nop".into(),
                    "route default dev ftnet0 table 7000".into()
                ],
            }
        );
    }

    /// A second lock on the same file fails at once and names the holder's
    /// pid; after the holder is gone it can be taken again (flock locks
    /// belong to the open file, so two opens in one process conflict like
    /// two processes do).
    #[test]
    fn a_held_lock_is_refused_with_the_holders_pid() {
        let dir = std::env::temp_dir().join(format!("ftnet-lock-test-{}", std::process::id()));
        let path = dir.join("x.lock");
        let mut a = LockFile::acquire(&path, "TUN t").expect("first lock");
        a.write("pid 4242\n").expect("write");
        let e = LockFile::acquire(&path, "TUN t")
            .err()
            .expect("second lock must fail");
        let msg = format!("{e:#}");
        assert!(msg.contains("pid 4242") && msg.contains("TUN t"), "{msg}");
        a.unlink();
        drop(a);
        let b = LockFile::acquire(&path, "TUN t").expect("lock after release");
        b.unlink();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
