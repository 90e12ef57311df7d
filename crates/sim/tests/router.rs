//! The ftnet router between real TCP endpoints (smoltcp), through faulty
//! links, with replica crashes. Every run checks the invariants listed in
//! `ftnet_sim` (exact echo, identical input at surviving replicas, no hang,
//! no reset, clean counters, eviction of crashed replicas).
//!
//! Quick: `cargo test --release -p ftnet-sim --test router`.
//! More seeds: `FTNET_SIM_SEEDS=2000 cargo test --release -p ftnet-sim --test router seed_loop`.
//! One seed, with a packet trace and a capture:
//! `FTNET_SIM_SEED=1234 FTNET_SIM_TRACE=1 FTNET_SIM_PCAP=/tmp/s.pcap cargo test --release -p ftnet-sim --test router seed_loop -- --nocapture`.

use ftnet_core::{Event, EvictReason, Tie, Voting};
use ftnet_sim::{
    run, Close, Crash, CrashKind, CrashWhen, Desync, Inject, JoinAttempt, JoinLeave, JoinPlan,
    MemberChange, MemberOp, Mode, NetParams, Params, Takeover, INCONCLUSIVE,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant as WallClock;

fn repro(seed: u64) -> String {
    format!("reproduce: FTNET_SIM_SEED={seed} FTNET_SIM_TRACE=1 cargo test --release -p ftnet-sim --test router seed_loop -- --nocapture")
}

/// The same seed, network, stacks and workload without the router (one
/// replica, no crash). Its packet fates differ (fewer links, other packet
/// counts), so `ok` here does not clear the router, and a failure here
/// points at the stacks or the harness; the classifications rest on the
/// mechanism each names, checked packet by packet.
fn direct(seed: u64) -> String {
    let mut d = Params::random(seed);
    d.mode = Mode::Direct;
    d.replicas = 1;
    d.replica.truncate(1);
    d.crash = None;
    match run(seed, &d) {
        Ok(_) => "ok".to_string(),
        Err(e) => e.lines().next().unwrap_or("").to_string(),
    }
}

/// The fixed tests' lossy network: loss, duplication and reordering on
/// every link.
fn lossy() -> NetParams {
    NetParams {
        delay_us: (50, 400),
        loss: 0.03,
        dup: 0.01,
        reorder: 0.05,
        reorder_max_us: 1500,
    }
}

fn check(seed: u64, p: &Params) {
    if let Err(e) = run(seed, p) {
        panic!("{e}\n(fixed-params test; the params are in the test source)");
    }
}

#[test]
fn one_replica_perfect() {
    check(1, &Params::basic(1));
}

#[test]
fn two_replicas_perfect() {
    check(2, &Params::basic(2));
}

#[test]
fn three_replicas_perfect() {
    check(3, &Params::basic(3));
}

#[test]
fn concurrent_connections() {
    check(
        4,
        &Params {
            conns: 4,
            bytes_per_conn: 30_000,
            ..Params::basic(3)
        },
    );
}

#[test]
fn client_close_reaches_every_replica() {
    for (seed, close) in [(5, Close::AfterEcho), (6, Close::AfterSend)] {
        check(
            seed,
            &Params {
                close,
                conns: 2,
                ..Params::basic(3)
            },
        );
    }
}

#[test]
fn lossy_network() {
    let net = lossy();
    // Loss on the replica links: smoltcp answers the router's liveness
    // probes at most once a second (see `Params::fd_for`).
    check(
        7,
        &Params {
            failure_detection_ms: Params::fd_for(&net),
            net,
            ..Params::basic(3)
        },
    );
}

#[test]
fn silent_crash_mid_transfer() {
    let crash = Some(Crash {
        replica: 1,
        kind: CrashKind::Silent,
        when: CrashWhen::AtProgress(0.3),
    });
    check(
        8,
        &Params {
            crash,
            ..Params::basic(3)
        },
    );
}

#[test]
fn abort_crash_mid_transfer() {
    let crash = Some(Crash {
        replica: 0,
        kind: CrashKind::Abort,
        when: CrashWhen::AtProgress(0.5),
    });
    check(
        9,
        &Params {
            crash,
            close: Close::AfterEcho,
            ..Params::basic(2)
        },
    );
}

/// The server process of one replica exits (`kill -9` of the server, its
/// kernel alive): its connections close with a FIN where the client's
/// stream does not end (or a RST where input waits), later input draws a
/// RST. The client never sees that FIN; the replica leaves the connection
/// and the others serve it to the end.
#[test]
fn a_server_that_exits_mid_transfer_leaves_the_connection() {
    for (seed, replicas, at, net) in [
        (12, 3, 0.5, NetParams::perfect()),
        (15, 2, 0.3, lossy()),
        // (Seed 14 until smoltcp took a segment's sequence number before
        // its ACK field, vendor/README.md fix 5, and 16 until the router
        // passed on one duplicate ACK per client segment: each time its
        // server then exited after the others had served the stream, no
        // longer needed.)
        (17, 3, 0.7, lossy()),
    ] {
        let crash = Some(Crash {
            replica: 1,
            kind: CrashKind::Close,
            when: CrashWhen::AtProgress(at),
        });
        // On the lossy link, the seed loop's detection time for lossy runs
        // (a replica waiting for a lost segment is not taken for dead).
        let failure_detection_ms = if net.loss > 0.0 { 2500 } else { 100 };
        let p = Params {
            crash,
            net,
            close: Close::AfterEcho,
            failure_detection_ms,
            ..Params::basic(replicas)
        };
        let r = run(seed, &p).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(
            r.crashed,
            Some((1, true)),
            "seed {seed}: the server exited while needed"
        );
        let left: Vec<&EvictReason> = r
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Evicted {
                    replica, reason, ..
                } if *replica == ip(1) => Some(reason),
                _ => None,
            })
            .collect();
        assert!(
            left.iter()
                .all(|r| matches!(r, EvictReason::Fin | EvictReason::Reset))
                && !left.is_empty(),
            "seed {seed}: the exited server's replica leaves for its FIN or RST: {left:?}"
        );
    }
}

