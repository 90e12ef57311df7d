//! `ftnet router`: the data-plane loop around the sans-IO core.
//!
//! One thread per TUN queue moves packets: poll(2) on its queue, read a
//! batch, feed it to the core under the lock, write out what the core
//! produced after releasing it, run due timers. With two queues the kernel
//! steers packets by direction ([`ftnet_io::steer`]): packets for a virtual
//! IP to one thread, replica replies to the other, so the kernel work each
//! `write` triggers (the client's TCP receive path, the replicas' transmit
//! path) runs on two cores. A status thread serves snapshots on a Unix
//! socket; it only reads a string the first data-plane thread refreshes.

use crate::config::FileConfig;
use crate::control::{self, Registry, Routed, RouterHandle};
use crate::instance::{self, Instance};
use crate::sys;
use anyhow::Context;
use ftnet_core::{Event, Instant, Packet, Router};
use ftnet_io::{steer, Device, Plan, RoutingSpec, Tun, TunOptions, RECV_BUF_LEN};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tracing::{debug, error, info, warn};

/// Packets read per wake-up before the replies are flushed: enough to
/// amortise the poll and the lock, few enough to keep latency of the first
/// one low.
const BATCH: usize = 64;
/// Longest sleep even when the core wants no timer: the loop also watches
/// the stop flag and refreshes the status snapshot.
const MAX_SLEEP: Duration = Duration::from_millis(100);
const STATUS_EVERY: Duration = Duration::from_millis(250);

pub fn run(cfg: FileConfig, path: &Path) -> anyhow::Result<()> {
    // One router per TUN and per table, before anything is touched: a
    // second one must neither take the first one's rules away nor share its
    // TUN (see `instance`).
    let (mut instance, left) = Instance::lock(&cfg.tun, cfg.table)?;
    instance::check_tun_free(&cfg.tun)?;
    // The status socket too, before the routing: a router that could not
    // answer on it must not change anything. (It is bound once the routing
    // is in place: a socket that answers means a router that serves.)
    StatusSocket::check_free(&cfg.status_socket)?;
    sys::install_stop_handler();
    sys::ignore_sigpipe();
    sys::keep_heap();
    let started = std::time::Instant::now();
    if !left.record.is_empty() {
        let n = instance.clean_up(&left)?;
        warn!(
            table = cfg.table,
            pid = ?left.pid,
            "a dead router (pid {}) left its routing: removed {n} of the {} rule(s) and route(s) it had recorded",
            left.pid.map_or("unknown".to_string(), |p| p.to_string()),
            left.record.len()
        );
    }
    let foreign = ftnet_io::rules_at(cfg.table);
    if !foreign.is_empty() {
        warn!(
            table = cfg.table,
            "{} rule(s) at priority {} or {} that no ftnet router recorded are left in place (remove them if they are stale, e.g. from an older ftnet): {}",
            foreign.len(),
            cfg.table,
            cfg.table + 1,
            foreign.join("; ")
        );
    }

    let vips: Vec<_> = cfg.core.services.iter().map(|s| s.vip).collect();
    let mut queues = Tun::open_queues(&TunOptions {
        name: cfg.tun.clone(),
        mtu: cfg.mtu,
        txqueuelen: cfg.tun_queue_len,
        queues: cfg.threads,
    })
    .with_context(|| format!("opening TUN device {}", cfg.tun))?;
    if queues.len() > 1 {
        match steer::load(&vips, queues.len() / 2)
            .and_then(|prog| queues[0].set_steering(prog.as_raw_fd()))
        {
            Ok(()) => {}
            Err(e) => {
                // Without steering the kernel hashes flows over the queues
                // at random; one queue is then the safer choice.
                warn!("{e}; falling back to one data-plane thread");
                queues.truncate(1);
            }
        }
    }
    let tun_name = queues[0].name().to_string();
    info!(
        tun = %tun_name,
        mtu = cfg.mtu,
        threads = queues.len(),
        "TUN open with IFF_VNET_HDR, offloads CSUM|TSO4|TSO6|TSO_ECN{}",
        if queues.len() > 1 { ", queues split by direction and hashed by client (eBPF steering)" } else { "" }
    );

    let mut replica_ports = Vec::new();
    for s in &cfg.core.services {
        info!(
            service = %s.name, vip = %s.vip, ports = ?s.ports,
            replicas = %s.replicas.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(","),
            "serving"
        );
        for r in &s.replicas {
            for p in &s.ports {
                replica_ports.push((*r, *p));
            }
        }
    }
    let spec = RoutingSpec {
        tun: tun_name.clone(),
        table: cfg.table,
        vips,
        replica_ports,
    };
    let plan =
        Plan::new(&spec).context("binding each replica to the interface it is reached by")?;
    instance
        .install(plan)
        .context("setting up policy routing")?;
    // Release builds abort on panic, so no destructor runs: take the rules
    // and the socket file away from the panic hook instead, or clients of
    // the VIP would be routed into a TUN nobody reads. (The locks go with
    // the process.)
    let (record, sock) = (instance.hook_record(), cfg.status_socket.clone());
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        // Never wait in a panic hook: a poisoned or held lock gives what it has.
        let record = match record.try_lock() {
            Ok(r) => r.clone(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().clone(),
            Err(std::sync::TryLockError::WouldBlock) => Vec::new(),
        };
        let n = ftnet_io::remove_recorded(&record);
        let _ = std::fs::remove_file(&sock);
        eprintln!(
            "ftnet router: panicked; removed {n} of its {} policy rule(s) and route(s) and {}",
            record.len(),
            sock.display()
        );
    }));

    let snapshot = Arc::new(Mutex::new(String::from("{}")));
    let socket = StatusSocket::bind(
        &cfg.status_socket,
        cfg.status_group.as_ref(),
        snapshot.clone(),
    )?;
    info!(socket = %cfg.status_socket.display(), "status socket listening");
    crate::metrics::note(
        "start",
        None,
        format!("router started (pid {})", std::process::id()),
    );

    let secret = sys::random_secret().context("reading 16 random bytes from /dev/urandom")?;
    let shared = Arc::new(Shared {
        router: Mutex::new({
            let mut r = Router::new(cfg.core.clone(), secret);
            // This router may follow another (a takeover, a restart): it
            // numbers input only once the agents said where the order stands.
            r.await_order();
            if cfg.control.is_some() {
                // Nor can it tell a current replica from one that left the
                // group under the router before until the agents said so:
                // a replica serves once its own agent registered, and the
                // agents' reports keep the ones out of service out.
                r.require_agents();
            }
            r
        }),
        started,
        epoch_us: sys::epoch_micros(),
        snapshot,
        tun: tun_name,
        kick: eventfd().context("creating an eventfd")?,
        registry: OnceLock::new(),
        fault: cfg.fault,
        instance: Mutex::new(instance),
        known: Arc::new(std::sync::RwLock::new(
            cfg.core
                .services
                .iter()
                .flat_map(|s| s.replicas.iter().copied())
                .collect(),
        )),
        drain: Mutex::new(None),
        tun_dropped: std::sync::atomic::AtomicU64::new(u64::MAX),
        queues: queues
            .iter()
            .map(|q| QueueState::new(q.as_raw_fd()))
            .collect(),
    });
    {
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("status".into())
            .spawn(move || status_loop(&sh))
            .context("starting the status thread")?;
    }
    if let Some(f) = cfg.fault {
        let what = if f.acks { "pure ACK" } else { "data packet" };
        warn!(replica = %f.drop_data_to, every = f.every, what, "[fault] test hook active: dropping every n-th such packet to this replica");
    }
    socket.serve_admin(shared.clone());
    if let Some(addr) = cfg.metrics_listen {
        crate::metrics::serve(addr, shared.snapshot.clone())?;
    }
    {
        let (sh, path, start) = (shared.clone(), path.to_path_buf(), cfg.core.clone());
        sys::on_sighup(Box::new(move || reload(&sh, &path, &start)));
    }
    if let Some(c) = &cfg.control {
        let reg = control::start(c, shared.known.clone(), shared.clone())?;
        let _ = shared.registry.set(reg);
    }
    // systemd (Type=notify): ready now; the watchdog is pinged while the data plane moves.
    let what = format!(
        "serving {} service(s) on {}",
        cfg.core.services.len(),
        shared.tun
    );
    crate::notify::router_ready(
        &what,
        crate::metrics::since_refresh,
        crate::metrics::STALLED_AFTER,
        sys::stop_requested,
    );
    let busy_poll = cfg.busy_poll;
    let mut workers = Vec::new();
    let mut first = None;
    for (i, q) in queues.into_iter().enumerate() {
        if i == 0 {
            first = Some(q);
            continue;
        }
        let sh = shared.clone();
        let h = std::thread::Builder::new()
            .name(format!("dataplane{i}"))
            .spawn(move || event_loop(q, i, &sh, false, busy_poll))
            .context("starting a data-plane thread")?;
        workers.push(h);
    }
    let mut result = match first {
        Some(q) => event_loop(q, 0, &shared, true, busy_poll),
        None => Ok(()),
    };
    // The first loop to stop (signal or error) stops the others.
    sys::request_stop();
    crate::notify::stopping("stopping: removing the policy routing");
    for h in workers {
        match h.join() {
            Ok(Err(e)) if result.is_ok() => result = Err(e),
            Ok(_) => {}
            Err(_) => result = Err(anyhow::anyhow!("a data-plane thread panicked")),
        }
    }

    shared
        .instance
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove_routing();
    drop(socket);
    if sys::last_signal() != 0 {
        info!(
            signal = sys::last_signal(),
            "stopped by signal; routing and status socket removed"
        );
    }
    result
}

/// What the data-plane threads share.
struct Shared {
    router: Mutex<Router>,
    started: std::time::Instant,
    /// Microseconds since the Unix epoch at `started`: the core's clock is
    /// wall-clock based, so that the TCP timestamps of a router that takes
    /// over continue those of the one before (both take the connection's
    /// timestamp base from the agents; hosts keep their clocks in sync).
    epoch_us: u64,
    snapshot: Arc<Mutex<String>>,
    tun: String,
    /// Written when something outside the data plane (the control channel)
    /// changed the core, so the first data-plane thread sends what it queued
    /// now rather than at its next packet or timer.
    kick: OwnedFd,
    /// The agents, when `[control]` is configured.
    registry: OnceLock<Arc<Registry>>,
    /// `[fault]` test hook.
    fault: Option<crate::config::FaultConfig>,
    /// The locks and the routing (a replica added at run time gets its
    /// rules here).
    instance: Mutex<Instance>,
    /// Every replica address of every service, for the agents' admission
    /// (a replica added at run time may register).
    known: Arc<std::sync::RwLock<std::collections::HashSet<std::net::Ipv4Addr>>>,
    /// Draining before a stop (`ftnet drain`): since when, and the deadline.
    drain: Mutex<Option<(std::time::Instant, std::time::Instant)>>,
    /// The TUN's drop counter as the `tun-drops` thread last read it
    /// (`u64::MAX`: not read, or not readable): off the data plane, which
    /// only copies it into the status.
    tun_dropped: std::sync::atomic::AtomicU64,
    /// Every data-plane thread's TUN queue: timers that judge replicas by
    /// their silence wait while another thread lags ([`Shared::queue_lags`]).
    queues: Vec<QueueState>,
}

/// One data-plane thread's TUN queue, as the other threads see it.
struct QueueState {
    fd: std::os::fd::RawFd,
    /// When its thread last read it (µs since `Shared::started`).
    read_at: std::sync::atomic::AtomicU64,
    /// Its thread holds packets read from it that the core has not had
    /// yet (it waits for the lock).
    in_hand: std::sync::atomic::AtomicBool,
}