#[test]
fn crash_during_handshake() {
    for (seed, kind) in [(10, CrashKind::Silent), (11, CrashKind::Abort)] {
        let crash = Some(Crash {
            replica: 1,
            kind,
            when: CrashWhen::AtTime(150),
        });
        check(
            seed,
            &Params {
                crash,
                ..Params::basic(3)
            },
        );
    }
}

/// A connection that every replica refuses (RST to the SYN: nobody
/// listens on that port) is refused to its client, and is no evidence
/// against any replica: the other connections keep all their replicas.
/// Consistent RSTs from all replicas are the application's answer, not a
/// crash (COSCANet-FT §III-D says a RST from one replica *alone*).
#[test]
fn connection_refused_by_every_replica() {
    check(
        12,
        &Params {
            refused_conns: 1,
            conns: 2,
            ..Params::basic(3)
        },
    );
}

fn voted(tie: Tie, p: Params) -> Params {
    Params {
        voting: Voting::Majority { tie },
        ..p
    }
}

/// Output voting with healthy replicas changes nothing the client sees,
/// on a clean and on a lossy network.
#[test]
fn voting_with_healthy_replicas() {
    check(20, &voted(Tie::First, Params::basic(3)));
    check(
        21,
        &voted(
            Tie::Reset,
            Params {
                conns: 3,
                close: Close::AfterEcho,
                ..Params::basic(2)
            },
        ),
    );
    let net = lossy();
    check(
        22,
        &voted(
            Tie::First,
            Params {
                failure_detection_ms: Params::fd_for(&net),
                net,
                ..Params::basic(3)
            },
        ),
    );
}

fn diverged_at(events: &[Event], replica: usize) -> Vec<u32> {
    let ip = format!("198.18.{}.2", 10 + replica);
    events
        .iter()
        .filter_map(|e| match e {
            Event::Diverged {
                replica, offset, ..
            } if replica.to_string() == ip => Some(*offset),
            _ => None,
        })
        .collect()
}

/// One replica of three alters one byte of its replies: the vote names it
/// at exactly that offset and evicts it before the client sees the byte
/// (the run's exact-echo invariant), and the other two carry on.
#[test]
fn voting_evicts_a_divergent_replica() {
    let p = Params {
        conns: 2,
        ..Params::basic(3)
    }
    .with_divergent(Tie::Reset, 2, 12_345);
    let r = run(23, &p).unwrap_or_else(|e| panic!("{e}"));
    let at = diverged_at(&r.events, 2);
    assert_eq!(at.first(), Some(&12_345), "events: {:?}", r.events);
    assert!(r.events.iter().any(|e| matches!(
        e,
        Event::Evicted {
            reason: EvictReason::Diverged,
            remaining: 2,
            ..
        }
    )));
    assert!(r.counters.unwrap().divergences >= 1);
}

/// The same with a crash of a healthy replica: two remain, one divergent,
/// no majority; `tie = first` keeps the replica listed first.
#[test]
fn voting_tie_goes_to_the_first_replica() {
    let crash = Some(Crash {
        replica: 0,
        kind: CrashKind::Abort,
        when: CrashWhen::AtProgress(0.2),
    });
    let p = Params {
        crash,
        ..Params::basic(3)
    }
    .with_divergent(Tie::First, 2, 40_000);
    let r = run(24, &p).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(diverged_at(&r.events, 2), vec![40_000]);
    let p = Params::basic(2).with_divergent(Tie::First, 1, 777);
    let r = run(25, &p).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(diverged_at(&r.events, 1), vec![777]);
}

/// At N = 2 with `tie = reset` the client is reset rather than sent a
/// byte that no majority vouched for.
#[test]
fn voting_tie_reset_resets_the_client() {
    let p = Params::basic(2).with_divergent(Tie::Reset, 1, 777);
    let e = run(26, &p).expect_err("a tie under `reset` must reset the client");
    // The run stops at the first eviction of the healthy replica (an
    // invariant of healthy runs); by then the client had no byte past the
    // disputed one.
    assert!(e.contains("evicted (Diverged)"), "{e}");
    let echoed: usize = e
        .split("echoed ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no client line in: {e}"));
    assert!(echoed <= 777, "the client got {echoed} bytes: {e}");
}