impl QueueState {
    fn new(fd: std::os::fd::RawFd) -> QueueState {
        QueueState {
            fd,
            read_at: std::sync::atomic::AtomicU64::new(0),
            in_hand: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// A queue whose thread last read it this long ago and that holds
/// packets now is lagging: its thread waits for a CPU.
const QUEUE_LAG: Duration = Duration::from_millis(5);
/// Timers wait for a lagging queue at most this long (then they run: a
/// thread that never comes back must not stop failure detection).
const QUEUE_LAG_MAX: Duration = Duration::from_millis(200);

impl Shared {
    /// Thread `me` read its queue.
    fn queue_read(&self, me: usize) {
        if let Some(q) = self.queues.get(me) {
            let us = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
            q.read_at.store(us, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether another thread's queue holds packets that thread has not
    /// read for [`QUEUE_LAG`]: a replica's answer may wait there, and a
    /// timer run now would take its silence for a failure (on a loaded
    /// host a data-plane thread can wait hundreds of ms for a CPU).
    fn queue_lags(&self, me: usize) -> bool {
        let now = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let lag = u64::try_from(QUEUE_LAG.as_micros()).unwrap_or(u64::MAX);
        self.queues.iter().enumerate().any(|(j, q)| {
            if j == me {
                return false;
            }
            if q.in_hand.load(std::sync::atomic::Ordering::Acquire) {
                return true;
            }
            if now.saturating_sub(q.read_at.load(std::sync::atomic::Ordering::Relaxed)) < lag {
                return false;
            }
            let mut p = libc::pollfd {
                fd: q.fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd that lives across the call; timeout 0.
            let rc = unsafe { libc::poll(&mut p, 1, 0) };
            rc > 0 && p.revents & libc::POLLIN != 0
        })
    }
}

impl RouterHandle for Shared {
    fn host_lost(&self, addr: std::net::Ipv4Addr) -> usize {
        let n = self.lock().host_lost(self.now(), addr);
        self.kick();
        n
    }

    fn replica_failed(&self, addr: std::net::Ipv4Addr) -> usize {
        let n = self.lock().replica_failed(self.now(), addr);
        self.kick();
        n
    }

    fn agents_all_silent(&self) {
        self.lock().agents_all_silent(self.now());
        self.kick();
    }

    fn agent_registered(&self, addr: std::net::Ipv4Addr) -> Vec<String> {
        let out = self.lock().agent_registered(addr);
        self.kick();
        out
    }

    fn reported_down(
        &self,
        reporter: std::net::Ipv4Addr,
        down: &[ftnet_core::OutOfService],
    ) -> usize {
        let n = self.lock().reported_down(self.now(), reporter, down);
        self.kick();
        n
    }

    fn out_of_service(&self) -> Vec<ftnet_core::OutOfService> {
        self.lock().out_of_service()
    }

    fn adopt(
        &self,
        from: std::net::Ipv4Addr,
        records: &[ftnet_core::ConnRecord],
    ) -> Vec<ftnet_core::Adopted> {
        let now = self.now();
        let done = {
            let mut r = self.lock();
            let done = records.iter().map(|rec| r.adopt(now, from, rec)).collect();
            // The agent's last message of records is the short one (it
            // sends an empty one if need be): that was all of them, and a
            // connection rebuilt without a record from this agent does not
            // wait for one. Not before: a connection whose record comes in
            // a later message would stop waiting for it.
            if records.len() < ftnet_control::RECORDS_PER_MSG {
                r.records_done(now, from);
            }
            done
        };
        // The position probes are queued: get them written.
        self.kick();
        done
    }

    fn records_committed(&self, c: &crate::control::Commits) {
        let now = self.now();
        {
            let mut r = self.lock();
            for k in &c.stored {
                r.record_stored(now, *k);
            }
            for k in &c.heard {
                r.record_heard(now, *k);
            }
            for k in &c.unstored {
                r.record_unstored(now, *k);
            }
        }
        // The SYN-ACKs are queued: get them written.
        self.kick();
    }

    fn superseded(
        &self,
        replica: std::net::Ipv4Addr,
        reports: &[ftnet_core::OrderReport],
    ) -> Option<String> {
        let why = {
            let mut r = self.lock();
            let why = r.superseded(replica, reports);
            if why.is_some() {
                r.start_over();
            }
            why
        };
        if why.is_some() {
            crate::metrics::note("superseded", None, why.clone().unwrap_or_default());
            self.kick();
        }
        why
    }

    fn order_report(
        &self,
        replica: std::net::Ipv4Addr,
        reports: &[ftnet_core::OrderReport],
        then: &mut dyn FnMut(),
    ) {
        let now = self.now();
        {
            let mut r = self.lock();
            r.order_report(now, replica, reports);
            then();
        }
        // Replays and held events are queued: get them out.
        self.kick();
    }

    fn join_report(&self, join: u64, donor: bool, result: Result<String, String>) {
        Shared::join_report(self, join, donor, result)
    }

    fn join_parties(&self, join: u64) -> Option<(std::net::Ipv4Addr, std::net::Ipv4Addr)> {
        Shared::join_parties(self, join)
    }

    fn join_point(&self, join: u64) {
        let now = self.now();
        self.lock().checkpoint_point(now, join);
        self.kick();
    }

    fn try_rejoin(&self, addr: std::net::Ipv4Addr) {
        Shared::try_rejoin(self, addr)
    }
    fn stale_in(&self, addr: std::net::Ipv4Addr) -> Vec<String> {
        self.lock().stale_in(addr)
    }
    fn set_follows_order(&self, addr: std::net::Ipv4Addr, yes: bool) {
        self.lock().set_follows_order(addr, yes)
    }
}

impl Shared {
    /// A join's state report, or its failure (see `Router::checkpoint_taken`).
    pub fn join_report(&self, join: u64, donor: bool, result: Result<String, String>) {
        let now = self.now();
        {
            let mut r = self.lock();
            match (donor, result) {
                (_, Err(e)) => r.join_failed(now, join, e),
                (true, ok) => r.checkpoint_taken(now, join, ok),
                (false, ok) => r.state_restored(now, join, ok),
            }
        }
        self.kick();
    }

    /// A fresh server of replica `addr` connected to its agent: where the
    /// replica is down in a stateful service, it joins (with the group's
    /// state, proven) without an operator.
    pub fn try_rejoin(&self, addr: std::net::Ipv4Addr) {
        let now = self.now();
        let names = self.lock().joinable(addr);
        for name in names {
            let res = self.lock().join_replica(now, &name, addr);
            match res {
                Ok(join) => {
                    info!(replica = %addr, service = %name, join, "a server of this replica follows the order again: it joins with the group's state")
                }
                Err(e) => warn!(replica = %addr, service = %name, "cannot start a join: {e}"),
            }
        }
        self.kick();
    }

    /// The donor and joiner of a join whose state is on its way.
    pub fn join_parties(&self, join: u64) -> Option<(std::net::Ipv4Addr, std::net::Ipv4Addr)> {
        self.lock().join_parties(join)
    }

    /// Wake the data-plane threads so that they write what the core queued.
    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own.
        unsafe { libc::write(self.kick.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes no pointers; the fd is checked and then owned.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd returned by the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Shared {
    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch_us + sys::micros_since(self.started))
    }
    fn lock(&self) -> MutexGuard<'_, Router> {
        // A panic aborts the process (release profile), so a poisoned lock
        // can only be seen in tests; the router inside is still usable.
        self.router.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What one pass under the lock produced, written out after it is released.
#[derive(Default)]
struct Out {
    packets: Vec<Packet>,
    events: Vec<Event>,
    write_errors: u64,
    fault: Option<crate::config::FaultConfig>,
    fault_seen: u32,
}

/// Destination, TCP payload length and whether it is a pure ACK (of the
/// flags SYN, FIN, RST, ACK only ACK) of an IPv4/TCP packet.
fn tcp_summary(p: &[u8]) -> Option<(std::net::Ipv4Addr, usize, bool)> {
    if p.len() < 40 || p[9] != 6 {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    let doff = usize::from(*p.get(ihl + 12)? >> 4) * 4;
    let flags = *p.get(ihl + 13)?;
    let len = total.saturating_sub(ihl + doff);
    Some((
        std::net::Ipv4Addr::new(p[16], p[17], p[18], p[19]),
        len,
        len == 0 && flags & 0x17 == 0x10,
    ))
}

impl Out {
    /// Take everything the core queued. Records for the agents are sent
    /// here, under the router's lock, so that they reach each agent in the
    /// order the core numbered them even when several threads drain.
    fn drain(&mut self, router: &mut Router, registry: Option<&Registry>, now: Instant) {
        let mut routed = false;
        loop {
            while let Some(p) = router.poll_transmit() {
                self.packets.push(p);
            }
            while let Some(ev) = router.poll_event() {
                self.events.push(ev);
            }
            let mut more = false;
            // Without a control plane nobody keeps records or the order.
            while let Some(msg) = router.poll_agent_msg() {
                routed = true;
                if let Some(Routed::NoAgent(key)) = registry.map(|r| r.route(&msg)) {
                    // No agent to wait for: the SYN-ACK goes now, unless
                    // the router is in doubt whether it still serves.
                    router.record_unstored(now, key);
                    more = true;
                }
            }
            if !more {
                // What was routed reaches the agents' writers now (nothing
                // to hand over, and no lock taken, for a drain without).
                if let (Some(r), true) = (registry, routed) {
                    r.flush();
                }
                return;
            }
        }
    }

    /// Write the packets (outside the lock) and log the events.
    fn flush<D: Device>(&mut self, dev: &mut D) {
        for pkt in self.packets.drain(..) {
            if let Some(f) = self.fault {
                let hit = tcp_summary(&pkt.data).is_some_and(|(d, n, ack)| {
                    d == f.drop_data_to && if f.acks { ack } else { n > 0 }
                });
                if hit {
                    self.fault_seen += 1;
                    if self.fault_seen >= f.every {
                        self.fault_seen = 0;
                        dev.recycle(pkt.data);
                        continue;
                    }
                }
            }
            if let Err(e) = dev.send(&pkt) {
                self.write_errors += 1;
                // One line per power of two keeps a persistent error from flooding the log.
                if self.write_errors.is_power_of_two() {
                    warn!(
                        errors = self.write_errors,
                        len = pkt.data.len(),
                        "TUN write: {e}"
                    );
                }
            }
            dev.recycle(pkt.data);
        }
        for ev in self.events.drain(..) {
            log_event(&ev);
        }
    }
}

fn event_loop(
    mut tun: Tun,
    me: usize,
    shared: &Shared,
    main: bool,
    busy_poll: Duration,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; RECV_BUF_LEN];
    let mut batch = Vec::with_capacity(BATCH);
    let mut out = Out {
        fault: shared.fault,
        ..Out::default()
    };
    let mut last_status = std::time::Instant::now() - STATUS_EVERY;
    // Since when due timers wait for another thread's lagging queue.
    let mut held: Option<std::time::Instant> = None;
    loop {
        if sys::stop_requested() {
            return Ok(());
        }
        let mut wait_for_queue = false;
        let next = {
            let mut r = shared.lock();
            let t = shared.now();
            if r.poll_timeout().is_some_and(|due| due <= t) {
                // Packets another thread has not read yet are heard first
                // (by that thread), unless it has kept them too long.
                if shared.queue_lags(me)
                    && held.get_or_insert_with(std::time::Instant::now).elapsed() < QUEUE_LAG_MAX
                {
                    wait_for_queue = true;
                } else {
                    held = None;
                    r.handle_timeout(t);
                }
            }
            out.drain(
                &mut r,
                shared.registry.get().map(|g| g.as_ref()),
                shared.now(),
            );
            if main && last_status.elapsed() >= STATUS_EVERY {
                flush_evict_bursts();
                // The data plane makes progress (`/healthz`); the status
                // itself is built by the status thread.
                crate::metrics::refreshed();
                last_status = std::time::Instant::now();
            }
            r.poll_timeout()
        };
        out.flush(&mut tun);

        let sleep = match next {
            // Look again soon: the lagging thread drains its queue meanwhile.
            _ if wait_for_queue => Duration::from_millis(1),
            Some(due) => {
                Duration::from_micros(due.as_micros().saturating_sub(shared.now().as_micros()))
                    .min(MAX_SLEEP)
            }
            None => MAX_SLEEP,
        };
        // Round up so a timer 300 µs away does not turn into a busy loop of
        // zero-millisecond polls.
        let ms =
            libc::c_int::try_from(sleep.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
        let mut pfd = [
            libc::pollfd {
                fd: tun.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: shared.kick.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Only the first thread answers kicks.
        let nfds = if main { 2 } else { 1 };
        // SAFETY: `pfd` holds `nfds` valid pollfds that live across the call.
        let rc = unsafe { libc::poll(pfd.as_mut_ptr(), nfds, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("poll on the TUN device");
        }
        if rc == 0 {
            continue;
        }
        if main && pfd[1].revents != 0 {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a live u64 from our eventfd.
            unsafe { libc::read(shared.kick.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
            continue; // the top of the loop sends what the core queued
        }
        // Drain the queue a batch at a time before sleeping again.
        // Drain the queue a batch at a time; with busy polling keep reading
        // for `busy_poll` after the last packet instead of sleeping, so the
        // next packet does not wait for a wake-up (on a VM, waking a halted
        // vCPU costs tens of µs). Due timers end the spin.
        let mut last = std::time::Instant::now();
        loop {
            let n = pump(&mut tun, me, shared, &mut buf, &mut batch, &mut out);
            // It reads its queue: a thread that does is not lagging.
            shared.queue_read(me);
            if n == BATCH {
                continue;
            }
            if n > 0 {
                last = std::time::Instant::now();
            }
            if last.elapsed() >= busy_poll
                || sys::stop_requested()
                || next.is_some_and(|due| due <= shared.now())
            {
                break;
            }
            std::hint::spin_loop();
        }
    }
}

/// Read up to [`BATCH`] packets, hand them to the core under one lock, then
/// write out what it produced. Returns how many packets were read.
fn pump<D: Device>(
    dev: &mut D,
    me: usize,
    shared: &Shared,
    buf: &mut [u8],
    batch: &mut Vec<Packet>,
    out: &mut Out,
) -> usize {
    while batch.len() < BATCH {
        match dev.recv(buf) {
            Ok(Some(pkt)) => batch.push(pkt),
            Ok(None) => break,
            Err(e) => {
                warn!("TUN read: {e}");
                break;
            }
        }
    }
    let n = batch.len();
    if n > 0 {
        let hand = shared.queues.get(me).map(|q| &q.in_hand);
        if let Some(h) = hand {
            h.store(true, std::sync::atomic::Ordering::Release);
        }
        let mut r = shared.lock();
        let now = shared.now();
        for pkt in batch.drain(..) {
            r.handle_packet(now, pkt);
        }
        if let Some(h) = hand {
            h.store(false, std::sync::atomic::Ordering::Release);
        }
        out.drain(
            &mut r,
            shared.registry.get().map(|g| g.as_ref()),
            shared.now(),
        );
    }
    out.flush(dev);
    n
}

/// How long a burst of per-connection evictions of one replica for one
/// reason lasts (a crash resets every connection within milliseconds).
const EVICT_BURST: Duration = Duration::from_secs(1);

/// Bursts of per-connection evictions in progress: (replica, reason) →
/// (when the first was logged, how many more since).
static EVICT_BURSTS: std::sync::Mutex<
    Vec<((std::net::Ipv4Addr, String), (std::time::Instant, u64))>,
> = std::sync::Mutex::new(Vec::new());

/// A per-connection eviction of `replica` for `reason`: is it the first of
/// a burst (logged at warn level; the others are counted and summed up)?
fn evict_burst_starts(replica: std::net::Ipv4Addr, reason: &str) -> bool {
    flush_evict_bursts();
    let mut b = EVICT_BURSTS.lock().unwrap_or_else(|p| p.into_inner());
    match b.iter_mut().find(|(k, _)| k.0 == replica && k.1 == reason) {
        Some((_, (_, more))) => {
            *more += 1;
            false
        }
        None => {
            b.push((
                (replica, reason.to_string()),
                (std::time::Instant::now(), 0),
            ));
            true
        }
    }
}

/// End the bursts older than `EVICT_BURST`: one line each for the
/// evictions after its first.
fn flush_evict_bursts() {
    let mut b = EVICT_BURSTS.lock().unwrap_or_else(|p| p.into_inner());
    if b.is_empty() {
        return;
    }
    b.retain(|((replica, reason), (first, more))| {
        if first.elapsed() < EVICT_BURST {
            return true;
        }
        if *more > 0 {
            warn!(
                replica = %replica,
                reason = %reason,
                connections = *more + 1,
                "replica {replica} evicted ({reason}) from {more} more connection(s) within {} ms of the first (each at debug level)",
                EVICT_BURST.as_millis()
            );
        }
        false
    });
}

fn log_event(ev: &Event) {
    crate::metrics::observe(ev);
    if matches!(
        ev,
        Event::ReplicaDown { .. }
            | Event::ReplicaUp { .. }
            | Event::ReplicaRejoined { .. }
            | Event::ReplicaAdded { .. }
            | Event::ReplicaDraining { .. }
            | Event::ReplicaDrained { .. }
            | Event::ReplicaRemoved { .. }
            | Event::ServiceAdded { .. }
            | Event::ServiceRemoved { .. }
            | Event::JoinStarted { .. }
            | Event::Joined { .. }
            | Event::JoinFailed { .. }
            | Event::TableRebuilt { .. }
    ) {
        wake_status();
    }
    // The reason's snake_case wire name ("stalled", "no_syn_ack"), the same
    // word `ftnet status --json` and the docs use.
    let why = |r: &ftnet_core::EvictReason| {
        serde_json::to_value(r)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{r:?}"))
    };
    #[allow(unreachable_patterns)] // the core may grow events before this match learns them
    match ev {
        Event::Evicted {
            conn,
            replica,
            reason,
            remaining,
            detail,
        } => {
            let detail = if detail.is_empty() {
                String::new()
            } else {
                format!(" [{detail}]")
            };
            let w = why(reason);
            // One replica failure is one line: a consequence of a
            // service-wide verdict (the replica is down, or removed) is
            // counted in that verdict's own line, and a burst of
            // per-connection verdicts (a crash resets every connection at
            // once) is its first line plus one summary (`EvictBursts`). Each
            // connection's line is kept at debug level.
            let service_wide = matches!(
                reason,
                ftnet_core::EvictReason::ReplicaDown | ftnet_core::EvictReason::Removed
            );
            if !service_wide && evict_burst_starts(*replica, &w) {
                warn!(
                    "connection {conn}: replica {replica} evicted ({w}){detail}; {remaining} replica(s) remain"
                )
            } else {
                debug!(
                    "connection {conn}: replica {replica} evicted ({w}){detail}; {remaining} replica(s) remain"
                )
            }
        }
        Event::ReplicaDown {
            service,
            replica,
            reason,
            connections,
            silent_ms,
        } => {
            let heard = match silent_ms {
                Some(ms) => format!("last heard from on a connection {ms} ms before"),
                None => "never heard from on a connection".into(),
            };
            warn!(
                "service {service}: replica {replica} declared down ({}); {heard}; taken out of its {connections} open connection(s) (each at debug level); new connections skip it",
                why(reason)
            )
        }
        Event::ReplicaUp { service, replica } => {
            warn!("service {service}: replica {replica} back in service (operator: `ftnet replica enable`); new connections use it again")
        }
        Event::ReplicaRejoined {
            service,
            replica,
            was,
            down_ms,
        } => {
            warn!("service {service}: replica {replica} answers again (stateless service, health check): back in service after {down_ms} ms out ({}); new connections use it", why(was))
        }
        Event::ReplicaAdded {
            service,
            replica,
            joins: false,
        } => {
            warn!("service {service}: replica {replica} added (operator: `ftnet replica add`); new connections use it, open ones go on without it")
        }
        Event::ReplicaAdded {
            service,
            replica,
            joins: true,
        } => {
            warn!("service {service}: replica {replica} added (operator: `ftnet replica add`), out of service until it joined with the group's state (its servers follow the input order)")
        }
        Event::ReplicaDraining {
            service,
            replica,
            connections,
        } => {
            warn!("service {service}: replica {replica} draining (operator: `ftnet replica drain`): no new connections; {connections} open connection(s) finish with it")
        }
        Event::ServiceAdded {
            service,
            vip,
            ports,
            replicas,
        } => {
            let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
            let replicas: Vec<String> = replicas.iter().map(ToString::to_string).collect();
            warn!("service {service} added (SIGHUP): {vip} port(s) {} on replicas {}; new connections use it (with agents, each replica once its agent registered)", ports.join(", "), replicas.join(", "))
        }
        Event::ServiceRemoved {
            service,
            connections,
        } => {
            warn!("service {service} removed (SIGHUP: gone from the file): no new connections (its VIP ports answer as closed ones); its {connections} open connection(s) finish")
        }
        Event::ReplicaDrained { service, replica } => {
            warn!("service {service}: replica {replica} drained: its last connection ended (it gets none until `ftnet replica enable`; `ftnet replica remove` takes it out)")
        }
        Event::ReplicaRemoved {
            service,
            replica,
            left,
            kept,
        } => {
            warn!("service {service}: replica {replica} removed (operator: `ftnet replica remove`): it left {left} connection(s) at once; {kept} connection(s) keep it as their last replica until they end")
        }
        Event::ConnectionLost { conn } => {
            error!("connection {conn}: no replica left, client reset")
        }
        Event::ConnectionEnded { conn, why } => {
            warn!("connection {conn} ended by the router (the client and the replicas were sent a RST): {why}; it held a replica's join off")
        }
        Event::TableRebuilt {
            connections,
            after_ms,
        } => {
            warn!("table rebuilt: all {connections} connection(s) adopted from the agents' records are whole again, {after_ms} ms after the first record")
        }
        Event::RouterPaused {
            ms,
            connections,
            probation,
        } => {
            let wait = if *probation {
                format!("; and for {} s at least, until a packet shows it still serves, no replica is taken out of a service (another router may have served meanwhile, and verdicts on a stale table would reset connections that one serves)", ftnet_core::PAUSE_PROBATION.as_secs())
            } else {
                String::new()
            };
            warn!("this router did not run for {ms} ms (its process was stopped or not scheduled): what it reads now may have waited that long, so no replica's silence across the gap counts against it; failure detection starts again now on its {connections} connection(s){wait}")
        }
        Event::OrderResumed {
            service,
            last,
            reported,
            missing,
            replayed,
            lost,
        } => {
            let list = |v: &[std::net::Ipv4Addr]| {
                v.iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let miss = if missing.is_empty() {
                String::new()
            } else {
                format!(
                    "; no report in time from {} (their shims may see a break in the order)",
                    list(missing)
                )
            };
            info!("service {service}: input order numbered on after {last} (reported: {}; {replayed} event(s) replayed to agents that were behind){miss}", list(reported));
            for (r, n) in lost {
                warn!("service {service}: ORDER LOST: replica {r} missed input event {n} and no agent can replay it; it leaves the group (out of service until `ftnet replica enable`)");
            }
        }
        Event::Diverged {
            conn,
            replica,
            offset,
            agreeing,
            live,
            detail,
        } => {
            if agreeing * 2 > *live {
                warn!("connection {conn}: replica {replica} diverged at reply byte {offset}: its bytes differ from what {agreeing} of {live} live replicas sent (the client got theirs): {detail}")
            } else {
                warn!("connection {conn}: replica {replica} diverged at reply byte {offset}: no majority among {live} live replicas; vote_tie applied ({agreeing} replica(s) on the side kept): {detail}")
            }
        }
        Event::OutputDiffers {
            conn,
            replica,
            offset,
            agreeing,
            live,
            evicted,
            service_wide,
            follows,
        } => {
            let scope = if *service_wide {
                "the service (stateful, and a majority agrees against it: its state differs)"
            } else {
                "this connection"
            };
            match (follows, evicted) {
                (Some(f), false) => warn!("connection {conn}: replica {replica}'s reply differs from what the client got from replica {f} in the bytes before reply byte {offset} ({agreeing} of {live} live replicas gave the commonest value); it stays in this connection for its input (its server keeps the service's state) but its replies are dropped and it no longer stands in for {f} here: if {f} fails, this client is reset. The client's stream comes from {f} alone, never spliced; a server that answers with the time, randomness or its own statistics (Redis INFO) differs so"),
                (Some(f), true) => warn!("connection {conn}: replica {replica}'s reply differs from what the client got from replica {f} in the bytes before reply byte {offset} ({agreeing} of {live} live replicas gave the commonest value); it leaves {scope}. The client's stream comes from {f} alone, never spliced; a server that answers with the time, randomness or its own statistics (Redis INFO) differs so"),
                (None, true) => warn!("connection {conn}: replica {replica}'s reply differs from what {agreeing} of {live} live replicas sent, in the bytes before reply byte {offset}; it leaves {scope} (a server that runs nondeterministically, or a replica whose state diverged)"),
                (None, false) => warn!("connection {conn}: replica {replica}'s reply differs from the other replicas' in the bytes before reply byte {offset}, and no majority of the {live} live replicas agrees ({agreeing} at most): nobody can be blamed, nobody is taken out; with output = \"fastest\" the client got the first copy of each byte. The replicas do not run the same: a stateful server run without `ftnet run`, or one that answers with the time or randomness"),
            }
        }
        Event::JoinStarted {
            service,
            replica,
            join,
        } => {
            warn!("service {service}: replica {replica} joins (join {join}): the service's input is paused (clients see a zero window) until every replica is at rest and the donor's checkpoint is fixed (with agents that hold the joiner: the input then resumes while the state is transferred and proven)")
        }
        Event::JoinCheckpoint {
            service,
            replica,
            donor,
            seq,
            quiet_ms,
        } => {
            info!("service {service}: at rest after {quiet_ms} ms at input event {seq}; replica {donor} checkpoints its state for joiner {replica}")
        }
        Event::JoinResumed {
            service,
            replica,
            join,
            connections,
            pause_ms,
        } => {
            info!("service {service}: join {join}: the donor's checkpoint is fixed and replica {replica} is part of {connections} open connection(s): input resumes after a {pause_ms} ms pause; the joiner's server is held until its state is proven, then catches up on what its sockets hold")
        }
        Event::Joined {
            service,
            replica,
            seq,
            digest,
            connections,
            pause_ms,
            join_ms,
        } => {
            warn!("service {service}: replica {replica} JOINED: its state's digest {digest} equals the donor's at input event {seq}; it is part of {connections} connection(s) and serves; input was paused {pause_ms} ms, the join took {join_ms} ms")
        }
        Event::JoinFailed {
            service,
            replica,
            reason,
            pause_ms,
            retry_in_ms,
        } => {
            let next = match retry_in_ms {
                Some(ms) => format!("the router tries again in {ms} ms"),
                None => format!(
                    "no more tries after {} (`ftnet replica join {replica}` starts again)",
                    ftnet_core::JOIN_ATTEMPTS
                ),
            };
            error!("service {service}: replica {replica} could NOT join: {reason}; it stays out of service; input resumes after a {pause_ms} ms pause; {next}")
        }
        other => info!("{other:?}"),
    }
}

/// A draining router stops once its last connection closed, or at the
/// deadline (the open ones then go on under a standby router, which adopts
/// them from the agents' records, or break without one).
fn drain_done(router: &Router, shared: &Shared, counted_open: usize) {
    let Some((since, deadline)) = *shared.drain.lock().unwrap_or_else(|p| p.into_inner()) else {
        return;
    };
    if sys::stop_requested() {
        return;
    }
    let deadline_passed = std::time::Instant::now() >= deadline;
    if counted_open > 0 && !deadline_passed {
        return;
    }
    // The pass's count may be off by the connections that closed while it
    // ran: the stop is decided on an exact count (a walk of a table that
    // is empty or nearly so, or once at the deadline).
    let open = router.open_connections();
    if open == 0 {
        info!(
            after_ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
            "drained: the last connection closed {:.1} s after the drain began; stopping",
            since.elapsed().as_secs_f64()
        );
        sys::request_stop();
    } else if deadline_passed {
        warn!(
            connections = open,
            "drain deadline passed with {open} connection(s) open; stopping (a standby router adopts them from the agents' records; without one they break)"
        );
        sys::request_stop();
    }
}

/// Packets the kernel dropped because a TUN queue of the router was full
/// (`tx_dropped` of the device: the kernel transmits into the TUN what the
/// router reads).
fn tun_dropped(tun: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/class/net/{tun}/statistics/tx_dropped"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The last `tun_dropped` seen, and when a warning last said it grew.
static TUN_DROPS: Mutex<Option<(u64, std::time::Instant)>> = Mutex::new(None);
/// How often the log says at most that the kernel dropped packets queued
/// for the router.
const TUN_DROP_WARN_EVERY: Duration = Duration::from_secs(10);

/// Say (at most every [`TUN_DROP_WARN_EVERY`]) how many packets queued for
/// the router the kernel dropped since it was last said.
fn note_tun_drops(tun: &str, dropped: u64) {
    let mut last = TUN_DROPS.lock().unwrap_or_else(|p| p.into_inner());
    let now = std::time::Instant::now();
    match *last {
        // Drops before this router started are not its own to report;
        // the first warning may come at once.
        None => *last = Some((dropped, now.checked_sub(TUN_DROP_WARN_EVERY).unwrap_or(now))),
        Some((seen, at)) if dropped > seen && now.duration_since(at) >= TUN_DROP_WARN_EVERY => {
            warn!(
                tun,
                dropped = dropped - seen,
                total = dropped,
                "the kernel dropped {} packet(s) queued for the router (a TUN queue was full: its data-plane thread fell behind); TCP repairs each loss, but a burst of them delays a replica's output by its retransmission back-off and can make it look stalled: raise [router] tun_queue_len, or give the router more CPU",
                dropped - seen
            );
            *last = Some((dropped, now));
        }
        Some(_) => {}
    }
}

/// Connections one slice of a status pass walks under the data plane's
/// lock (about 0.2 ms at 65,536 connections on a 2-core machine).
const STATUS_SLICE: usize = 512;

/// The status thread: every [`STATUS_EVERY`] it reads the TUN's drop
/// counter (a file in sysfs), walks the connection table in slices of
/// [`STATUS_SLICE`] (one short hold of the data plane's lock each, so that
/// packets never wait for a whole walk), decides whether a drain is done,
/// and publishes the snapshot that the status socket, `ftnet status` and
/// `/metrics` serve; until the router stops.
fn status_loop(shared: &Shared) {
    let _ = STATUS_THREAD.set(std::thread::current());
    while !sys::stop_requested() {
        let began = std::time::Instant::now();
        let dropped = tun_dropped(&shared.tun);
        if let Some(d) = dropped {
            note_tun_drops(&shared.tun, d);
        }
        shared.tun_dropped.store(
            dropped.unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut pass = ftnet_core::StatusPass::default();
        let mut slices = 0u32;
        while !shared.lock().status_slice(&mut pass, STATUS_SLICE) {
            slices += 1;
            // Let a data-plane thread that waits for the lock take it.
            std::thread::yield_now();
        }
        let open = pass.open();
        let (status, draining) = {
            let r = shared.lock();
            drain_done(&r, shared, open);
            let draining = shared
                .drain
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .map(|d| (d, open));
            (r.status_of(pass, shared.now()), draining)
        };
        refresh_status(status, draining, shared, began.elapsed(), slices + 1);
        // Until the next refresh is due, or a change of membership wakes
        // the thread early (`wake_status`; not sooner than STATUS_MIN_GAP).
        std::thread::sleep(STATUS_MIN_GAP.saturating_sub(began.elapsed()));
        let due = began + STATUS_EVERY;
        while !sys::stop_requested()
            && !STATUS_WOKEN.swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            let left = due.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
    }
}

/// The status thread, for `wake_status`.
static STATUS_THREAD: OnceLock<std::thread::Thread> = OnceLock::new();
/// A wake-up for the status thread is pending.
static STATUS_WOKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The least time between two status refreshes, however often woken.
const STATUS_MIN_GAP: Duration = Duration::from_millis(20);

/// A replica's or a service's state changed: refresh the status now rather
/// than up to [`STATUS_EVERY`] later (the status page, `ftnet status` and
/// `/metrics` show a failover at once).
fn wake_status() {
    STATUS_WOKEN.store(true, std::sync::atomic::Ordering::Release);
    if let Some(t) = STATUS_THREAD.get() {
        t.unpark();
    }
}

/// A drain in progress (when it began, its deadline) and the connections
/// the last status pass counted open.
type Draining = ((std::time::Instant, std::time::Instant), usize);

fn refresh_status(
    status: ftnet_core::Status,
    draining: Option<Draining>,
    shared: &Shared,
    pass_took: Duration,
    slices: u32,
) {
    let dropped = Some(
        shared
            .tun_dropped
            .load(std::sync::atomic::Ordering::Relaxed),
    )
    .filter(|d| *d != u64::MAX);
    // What this router is doing: serving; rebuilding connections adopted
    // from the agents after a takeover; or draining (`ftnet drain`).
    let role = if draining.is_some() {
        "draining"
    } else if status.rebuilding > 0 {
        "rebuilding"
    } else {
        "active"
    };
    let mut doc = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "role": role,
        // When this snapshot was taken (ms since the Unix epoch; it is
        // refreshed every 250 ms while the router runs).
        "timestamp_ms": sys::epoch_micros() / 1000,
        "uptime_s": shared.started.elapsed().as_secs_f64(),
        // The router's clock, which the states' `since_ms` are on.
        "now_ms": shared.now().as_millis(),
        "tun": shared.tun,
        "tun_dropped": dropped,
        "pid": std::process::id(),
        // How the per-replica figures were gathered: a walk of the table
        // in slices under the data plane's lock.
        "pass": {
            "ms": pass_took.as_secs_f64() * 1000.0,
            "slices": slices,
        },
        "status": status,
    });
    if let Some(((since, deadline), open)) = draining {
        doc["draining"] = serde_json::json!({
            "since_s": since.elapsed().as_secs_f64(),
            "deadline_in_s": deadline.saturating_duration_since(std::time::Instant::now()).as_secs_f64(),
            "open_connections": open,
        });
    }
    if let Some(reg) = shared.registry.get() {
        doc["control"] = reg.status();
    }
    let snapshot = &shared.snapshot;
    let text = doc.to_string();
    match snapshot.lock() {
        Ok(mut s) => *s = text,
        Err(p) => *p.into_inner() = text,
    }
}

/// The status socket: every connection gets the latest snapshot and is closed.
struct StatusSocket {
    path: PathBuf,
    admin: Arc<OnceLock<Arc<Shared>>>,
}

impl StatusSocket {
    /// Fail if another router answers on `path`.
    fn check_free(path: &Path) -> anyhow::Result<()> {
        if path.exists() && std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!("another router is already answering on {} — stop it or choose another status_socket; nothing was changed", path.display());
        }
        Ok(())
    }

    /// Bind the socket: mode 0600 (root only), or 0660 with `group` as
    /// its group (its members may read the status; operator requests stay
    /// root's: the peer's credentials are checked).
    fn bind(
        path: &Path,
        group: Option<&(String, u32)>,
        snapshot: Arc<Mutex<String>>,
    ) -> anyhow::Result<StatusSocket> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // A socket file left by a crashed router blocks bind(2); only remove
        // it if nobody answers on it, so two routers never fight over one.
        StatusSocket::check_free(path)?;
        if path.exists() {
            std::fs::remove_file(path)
                .with_context(|| format!("removing stale socket {}", path.display()))?;
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("binding status socket {}", path.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = match group {
                Some((name, gid)) => {
                    std::os::unix::fs::chown(path, None, Some(*gid)).with_context(|| {
                        format!("giving status socket {} to group {name}", path.display())
                    })?;
                    0o660
                }
                None => 0o600,
            };
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("setting the mode of status socket {}", path.display()))?;
        }
        let admin: Arc<OnceLock<Arc<Shared>>> = Arc::new(OnceLock::new());
        let handler = admin.clone();
        std::thread::Builder::new()
            .name("status".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    // A request is one line the client ends with a shutdown
                    // of its side; none (an old client, or `ftnet status`,
                    // which shuts down at once) asks for the snapshot.
                    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
                    let mut req = Vec::new();
                    let _ = (&mut conn).take(4096).read_to_end(&mut req);
                    let req = String::from_utf8_lossy(&req);
                    let text = if req.trim().is_empty() || req.trim() == "status" {
                        match snapshot.lock() {
                            Ok(s) => s.clone(),
                            Err(p) => p.into_inner().clone(),
                        }
                    } else if peer_uid(&conn) != Some(0) {
                        // A member of status_group reads; only root acts.
                        warn!(uid = ?peer_uid(&conn), "status socket: an operator request from a user that is not root refused");
                        serde_json::json!({"ok": false, "error": "operator requests (drain, replica changes) need root; status_group members may only read the status"}).to_string()
                    } else {
                        match handler.get() {
                            Some(sh) => admin_request(sh, req.trim()).to_string(),
                            None => serde_json::json!({"ok": false, "error": "the router is still starting"}).to_string(),
                        }
                    };
                    let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = conn
                        .write_all(text.as_bytes())
                        .and_then(|_| conn.write_all(b"\n"));
                }
            })
            .context("starting the status thread")?;
        Ok(StatusSocket {
            path: path.to_path_buf(),
            admin,
        })
    }

    /// Operator requests (`ftnet replica …`) act on this router from now on.
    fn serve_admin(&self, shared: Arc<Shared>) {
        let _ = self.admin.set(shared);
    }
}

/// The user id of the process at the other end of a Unix socket
/// (`SO_PEERCRED`).
fn peer_uid(conn: &std::os::unix::net::UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero `ucred` is a valid value of this plain C struct.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>()).unwrap_or(0);
    // SAFETY: the descriptor is the open socket `conn` owns; `cred` and
    // `len` are writable and `len` holds `cred`'s size.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred.uid)
}

/// SIGHUP: read the config file again and apply what can change while the
/// router runs: each service's replica list becomes the file's — members
/// the file does not list are removed, listed addresses that are not
/// members (new, or removed before) are added, as `ftnet replica
/// add|remove` would; a listed replica that is down or draining stays so
/// (a reload readmits nobody). A service new in the file starts (its VIP
/// and replies routed into the TUN first), as if it had been there from
/// the start; one gone from the file takes no new connections and its
/// open ones finish; the connections of the others are not touched.
/// Everything else (a service's VIP, ports, voting,
/// statelessness, timeouts, limits, the router's own settings) needs a
/// restart: each difference is logged as not applied. A file that does not
/// validate changes nothing. `file` is the configuration the router
/// started with (for the settings that only a restart applies); services
/// are compared with the running ones.
fn reload(shared: &Shared, path: &Path, file: &ftnet_core::Config) {
    let new = match crate::config::load(path) {
        Ok(c) => c,
        Err(e) => {
            error!("SIGHUP: {e:#}; nothing changed (fix the file and send SIGHUP again)");
            return;
        }
    };
    let (mut added, mut removed, mut skipped, mut services) = (0, 0, 0, 0);
    let mut not_applied = |what: String| {
        skipped += 1;
        warn!("SIGHUP: {what}: needs a restart, not applied");
    };
    if new.core.timeouts != file.timeouts {
        not_applied("[timeouts] changed".into());
    }
    if new.core.limits != file.limits {
        not_applied("[limits] changed".into());
    }
    let running: Vec<ftnet_core::Service> =
        shared.lock().live_services().into_iter().cloned().collect();
    let mut gone = 0;
    for s in &running {
        if !new.core.services.iter().any(|n| n.name == s.name) {
            let t = shared.now();
            let res = shared.lock().remove_service(t, &s.name);
            match res {
                Ok(_) => gone += 1,
                Err(e) => error!(
                    "SIGHUP: service {} (gone from the file) not removed: {e}",
                    s.name
                ),
            }
        }
    }
    // The members now (not removed), per service, as the router has them.
    let members: Vec<(String, Vec<std::net::Ipv4Addr>)> = shared
        .lock()
        .status()
        .services
        .iter()
        .filter(|s| !s.removed)
        .map(|s| {
            let m = s
                .replicas
                .iter()
                .filter(|r| r.state != ftnet_core::MemberState::Removed)
                .map(|r| r.addr)
                .collect();
            (s.name.clone(), m)
        })
        .collect();
    for ns in &new.core.services {
        let Some(old) = running.iter().find(|s| s.name == ns.name) else {
            match add_service(shared, ns) {
                Ok(()) => services += 1,
                Err(e) => error!(
                    "SIGHUP: service {} (new in the file) not started: {e}",
                    ns.name
                ),
            }
            continue;
        };
        if (old.vip, &old.ports, old.voting, old.stateless)
            != (ns.vip, &ns.ports, ns.voting, ns.stateless)
        {
            not_applied(format!(
                "service {}: its vip, ports, vote or stateless setting changed",
                ns.name
            ));
        }
        let now: &[std::net::Ipv4Addr] = members
            .iter()
            .find(|(n, _)| *n == ns.name)
            .map_or(&[][..], |(_, m)| &m[..]);
        for &a in ns.replicas.iter().filter(|a| !now.contains(a)) {
            let ordered = follows_order(shared, &ns.name);
            match add_replica(shared, &ns.name, a, ordered) {
                Ok(_) => added += 1,
                Err(e) => error!("SIGHUP: service {}: adding replica {a}: {e}", ns.name),
            }
        }
        for &a in now.iter().filter(|a| !ns.replicas.contains(a)) {
            let t = shared.now();
            match shared.lock().remove_replica(t, &ns.name, a) {
                Ok(_) => removed += 1,
                Err(e) => error!("SIGHUP: service {}: removing replica {a}: {e}", ns.name),
            }
        }
    }
    shared.kick();
    info!(
        "SIGHUP: reloaded {}: {added} replica(s) added, {removed} removed, {skipped} change(s) not applied, {services} service(s) added, {gone} service(s) removed",
        path.display()
    );
}

/// A service new in the file on SIGHUP: checked by the core first, then
/// its VIP and its replicas' replies on its ports are routed into the TUN
/// (recorded before they are installed), then it runs. A failed step
/// leaves the service out (rules already installed for it stay, recorded,
/// and route nothing the core takes).
fn add_service(shared: &Shared, s: &ftnet_core::Service) -> Result<(), String> {
    shared
        .lock()
        .check_add_service(s)
        .map_err(|e| e.to_string())?;
    {
        let mut inst = shared.instance.lock().unwrap_or_else(|p| p.into_inner());
        if !inst.steers_vip(s.vip) {
            let table = inst.table();
            inst.add_replica(&ftnet_io::ReplicaRules::vip(table, s.vip))
                .map_err(|e| format!("routing {} into the TUN: {e:#}", s.vip))?;
        }
    }
    for &r in &s.replicas {
        route_replica(shared, r, &s.ports)?;
    }
    let now = shared.now();
    shared
        .lock()
        .add_service(now, s.clone())
        .map_err(|e| e.to_string())
}

/// Route replica `addr`'s replies on `ports` into the TUN: all its rules
/// if it has none yet, else the ports it lacks.
fn route_replica(shared: &Shared, addr: std::net::Ipv4Addr, ports: &[u16]) -> Result<(), String> {
    let mut inst = shared.instance.lock().unwrap_or_else(|p| p.into_inner());
    let table = inst.table();
    let rr = match inst.replica_ports(addr) {
        None => {
            let binding = ftnet_io::Binding::resolve(&shared.tun, addr)
                .map_err(|e| format!("routing to replica {addr}: {e}"))?;
            ftnet_io::ReplicaRules::new(table, binding, ports, &inst.devs())
        }
        Some((dev, have)) => {
            let lacking: Vec<u16> = ports
                .iter()
                .copied()
                .filter(|p| !have.contains(p))
                .collect();
            if lacking.is_empty() {
                return Ok(());
            }
            let binding = ftnet_io::Binding {
                replica: addr,
                dev,
                via: None,
            };
            ftnet_io::ReplicaRules::more_ports(table, binding, &lacking)
        }
    };
    inst.add_replica(&rr)
        .map_err(|e| format!("routing replica {addr}'s replies into the TUN: {e:#}"))?;
    shared
        .known
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(addr);
    Ok(())
}

/// One operator request from the status socket (root only: the socket is
/// created by root in a root-owned directory). Answers JSON with `ok`.
fn admin_request(shared: &Shared, req: &str) -> serde_json::Value {
    let words: Vec<&str> = req.split_whitespace().collect();
    match words.as_slice() {
        ["drain", secs] => {
            let Some(secs) = secs
                .parse::<u64>()
                .ok()
                .filter(|&s| (1..=86_400).contains(&s))
            else {
                return serde_json::json!({"ok": false, "error": format!("{secs:?} is not a deadline in seconds (1 to 86400)")});
            };
            let now = std::time::Instant::now();
            let open = {
                let mut r = shared.lock();
                r.set_draining(true);
                r.open_connections()
            };
            let mut d = shared.drain.lock().unwrap_or_else(|p| p.into_inner());
            let since = d.map_or(now, |x| x.0);
            *d = Some((since, now + Duration::from_secs(secs)));
            warn!(
                connections = open,
                deadline_s = secs,
                "draining (operator: `ftnet drain`): no new connections — their SYNs are dropped, so that clients retry and reach a standby router once it took the addresses over; {open} connection(s) open go on; the router stops when the last one closes, or in {secs} s"
            );
            serde_json::json!({"ok": true, "open_connections": open, "deadline_s": secs,
                "note": format!("draining: no new connections; {open} connection(s) open; the router stops when the last one closes, or in {secs} s (`ftnet status` shows the drain)")})
        }
        ["replica", "enable", addr, rest @ ..] if rest.len() <= 1 => {
            let Ok(addr) = addr.parse::<std::net::Ipv4Addr>() else {
                return serde_json::json!({"ok": false, "error": format!("{addr:?} is not an IPv4 address")});
            };
            let service = rest.first().copied();
            let now = shared.now();
            let (back, joins) = {
                let mut r = shared.lock();
                let known = r
                    .config()
                    .services
                    .iter()
                    .any(|s| s.replicas.contains(&addr) && service.is_none_or(|n| n == s.name));
                if !known {
                    return serde_json::json!({"ok": false, "error": format!("no service{} lists replica {addr}", service.map(|n| format!(" named {n:?}")).unwrap_or_default())});
                }
                let follows = |replicas: &[std::net::Ipv4Addr]| {
                    shared
                        .registry
                        .get()
                        .is_some_and(|g| g.follows_order(replicas))
                };
                let (enable, must_join) = enable_plan(&r, addr, service, follows);
                let mut back = Vec::new();
                for name in &enable {
                    back.extend(r.enable_replica(addr, Some(name)));
                }
                let joins: Vec<(String, Result<u64, String>)> = must_join
                    .into_iter()
                    .map(|name| {
                        let res = r.join_replica(now, &name, addr).map_err(|e| e.to_string());
                        (name, res)
                    })
                    .collect();
                (back, joins)
            };
            shared.kick();
            if !back.is_empty() {
                warn!(replica = %addr, services = %back.join(", "), "operator brought the replica back into service (`ftnet replica enable`); its server must hold the group's state");
            }
            for (name, res) in &joins {
                match res {
                    Ok(join) => {
                        warn!(replica = %addr, service = %name, join, "operator asked the replica back (`ftnet replica enable`): it missed input while out, so it joins with the group's state (proof: equal digests) instead")
                    }
                    Err(e) => {
                        warn!(replica = %addr, service = %name, "operator asked the replica back (`ftnet replica enable`): it missed input while out and can only come back by a join, which cannot start: {e}")
                    }
                }
            }
            let joining: Vec<serde_json::Value> = joins
                .iter()
                .map(|(name, res)| match res {
                    Ok(j) => serde_json::json!({"service": name, "join": j}),
                    Err(e) => serde_json::json!({"service": name, "error": e}),
                })
                .collect();
            let failed: Vec<String> = joins
                .iter()
                .filter_map(|(name, res)| res.as_ref().err().map(|e| format!("{name}: {e}")))
                .collect();
            if back.is_empty() && joins.is_empty() {
                serde_json::json!({"ok": true, "enabled_in": back, "note": format!("replica {addr} was not out of service")})
            } else if back.is_empty() && !failed.is_empty() && failed.len() == joins.len() {
                serde_json::json!({"ok": false, "error": format!("replica {addr} missed input while out; it comes back only by a join (with the group's state, proven), which cannot start: {}", failed.join("; "))})
            } else {
                serde_json::json!({"ok": true, "enabled_in": back, "joining": joining})
            }
        }
        ["replica", "join", addr, rest @ ..] if rest.len() <= 1 => {
            let Ok(addr) = addr.parse::<std::net::Ipv4Addr>() else {
                return serde_json::json!({"ok": false, "error": format!("{addr:?} is not an IPv4 address")});
            };
            let service = match rest.first() {
                Some(s) => s.to_string(),
                None => match only_service(shared, addr, false) {
                    Ok(s) => s,
                    Err(e) => return serde_json::json!({"ok": false, "error": e}),
                },
            };
            let now = shared.now();
            let res = shared.lock().join_replica(now, &service, addr);
            shared.kick();
            match res {
                Ok(join) => {
                    serde_json::json!({"ok": true, "service": service, "join": join, "note": "joining: `ftnet status` and the router's log say when it serves"})
                }
                Err(e) => serde_json::json!({"ok": false, "error": e.to_string()}),
            }
        }
        ["replica", verb @ ("add" | "remove" | "drain"), addr, rest @ ..] if rest.len() <= 1 => {
            let Ok(addr) = addr.parse::<std::net::Ipv4Addr>() else {
                return serde_json::json!({"ok": false, "error": format!("{addr:?} is not an IPv4 address")});
            };
            let service = match rest.first() {
                Some(s) => s.to_string(),
                None => match only_service(shared, addr, *verb == "add") {
                    Ok(s) => s,
                    Err(e) => return serde_json::json!({"ok": false, "error": e}),
                },
            };
            let ordered = follows_order(shared, &service);
            let res = match *verb {
                "add" => add_replica(shared, &service, addr, ordered),
                "drain" if ordered => {
                    // Every replica holds every connection and, under the
                    // sequencer, the same state: no connection needs this
                    // one to finish. Kept on, it could not follow the
                    // order (it would miss the new connections' input), so
                    // it hands over now and leaves, like `remove`.
                    let now = shared.now();
                    let res = shared.lock().remove_replica(now, &service, addr);
                    match res {
                        Ok((left, kept)) => {
                            warn!(replica = %addr, service = %service, left_connections = left, "operator drained the replica (`ftnet replica drain`): the service's servers follow the input order, so the other replicas hold every connection and the group's state; it left its {left} connection(s) at once and is removed (`replica add` brings it back by a join)");
                            Ok(
                                serde_json::json!({"ok": true, "service": service, "connections": left, "left_connections": left, "stays_last_replica_in": kept, "removed": true, "note": "the service's servers follow the input order: the other replicas hold every connection and the group's state, so the replica handed its connections over at once and left (`replica add` brings it back with the group's state, by a join)"}),
                            )
                        }
                        Err(e) => Err(e.to_string()),
                    }
                }
                "remove" => {
                    let now = shared.now();
                    shared
                        .lock()
                        .remove_replica(now, &service, addr)
                        .map(|(left, kept)| serde_json::json!({"ok": true, "service": service, "left_connections": left, "stays_last_replica_in": kept}))
                        .map_err(|e| e.to_string())
                }
                _ => {
                    let now = shared.now();
                    shared
                        .lock()
                        .drain_replica(now, &service, addr)
                        .map(|n| serde_json::json!({"ok": true, "service": service, "connections": n}))
                        .map_err(|e| e.to_string())
                }
            };
            shared.kick();
            match res {
                Ok(v) => v,
                Err(e) => serde_json::json!({"ok": false, "error": e}),
            }
        }
        _ => {
            serde_json::json!({"ok": false, "error": format!("unknown request {req:?}; known: `replica enable ADDR [SERVICE]`, `replica add ADDR [SERVICE]`, `replica remove ADDR [SERVICE]`, `replica drain ADDR [SERVICE]`")})
        }
    }
}

/// `replica enable ADDR [SERVICE]`: the services where the operator's word
/// brings the replica back, and those where it comes back only by a join:
/// it is down there, missed input that lives on in another replica, and
/// the service's servers follow the input order (`follows`: `ftnet run`,
/// whose state a join can transfer and prove). Readmission only with
/// proof of state: a server there cannot hold the group's state again
/// unless it was brought to it.
fn enable_plan(
    r: &Router,
    addr: std::net::Ipv4Addr,
    service: Option<&str>,
    follows: impl Fn(&[std::net::Ipv4Addr]) -> bool,
) -> (Vec<String>, Vec<String>) {
    let needs = r.enable_needs_join(addr, service);
    let (enable, join): (Vec<_>, Vec<_>) = r
        .config()
        .services
        .iter()
        .filter(|s| s.replicas.contains(&addr) && service.is_none_or(|n| n == s.name))
        .partition(|s| !(needs.contains(&s.name) && follows(&s.replicas)));
    let names = |v: Vec<&ftnet_core::Service>| v.into_iter().map(|s| s.name.clone()).collect();
    (names(enable), names(join))
}

/// Whether service `service`'s servers follow the input order (`ftnet run`,
/// their agents said so): their state is in the servers, so a replica
/// added there serves only after a join, and one drained there leaves at
/// once (it could not follow the order without the new connections).
fn follows_order(shared: &Shared, service: &str) -> bool {
    let Some(reg) = shared.registry.get() else {
        return false;
    };
    let replicas: Vec<std::net::Ipv4Addr> = shared
        .lock()
        .config()
        .services
        .iter()
        .find(|s| s.name == service)
        .map(|s| s.replicas.clone())
        .unwrap_or_default();
    reg.follows_order(&replicas)
}

/// The one service a request about `addr` can mean when it names none:
/// the only service (for `add`), or the only one that lists the replica.
fn only_service(shared: &Shared, addr: std::net::Ipv4Addr, add: bool) -> Result<String, String> {
    let r = shared.lock();
    let names: Vec<String> = r
        .config()
        .services
        .iter()
        .filter(|s| add || s.replicas.contains(&addr))
        .map(|s| s.name.clone())
        .collect();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!("no service lists replica {addr}")),
        _ => Err(format!(
            "name the service: {} could be meant ({})",
            if add {
                "any service"
            } else {
                "more than one service"
            },
            names.join(", ")
        )),
    }
}

/// `replica add`: checked by the core first, then the replica's replies
/// are routed into the TUN (its rules recorded before they are installed),
/// then it becomes a member. Nothing is changed when a step fails.
/// Where the service's servers follow the input order (`ordered`), the
/// replica is added out of service and joins with the group's state
/// (proven by its digest) before it serves, with a fresh server: one
/// running there now holds a state (and connections) that are not the
/// group's, so the core asks its agent to end it (`AgentMsg::Restart`).
fn add_replica(
    shared: &Shared,
    service: &str,
    addr: std::net::Ipv4Addr,
    ordered: bool,
) -> Result<serde_json::Value, String> {
    let ports = {
        let r = shared.lock();
        r.check_add(service, addr).map_err(|e| e.to_string())?;
        r.config()
            .services
            .iter()
            .find(|s| s.name == service)
            .map(|s| s.ports.clone())
            .unwrap_or_default()
    };
    route_replica(shared, addr, &ports)?;
    let now = shared.now();
    if !ordered {
        shared
            .lock()
            .add_replica(now, service, addr)
            .map_err(|e| e.to_string())?;
        return Ok(
            serde_json::json!({"ok": true, "service": service, "note": "new connections use it (with agents, once its agent registered); its server must hold the service's state"}),
        );
    }
    shared
        .lock()
        .add_replica_to_join(now, service, addr)
        .map_err(|e| e.to_string())?;
    shared.kick();
    warn!(replica = %addr, service = %service, "operator added the replica (`ftnet replica add`): the service's servers follow the input order, so it serves only after joining with the group's state (proof: equal digests); a server already running there is ended by its agent (with --end-stale-servers) and the fresh one joins when it connects");
    Ok(
        serde_json::json!({"ok": true, "service": service, "joining": true, "note": "added out of service: it serves only after a join with the group's state. A server of it already following the order is ended by its agent (started with --end-stale-servers; its supervisor starts it again); a fresh server joins as soon as it connects to its agent. `ftnet status` and the router's log say when it serves"}),
    )
}

impl Drop for StatusSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftnet_core::{Config, Packet};
    use ftnet_io::MemDevice;

    /// Ask the status socket `req` as user and group 65534 (nobody,
    /// nogroup); what came back, or the error.
    fn ask_as_nobody(path: &Path, req: &str) -> String {
        let script = "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1])\nexcept OSError as e:\n print('refused', e.errno); sys.exit(0)\ns.sendall(sys.argv[2].encode()); s.shutdown(socket.SHUT_WR)\nprint(s.makefile().read().strip())";
        let out = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                // Debian's (a python3 earlier on root's PATH may be in a
                // directory nobody cannot enter).
                "/usr/bin/python3",
                "-c",
                script,
            ])
            .arg(path)
            .arg(req)
            .output()
            .expect("setpriv (util-linux) and python3 run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The status socket is root's (0600) unless `status_group` is set;
    /// then (0660) its members read the status, and an operator request
    /// from anyone but root is refused (the peer's credentials).
    #[test]
    fn the_status_socket_is_roots_unless_a_group_may_read_it() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(euid, 0, "this test runs as root, as the router does");
        let dir = std::env::temp_dir().join(format!("ftnet-status-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let snapshot = Arc::new(Mutex::new("{\"role\":\"active\"}".to_string()));
        // Root only.
        let p = dir.join("root.sock");
        let _root = StatusSocket::bind(&p, None, snapshot.clone()).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(ask_as_nobody(&p, "status"), "refused 13");
        // A group may read.
        let gid = crate::config::group_id("nogroup").expect("Debian's nogroup");
        let p = dir.join("group.sock");
        let _grp = StatusSocket::bind(&p, Some(&("nogroup".into(), gid)), snapshot).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.permissions().mode() & 0o777, m.gid()), (0o660, gid));
        assert_eq!(ask_as_nobody(&p, "status"), "{\"role\":\"active\"}");
        let no = ask_as_nobody(&p, "drain 5");
        assert!(no.contains("need root"), "{no}");
        // Root's request passes the check (this router is not serving yet).
        let mut c = std::os::unix::net::UnixStream::connect(&p).unwrap();
        c.write_all(b"drain 5").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = String::new();
        c.read_to_string(&mut back).unwrap();
        assert!(back.contains("still starting"), "{back}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `replica enable` of a down replica: a join where its servers follow
    /// the order (they missed input), the operator's word elsewhere (plain
    /// servers: the documented way back), and never a join for a service
    /// it is not down in.
    #[test]
    fn enable_joins_where_servers_follow_the_order() {
        let r1: std::net::Ipv4Addr = "198.18.11.2".parse().unwrap();
        let r2: std::net::Ipv4Addr = "198.18.12.2".parse().unwrap();
        let mut core = Config {
            sequencer: true,
            ..Default::default()
        };
        for (name, port) in [("kv", 6379), ("web", 80)] {
            core.services.push(ftnet_core::Service {
                name: name.into(),
                vip: "198.19.0.1".parse().unwrap(),
                ports: vec![port],
                replicas: vec![r1, r2],
                voting: Default::default(),
                stateless: false,
                ack: ftnet_core::Ack::All,
                delivery: Default::default(),
            });
        }
        let mut r = Router::new(core, [7; 16]);
        assert_eq!(r.replica_failed(ftnet_core::Instant::from_micros(1), r2), 2);
        let ordered = |reps: &[std::net::Ipv4Addr]| reps.len() == 2;
        assert_eq!(
            enable_plan(&r, r2, None, ordered),
            (vec![], vec!["kv".to_string(), "web".to_string()])
        );
        assert_eq!(
            enable_plan(&r, r2, Some("web"), |_| false),
            (vec!["web".to_string()], vec![]),
            "plain servers: the operator's word"
        );
        assert_eq!(
            enable_plan(&r, r1, None, ordered),
            (vec!["kv".to_string(), "web".to_string()], vec![]),
            "not down: nothing to join"
        );
    }

    fn shared() -> Shared {
        let cfg = crate::config::parse("t.toml", "[[service]]\nname = \"a\"\nvip = \"198.19.0.1\"\nports = [7]\nreplicas = [\"198.18.11.2\"]\n")
            .expect("test config");
        let core: Config = cfg.core;
        Shared {
            router: Mutex::new(Router::new(core, [7; 16])),
            started: std::time::Instant::now(),
            epoch_us: sys::epoch_micros(),
            snapshot: Arc::new(Mutex::new(String::new())),
            tun: "t".into(),
            kick: eventfd().expect("eventfd"),
            registry: OnceLock::new(),
            fault: None,
            instance: Mutex::new({
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Instance::lock(&format!("t{}-{n}", std::process::id()), 60_000 + n)
                    .expect("test locks")
                    .0
            }),
            known: Arc::default(),
            drain: Mutex::new(None),
            tun_dropped: std::sync::atomic::AtomicU64::new(u64::MAX),
            queues: Vec::new(),
        }
    }

    /// Due timers wait for another data-plane thread whose queue holds
    /// packets it has not read for a while, or that holds packets it read
    /// and the core has not had yet: a replica's answer may be there.
    #[test]
    fn timers_wait_for_a_lagging_queue() {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) writes two fds into the array it is given.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (rd, wr) = (fds[0], fds[1]);
        let mut sh = shared();
        sh.queues = vec![QueueState::new(-1), QueueState::new(rd)];
        std::thread::sleep(QUEUE_LAG * 2);
        assert!(!sh.queue_lags(0), "an empty queue lags nothing");
        // SAFETY: writes one byte from a live buffer to our pipe.
        assert_eq!(unsafe { libc::write(wr, [1u8].as_ptr().cast(), 1) }, 1);
        assert!(
            sh.queue_lags(0),
            "packets its thread has not read since long ago"
        );
        assert!(!sh.queue_lags(1), "a thread's own queue is its own to read");
        sh.queue_read(1);
        assert!(
            !sh.queue_lags(0),
            "its thread drained it just now: normal load"
        );
        std::thread::sleep(QUEUE_LAG * 2);
        assert!(sh.queue_lags(0));
        let mut b = [0u8; 1];
        // SAFETY: reads one byte into a live buffer from our pipe.
        assert_eq!(unsafe { libc::read(rd, b.as_mut_ptr().cast(), 1) }, 1);
        assert!(!sh.queue_lags(0));
        sh.queues[1]
            .in_hand
            .store(true, std::sync::atomic::Ordering::Release);
        assert!(sh.queue_lags(0), "packets read, waiting for the lock");
        // SAFETY: closing the two fds pipe(2) gave us, once.
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
    }

    #[test]
    fn pump_reads_one_batch_per_call() {
        let sh = shared();
        let mut dev = MemDevice::default();
        for _ in 0..BATCH + 5 {
            // Garbage is fine: the core must count and drop it.
            dev.rx.push_back(Packet::plain(vec![0x45, 0, 0]));
        }
        let mut buf = vec![0u8; RECV_BUF_LEN];
        let (mut batch, mut out) = (Vec::new(), Out::default());
        assert_eq!(
            pump(&mut dev, 0, &sh, &mut buf, &mut batch, &mut out),
            BATCH
        );
        assert_eq!(dev.rx.len(), 5);
        assert_eq!(sh.lock().counters().packets_in, BATCH as u64);
        assert_eq!(pump(&mut dev, 0, &sh, &mut buf, &mut batch, &mut out), 5);
        assert_eq!(pump(&mut dev, 0, &sh, &mut buf, &mut batch, &mut out), 0);
    }

    /// A SYN to the VIP must come out again, addressed to the replica, and a
    /// failing device must be counted rather than stop the loop.
    #[test]
    fn pump_forwards_and_survives_send_errors() {
        let sh = shared();
        let mut dev = MemDevice::default();
        dev.rx.push_back(Packet::plain(syn(
            [198, 18, 1, 2],
            [198, 19, 0, 1],
            40000,
            7,
        )));
        let mut buf = vec![0u8; RECV_BUF_LEN];
        let (mut batch, mut out) = (Vec::new(), Out::default());
        pump(&mut dev, 0, &sh, &mut buf, &mut batch, &mut out);
        assert_eq!(out.write_errors, 0);
        assert!(
            dev.tx
                .iter()
                .any(|p| p.data.len() >= 20 && p.data[16..20] == [198, 18, 11, 2]),
            "no packet to the replica: {:?}",
            dev.tx
        );

        dev.fail_sends = Some(std::io::ErrorKind::Other);
        dev.rx.push_back(Packet::plain(syn(
            [198, 18, 1, 2],
            [198, 19, 0, 1],
            40001,
            7,
        )));
        pump(&mut dev, 0, &sh, &mut buf, &mut batch, &mut out);
        assert!(out.write_errors >= 1, "send failure not counted");
    }

    /// A minimal TCP SYN with valid IPv4 and TCP checksums.
    fn syn(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        use ftnet_wire::checksum;
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&40u16.to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        let c = checksum::complete(&p[..20], 0);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p[24..28].copy_from_slice(&1000u32.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = 0x02; // SYN
        p[34..36].copy_from_slice(&65535u16.to_be_bytes());
        let ph = checksum::pseudo_header(src.into(), dst.into(), 6, 20);
        let c = checksum::complete(&p[20..], ph);
        p[36..38].copy_from_slice(&c.to_be_bytes());
        p
    }
}