/// Self-test of the checker, and the case for the output policy
/// `primary`: replica 2 alters one byte of its echo. With `fastest` its
/// copy goes to the client whenever it is first, and the checker reports
/// the altered byte (the client's echo differs); with `primary` (the client follows
/// replica 0) the same seeds all pass: the byte never reaches the client,
/// and no healthy replica is blamed.
#[test]
fn a_divergent_replica_splices_under_fastest_never_under_primary() {
    let mut base = Params::basic(3).with_divergent(Tie::First, 2, 12_345);
    // Links of different lengths: replica 2 is first on some seeds.
    base.net.delay_us = (50, 400);
    let mut fastest = base.clone();
    fastest.voting = Voting::Fastest;
    let mut primary = base;
    primary.voting = Voting::Primary;
    let spliced = (0..16)
        .filter(|&s| run(s, &fastest).is_err_and(|e| e.contains("echo differs")))
        .count();
    assert!(
        spliced > 0,
        "the checker never saw the altered byte reach the client"
    );
    for s in 0..16 {
        if let Err(e) = run(s, &primary) {
            panic!("seed {s} under primary: {e}");
        }
    }
}

fn with_takeover(at: f64, outage_us: u64, p: Params) -> Params {
    Params {
        takeover: Some(Takeover {
            at,
            outage_us,
            again: None,
        }),
        ..p
    }
}

/// The router is killed mid-transfer and a fresh one (another secret, an
/// empty table, the same clock) takes over after an outage: it adopts the
/// connections from the agents' records, learns every replica's position
/// from a probe, and the client's stream carries on exact, without a
/// reset, on a clean and on a lossy network, with a replica crash too.
#[test]
fn router_takeover_mid_transfer() {
    for (seed, n) in [(30, 1), (31, 2), (32, 3)] {
        let p = with_takeover(
            0.4,
            300_000,
            Params {
                close: Close::AfterEcho,
                conns: 2,
                ..Params::basic(n)
            },
        );
        let r = run(seed, &p).unwrap_or_else(|e| panic!("N={n}: {e}"));
        let c = r.counters.unwrap();
        assert_eq!(c.connections_adopted, 2, "N={n}: {c:?}");
        assert_eq!(c.connections_rebuilt, 2, "N={n}: {c:?}");
    }
    let net = lossy();
    check(
        33,
        &with_takeover(
            0.5,
            150_000,
            Params {
                failure_detection_ms: Params::fd_for(&net),
                net,
                ..Params::basic(3)
            },
        ),
    );
    let crash = Some(Crash {
        replica: 2,
        kind: CrashKind::Abort,
        when: CrashWhen::AtProgress(0.6),
    });
    check(
        34,
        &with_takeover(
            0.3,
            200_000,
            Params {
                crash,
                ..Params::basic(3)
            },
        ),
    );
}

/// Killed after the client got its SYN-ACK and before its first data: the
/// record was already with the agents, the client's data reaches the new
/// router, which adopts the connection and carries on.
#[test]
fn router_takeover_between_synack_and_data() {
    let r =
        run(35, &with_takeover(0.0, 200_000, Params::basic(3))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.counters.unwrap().connections_adopted, 1);
}

/// A thousand seeds, each drawing N, faults, stack settings, workload and
/// crash from the seed. Count: `FTNET_SIM_SEEDS` (default 1000, a few
/// seconds in release mode); first seed: `FTNET_SIM_SEED_BASE`; a single
/// seed: `FTNET_SIM_SEED`; the router's failure-detection timeout:
/// `FTNET_SIM_FD_MS` (default: per run, `Params::fd_for` — 100 ms, the
/// product default, on loss-free networks, more with loss or reordering,
/// where a replica waiting for a lost segment discards reordered data and
/// can look silent). Runs that end in a documented smoltcp defect are counted as
/// inconclusive, each with the evidence for it; they must stay at or under
/// 0.1 % (one in a run of up to 1,000 seeds).
/// `FTNET_SIM_JOIN_ONLY=1` runs only the seeds with a join plan; the loop
/// prints what became of the joins.
#[test]
fn seed_loop() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match env("FTNET_SIM_SEED") {
        Some(s) => vec![s],
        None => {
            let base = env("FTNET_SIM_SEED_BASE").unwrap_or(0);
            (base..base + env("FTNET_SIM_SEEDS").unwrap_or(1000)).collect()
        }
    };
    // `FTNET_SIM_JOIN_ONLY=1`: only the seeds with a join plan.
    let join_only = env("FTNET_SIM_JOIN_ONLY") == Some(1);
    let start = WallClock::now();
    let mut failures = Vec::new();
    let mut inconclusive = Vec::new();
    let mut join_seeds = 0;
    let mut ran = 0usize;
    // Attempts whose agents answered the truth that joined, that failed;
    // attempts the router had to refuse (it did: the run checks it); of all
    // of them, the router's own retries.
    let mut joins = (0, 0, 0, 0);
    let mut join_failed_why: Vec<(u64, String)> = Vec::new();
    for &seed in &seeds {
        let mut p = Params::random(seed);
        if join_only && p.join.is_none() {
            continue;
        }
        ran += 1;
        join_seeds += usize::from(p.join.is_some());
        if let Some(ms) = env("FTNET_SIM_FD_MS") {
            p.failure_detection_ms = ms;
        }
        if seeds.len() == 1 {
            eprintln!("params: {}", p.summary());
        }
        let out = catch_unwind(AssertUnwindSafe(|| run(seed, &p)));
        match out {
            Ok(Ok(r)) => {
                for o in &r.joins {
                    joins.3 += usize::from(o.retry);
                    match (o.honest, &o.result) {
                        (true, Ok(_)) => joins.0 += 1,
                        (true, Err(why)) => {
                            joins.1 += 1;
                            join_failed_why.push((seed, why.clone()));
                        }
                        (false, _) => joins.2 += 1,
                    }
                }
                if seeds.len() == 1 {
                    eprintln!(
                        "seed {seed} ok: {} us virtual, {} packets, events {:?}",
                        r.virtual_us, r.packets_sent, r.events
                    );
                }
            }
            Ok(Err(e)) if e.contains(INCONCLUSIVE) => inconclusive.push((seed, e)),
            Ok(Err(e)) => failures.push((seed, e)),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push((
                    seed,
                    format!("seed {seed}: PANIC: {msg}\n  params: {}\n", p.summary()),
                ));
            }
        }
    }
    for (seed, e) in &inconclusive {
        eprintln!(
            "SKIPPED seed {seed} (smoltcp defect, not the router): {}\n  direct mode: {}\n  {}",
            e.lines().next().unwrap_or(""),
            direct(*seed),
            repro(*seed)
        );
    }
    for (seed, e) in &failures {
        eprintln!(
            "FAILED {e}  direct mode: {}\n  {}\n",
            direct(*seed),
            repro(*seed)
        );
    }
    eprintln!(
        "seed loop: {ran} seeds, {} failed, {} inconclusive, {:.1} s wall",
        failures.len(),
        inconclusive.len(),
        start.elapsed().as_secs_f64()
    );
    // A join whose agents answer the truth fails only on a lossy network,
    // when the service did not come to rest in time (the run checks that).
    eprintln!(
        "joins: {join_seeds} seeds with a join plan; in the runs that passed: {} joined, {} failed although the agents answered the truth, {} refused as the agents' answers called for; {} of these attempts were the router's own retries",
        joins.0, joins.1, joins.2, joins.3
    );
    for (seed, why) in join_failed_why.iter().take(10) {
        eprintln!("  join with true answers failed, seed {seed}: {why}");
    }
    let first: Vec<String> = failures
        .iter()
        .take(30)
        .map(|(s, e)| format!("{s}: {}", e.lines().next().unwrap_or("")))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {ran} seeds failed through the router:\n{}",
        failures.len(),
        first.join("\n")
    );
    assert!(
        inconclusive.len() * 1000 <= ran.max(1000),
        "{} of {ran} seeds hit a smoltcp defect: more than 0.1 %, too many to trust the loop",
        inconclusive.len(),
    );
}

/// The sequencer's order carries over a takeover. Each agent's writer lags
/// its own few events behind in the simulation (never behind what its
/// server read: the shim's rule), and the links' delays vary, so at the
/// kill the agents stand at different numbers: the new router holds its events until every
/// agent reported, replays to the ones behind what they missed and numbers
/// on from the highest. Invariant 6 checks every agent's numbers and the
/// merged order in each run; here, also that the order resumed after the
/// old router's numbers and that some runs needed replays.
#[test]
fn router_takeover_continues_the_input_order() {
    let mut replayed = 0;
    for seed in 40..48 {
        let p = with_takeover(
            0.4,
            200_000,
            Params {
                conns: 4,
                net: NetParams {
                    delay_us: (50, 2000),
                    ..NetParams::perfect()
                },
                ..Params::basic(3)
            },
        );
        let r = run(seed, &p).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let resumed: Vec<(u64, usize, usize)> = r
            .events
            .iter()
            .filter_map(|e| match e {
                Event::OrderResumed {
                    last,
                    replayed,
                    missing,
                    ..
                } => Some((*last, *replayed, missing.len())),
                _ => None,
            })
            .collect();
        assert_eq!(resumed.len(), 1, "seed {seed}: {resumed:?}");
        let (last, rp, missing) = resumed[0];
        assert!(last > 0, "seed {seed}: the old router's numbers were lost");
        assert_eq!(missing, 0, "seed {seed}: every agent reports");
        replayed += rp;
    }
    assert!(
        replayed > 0,
        "no agent was behind at any takeover: replays untested"
    );
}

/// A chunk dies with the router: the router that dies numbered a client
/// segment (here the last one of the stream) and forwarded it, its agents'
/// writers had not passed the chunk on yet, and the replicas hold the bytes
/// behind a hole (a segment lost on their link). After the takeover the
/// client's retransmissions fill the hole, the replicas acknowledge every
/// byte, and the client's own repeat of that last segment is lost: it never
/// reaches the new router, and the client has no reason to send it again.
/// The replicas' acknowledgment must announce those bytes (invariant 6: the
/// chunks the agents saw end at the end of the client's stream; before the
/// fix they ended one segment short).
#[test]
fn router_takeover_announces_acknowledged_bytes_again() {
    // (seed, replicas, connections, takeover point), found by a search over
    // seeds with this network and workload.
    let mut inconclusive = Vec::new();
    for (seed, n, conns, at) in [
        (34, 2, 2, 0.05),
        (10195, 2, 2, 0.26),
        (11486, 3, 1, 0.26),
        (29351, 3, 1, 0.11),
    ] {
        let net = NetParams {
            delay_us: (50, 400),
            loss: 0.04,
            dup: 0.0,
            reorder: 0.0,
            reorder_max_us: 0,
        };
        let p = with_takeover(
            at,
            150_000,
            Params {
                failure_detection_ms: Params::fd_for(&net),
                net,
                conns,
                bytes_per_conn: 13_111,
                close: Close::AfterEcho,
                ..Params::basic(n)
            },
        );
        match run(seed, &p) {
            Ok(_) => {}
            // The router's own packets after a rebuild (its prompts) move
            // the seeded losses: a seed may now end in a smoltcp defect
            // before the path it was found for (10195 since the prompts).
            Err(e) if e.contains(INCONCLUSIVE) => inconclusive.push(seed),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    assert!(inconclusive.len() <= 1, "inconclusive: {inconclusive:?}");
}

/// The seeds of a 20,000-seed loop that broke invariant 6 across a
/// takeover. In each, a connection had closed before the router died
/// while its last chunks were still in the lagging agents' writers, so
/// no agent ever got them and no record was left to rebuild from. The
/// shim makes that impossible (a server reads only bytes whose chunk its
/// agent passed on, so it cannot echo them and close); the simulated
/// agents now stand at least at what their servers read.
#[test]
fn router_takeover_seeds_that_broke_the_input_order() {
    let mut conclusive = 0;
    for seed in [3518, 8504, 8635, 9865, 11573, 13214, 19861] {
        let p = Params::random(seed);
        assert!(p.takeover.is_some(), "seed {seed}: {}", p.summary());
        match run(seed, &p) {
            Ok(_) => conclusive += 1,
            // The clock ticks in the order moved these runs' timing: a
            // run smoltcp's defect leaves inconclusive checks nothing.
            Err(e) if e.contains(INCONCLUSIVE) => eprintln!("seed {seed}: {e}"),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    assert!(conclusive >= 5, "only {conclusive} of 7 seeds conclusive");
}

/// The servers close connections on their own, as Redis does with a client
/// that sent a malformed request (issue 13, item 5): they read the first
/// 10,000 bytes, echo them and close, while the client keeps sending; each
/// replica's kernel resets the connection when it finds more input, each at
/// its own time (the links' delays differ). The client's window stays open
/// as long as a replica that has not closed yet still reads, so the router
/// numbers more of its bytes after the first reset. The order is numbered
/// per service, so every replica must still get every number, also of the
/// connection it already reset: before the fix those went only to the
/// replicas still in the connection, the one that reset first found a hole
/// (its shim gives up ordering: "hole in the router's order"). Nobody is
/// marked down for it, and the other connections carry on alongside.
#[test]
fn servers_closing_connections_leave_no_hole_in_the_order() {
    for (seed, n) in [(60, 2), (62, 2), (63, 3), (64, 3), (65, 3)] {
        let mut p = Params {
            conns: 3,
            bytes_per_conn: 30_000,
            net: NetParams {
                delay_us: (50, 2000),
                ..NetParams::perfect()
            },
            desync: Some(Desync {
                conns: 3,
                at: 10_000,
            }),
            ..Params::basic(n)
        };
        for r in &mut p.replica {
            r.rx_buf = 4096;
        }
        run(seed, &p).unwrap_or_else(|e| panic!("seed {seed}, N={n}: {e}"));
    }
}

fn change(at: f64, replica: usize, op: MemberOp, late_us: Option<u64>) -> MemberChange {
    MemberChange {
        at,
        replica,
        op,
        late_conn_after_us: late_us,
    }
}

/// Two connections that close after their echo; membership changes on top.
fn member_base(n: usize) -> Params {
    Params {
        conns: 2,
        bytes_per_conn: 40_000,
        close: Close::AfterEcho,
        ..Params::basic(n)
    }
}

fn member_events(r: &ftnet_sim::Report) -> Vec<&Event> {
    r.events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::ReplicaDraining { .. }
                    | Event::ReplicaDrained { .. }
                    | Event::ReplicaRemoved { .. }
                    | Event::ReplicaAdded { .. }
                    | Event::ReplicaUp { .. }
                    | Event::Evicted {
                        reason: EvictReason::Removed,
                        ..
                    }
            )
        })
        .collect()
}

fn ip(i: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(198, 18, 10 + i, 2)
}

/// Drain: replica 2 gets no connection opened after the call (a late one
/// opens 300 µs after it), stays in the two it had until they close (no
/// eviction, whole streams), and is announced drained once they did.
/// (No input reaches it after the late connection opened, so its order
/// has no hole; see `membership_sequencer_hole_is_reported`.)
#[test]
fn membership_drain() {
    let p =
        member_base(3).with_membership(false, vec![change(0.999, 2, MemberOp::Drain, Some(300))]);
    let r = run(70, &p).unwrap_or_else(|e| panic!("{e}"));
    let ev = member_events(&r);
    assert!(
        matches!(ev.first(), Some(Event::ReplicaDraining { replica, connections: 2, .. }) if *replica == ip(2)),
        "{ev:?}"
    );
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::ReplicaDrained { replica, .. } if *replica == ip(2))),
        "{ev:?}"
    );
}

/// Drain, then enable: connections opened while it drained go without it,
/// the one opened after the enable has it again (the start invariant
/// checks both directions). On a lossy network too.
#[test]
fn membership_drain_then_enable() {
    for (seed, net) in [(71, NetParams::perfect()), (72, lossy())] {
        let mut p = member_base(3).with_membership(
            false,
            vec![
                change(0.2, 1, MemberOp::Drain, Some(200)),
                change(0.6, 1, MemberOp::Enable, Some(200)),
            ],
        );
        p.failure_detection_ms = Params::fd_for(&net);
        p.net = net;
        let r = run(seed, &p).unwrap_or_else(|e| panic!("{e}"));
        let ev = member_events(&r);
        assert!(
            matches!(ev.as_slice(), [Event::ReplicaDraining { .. }, Event::ReplicaUp { replica, .. }, ..] if *replica == ip(1)),
            "seed {seed}: {ev:?}"
        );
    }
}

/// Remove: replica 1 leaves both connections at once (evicted as
/// `Removed`, which is no healthy-replica eviction), gets nothing but the
/// eviction RSTs afterwards, and no connection opened after the call; the
/// other two carry every stream to its end.
#[test]
fn membership_remove() {
    for (seed, net) in [(73, NetParams::perfect()), (74, lossy())] {
        let mut p = member_base(3)
            .with_membership(false, vec![change(0.4, 1, MemberOp::Remove, Some(500))]);
        p.failure_detection_ms = Params::fd_for(&net);
        p.net = net;
        let r = run(seed, &p).unwrap_or_else(|e| panic!("{e}"));
        let ev = member_events(&r);
        let evicted = ev
            .iter()
            .filter(|e| matches!(e, Event::Evicted { replica, .. } if *replica == ip(1)))
            .count();
        assert_eq!(evicted, 2, "seed {seed}: {ev:?}");
        assert!(
            ev.iter().any(|e| matches!(e, Event::ReplicaRemoved { replica, left: 2, kept: 0, .. } if *replica == ip(1))),
            "seed {seed}: {ev:?}"
        );
    }
}

/// Remove, then add back (a stale replica rejoins: its server kept its old
/// sockets, its agent starts afresh): it gets only the connections whose
/// SYN the router forwarded after the add, and those whole.
#[test]
fn membership_remove_and_rejoin() {
    let p = member_base(3).with_membership(
        false,
        vec![
            change(0.3, 2, MemberOp::Remove, Some(100)),
            change(0.7, 2, MemberOp::Add, Some(400)),
        ],
    );
    let r = run(75, &p).unwrap_or_else(|e| panic!("{e}"));
    let ev = member_events(&r);
    let kinds: Vec<&str> = ev
        .iter()
        .map(|e| match e {
            Event::ReplicaRemoved { .. } => "removed",
            Event::ReplicaAdded { .. } => "added",
            Event::Evicted { .. } => "evicted",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["evicted", "evicted", "removed", "added"], "{ev:?}");
}

/// A spare not in the configuration joins mid-run and gets the next
/// connection; refusals: at N = 1 neither drain nor remove of the last
/// serving replica, nor an add of a member (each with its own error, which
/// the run compares with the one predicted).
#[test]
fn membership_join_and_refusals() {
    let p = member_base(3).with_membership(true, vec![change(0.3, 2, MemberOp::Add, Some(100))]);
    let r = run(76, &p).unwrap_or_else(|e| panic!("{e}"));
    assert!(member_events(&r)
        .iter()
        .any(|e| matches!(e, Event::ReplicaAdded { replica, .. } if *replica == ip(2))));
    let p = member_base(1).with_membership(
        false,
        vec![
            change(0.2, 0, MemberOp::Drain, None),
            change(0.4, 0, MemberOp::Remove, Some(100)),
            change(0.6, 0, MemberOp::Add, None),
            change(0.7, 0, MemberOp::Enable, None),
        ],
    );
    let r = run(77, &p).unwrap_or_else(|e| panic!("{e}"));
    assert!(member_events(&r).is_empty(), "{:?}", r.events);
}

/// Why the binary does not keep a drained replica of servers that follow
/// the input order (there `drain` hands over and leaves at once, and `add`
/// goes through a join: `admin_request`): the sequencer numbers input per
/// service but sends each event only to the replicas of its connection, so
/// a replica drained while a connection it is in still gets input misses
/// the numbers of a connection opened meanwhile, and its shim would find a
/// hole. The simulation catches it (invariant 6); membership plans that
/// drain or add run without the sequencer.
#[test]
fn membership_under_the_sequencer_leaves_a_hole_that_is_caught() {
    let mut p =
        member_base(3).with_membership(false, vec![change(0.05, 2, MemberOp::Drain, Some(100))]);
    assert!(!p.sequencer, "a drain plan runs without the sequencer");
    p.bytes_per_conn = 400_000;
    run(78, &p).unwrap_or_else(|e| panic!("without the sequencer: {e}"));
    p.sequencer = true;
    let e = run(78, &p).expect_err("a hole in the order is an invariant failure");
    assert!(e.contains("shim would find a hole"), "{e}");
}

/// Self-tests of the membership checks: a router that ignores the calls
/// (it keeps sending new connections to a replica asked to drain or
/// removed), and one whose membership changes without the sim asking.
#[test]
fn membership_checks_catch_a_router_that_ignores_them() {
    let cases = [
        (
            MemberOp::Drain,
            Inject::MemberCallsIgnored,
            "membership (start)",
        ),
        (
            MemberOp::Remove,
            Inject::MemberCallsIgnored,
            "membership (remove)",
        ),
        (
            MemberOp::Drain,
            Inject::MemberModelStale,
            "announced drained, but the sim has it Serving",
        ),
        (
            MemberOp::Remove,
            Inject::MemberModelStale,
            "at the end the sim asked for replica1 Serving",
        ),
    ];
    for (op, inject, want) in cases {
        let mut p = member_base(3).with_membership(false, vec![change(0.3, 1, op, Some(100))]);
        p.inject = inject;
        let e = run(79, &p).expect_err("the checker must notice");
        assert!(e.contains(want), "{op:?} {inject:?}: {e}");
    }
}

/// Two connections that close after their echo; replica `r` of three is
/// marked down at 30 % and joins again, with late connections opened while
/// it is out, during the join and after it.
fn join_base(r: usize, leave: JoinLeave, attempts: Vec<(u64, JoinAttempt)>) -> Params {
    let mut plan = JoinPlan::new(r, leave, 0.3, attempts);
    plan.conn_down_us = Some(500);
    plan.conn_pause_us = Some(500);
    plan.conn_after_us = Some(1_000);
    Params {
        conns: 2,
        bytes_per_conn: 300_000,
        close: Close::AfterEcho,
        net: NetParams {
            delay_us: (300, 1500),
            ..NetParams::perfect()
        },
        ..Params::basic(3)
    }
    .with_join(plan)
}

/// The sim's own attempts (not the router's retries): kind and result.
fn outcomes(r: &ftnet_sim::Report) -> Vec<(JoinAttempt, Result<usize, String>)> {
    r.joins
        .iter()
        .filter(|o| !o.retry)
        .map(|o| (o.attempt, o.result.clone()))
        .collect()
}

/// Issue 15: a replica whose server lost the input order is replaced by a
/// fresh server, which joins with the group's state: it is added to the
/// three connections open then (the two first ones and the one opened
/// while it was out), each starting where the client's stream stood, its
/// restored state plus its socket's bytes make the whole stream, and it
/// echoes in step with the others to the end; the connection opened during
/// the pause waits for it and has it too. The client saw a zero window
/// while the input was paused.
#[test]
fn join_a_fresh_replica_into_open_connections() {
    let p = join_base(2, JoinLeave::MarkDown, vec![(5_000, JoinAttempt::Fresh)]);
    let r = run(81, &p).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcomes(&r), [(JoinAttempt::Fresh, Ok(3))], "{:?}", r.joins);
    assert!(r.joins[0].zero_windows > 0, "{:?}", r.joins);
}

/// The replica that crashed (its agent's silence reported) comes back as
/// a fresh server and joins; on a clean and on a lossy network, after a
/// silent crash and after an abort.
#[test]
fn join_after_a_crash() {
    for (seed, kind, net) in [
        (81, CrashKind::Abort, NetParams::perfect()),
        (82, CrashKind::Silent, lossy()),
    ] {
        let mut p = join_base(1, JoinLeave::Crash, vec![(3_000, JoinAttempt::Fresh)]);
        p.crash = Some(Crash {
            replica: 1,
            kind,
            when: CrashWhen::AtProgress(0.25),
        });
        p.failure_detection_ms = Params::fd_for(&net);
        p.net = net;
        let r = run(seed, &p).unwrap_or_else(|e| panic!("{e}"));
        // On the lossy network the first attempt may not find the service
        // at rest in time; the router tries again by itself.
        assert!(
            matches!(r.joins.last(), Some(o) if o.result.is_ok()),
            "seed {seed}: {:?}",
            r.joins
        );
    }
}

/// A live join (`Config::join_live`): the donor fixes its checkpoint, the
/// joiner is added to the open connections at that point and the input
/// resumes while its (held) server waits 200 ms for its restore; it takes
/// the connection opened meanwhile too, and once its digest equals the
/// donor's it reads what its sockets held and echoes in step: every
/// stream exact (the run's invariants). The clients' pause ends long
/// before the restore (a paused join waits for it: 200 ms and more); a
/// corrupt restore is refused, and the next fresh server joins.
#[test]
fn a_live_join_serves_while_the_state_travels() {
    for (seed, lossy_net, attempts) in [
        (91, false, vec![(5_000, JoinAttempt::Fresh)]),
        // Lossy: seed 96. (Seed 92 until smoltcp's fixes 5 and 6 changed
        // its course, then seed 95, which passed only on the router's own
        // retry once its connections had ended: its live join did not come
        // to rest within 2 s. Under loss a live join's pause is mostly the
        // wait to come to rest: seeds 96, 98 and 100 pause 1.56-1.76 s of
        // 1.76-1.95 s; 94, 99, 101 and 102 join only on a retry.)
        (96, true, vec![(5_000, JoinAttempt::Fresh)]),
        (
            93,
            false,
            vec![
                (2_000, JoinAttempt::FreshCorrupt),
                (2_000, JoinAttempt::Fresh),
            ],
        ),
    ] {
        let mut p = join_base(2, JoinLeave::MarkDown, attempts.clone());
        if let Some(j) = &mut p.join {
            j.live = true;
            j.agent_us = (2_000, 200_000);
        }
        if lossy_net {
            let net = lossy();
            p.failure_detection_ms = Params::fd_for(&net);
            p.net = net;
        }
        let r = run(seed, &p).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let last = r.joins.last().expect("an attempt");
        assert!(last.result.is_ok(), "seed {seed}: {:?}", r.joins);
        if attempts.len() == 1 {
            // The live join itself, with its connections open: not the
            // router's own retry once they had ended.
            assert!(
                r.joins.iter().all(|j| !j.retry),
                "seed {seed}: only the router's retry joined: {:?}",
                r.joins
            );
        }
        assert!(
            last.join_ms >= last.pause_ms + 190,
            "seed {seed}: the input paused {} ms of the join's {}, the restore alone took 200: {:?}",
            last.pause_ms,
            last.join_ms,
            r.joins
        );
        if attempts.len() == 2 {
            let o = outcomes(&r);
            assert!(
                matches!(&o[0], (JoinAttempt::FreshCorrupt, Err(why)) if why.contains("differs")),
                "seed {seed}: {:?}",
                r.joins
            );
        }
    }
}

/// Proof of state: a joiner whose restored state differs from the donor's
/// (one byte) is not admitted, the held input goes on to the others, and
/// the next fresh server, restored exactly, is.
#[test]
fn join_with_a_different_digest_fails_then_a_fresh_server_joins() {
    let p = join_base(
        0,
        JoinLeave::MarkDown,
        vec![
            (2_000, JoinAttempt::FreshCorrupt),
            (2_000, JoinAttempt::Fresh),
        ],
    );
    let r = run(83, &p).unwrap_or_else(|e| panic!("{e}"));
    let o = outcomes(&r);
    assert!(
        matches!(o.as_slice(), [(JoinAttempt::FreshCorrupt, Err(why)), (JoinAttempt::Fresh, Ok(_))]
            if why.contains("differs")),
        "{:?}",
        r.joins
    );
}

/// Joins that fail leave the replica out (the router's own retries fail
/// the same way): the donor's agent cannot checkpoint; the replica's old
/// server, which kept running and took input before, asks to join (the
/// stale replica): its agent refuses, as the real one does; then a fresh
/// server joins. Before its leave, a join of it while it serves is refused.
#[test]
fn join_refused_for_a_stale_server_or_without_a_checkpoint() {
    for (seed, attempts) in [
        (84, vec![(2_000, JoinAttempt::DonorRefuses)]),
        (85, vec![(2_000, JoinAttempt::Stale)]),
        (
            86,
            vec![(2_000, JoinAttempt::Stale), (3_000, JoinAttempt::Fresh)],
        ),
    ] {
        let mut p = join_base(2, JoinLeave::MarkDown, attempts.clone());
        if let Some(j) = &mut p.join {
            j.refused_first = true;
        }
        let r = run(seed, &p).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let o = outcomes(&r);
        assert_eq!(o.len(), attempts.len(), "seed {seed}: {:?}", r.joins);
        assert!(
            o[0].1
                .as_ref()
                .is_err_and(|e| e.contains(match attempts[0].1 {
                    JoinAttempt::Stale => "the joiner: its server already took input",
                    _ => "the donor: ",
                })),
            "seed {seed}: {:?}",
            r.joins
        );
        if attempts.len() == 2 {
            assert!(o[1].1.is_ok(), "seed {seed}: {:?}", r.joins);
        }
    }
}

/// Self-test: a joiner whose agent claims the donor's digest without
/// restoring anything is admitted by the router (the digest is its only
/// proof), and the sim notices that its server did not hold the group's
/// state of the connections it joined.
#[test]
fn join_checks_catch_a_joiner_without_the_state() {
    let mut p = join_base(2, JoinLeave::MarkDown, vec![(5_000, JoinAttempt::Fresh)]);
    p.inject = Inject::JoinRestoreSkipped;
    let e = run(81, &p).expect_err("the checker must notice");
    assert!(e.contains("did not hold the group's state"), "{e}");
}

/// Seeds of the loop whose join found a router bug; each must pass once it
/// is fixed. 721: N = 2, loss; replica 1's last output segment on a
/// connection (1159 bytes) is lost just before the pause, the client has
/// acknowledged everything the router got, so the service looks at rest;
/// the router adds the joiner with its first byte mapped where the output
/// it received ends, and replica 1's retransmission later lands on the
/// same positions as the joiner's echo of the next input (without the
/// check that names it, the run ended in a `Fin` eviction of the joiner).
#[test]
fn join_seeds_that_found_router_bugs() {
    const SEEDS: &[u64] = &[721];
    for &seed in SEEDS {
        let p = Params::random(seed);
        assert!(p.join.is_some(), "seed {seed}: {}", p.summary());
        run(seed, &p).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}
