//! `ftnet`: run the fault-tolerance router, inspect it, and run a local
//! testbed of network namespaces (`ftnet lab`).

mod agent;
mod config;
mod control;
mod generate;
mod instance;
mod lab;
mod metrics;
mod notify;
mod router;
mod run;
mod state;
mod status;
mod sys;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "ftnet",
    version,
    about = "Transport-level fault tolerance: one virtual IP, N active replicas, no broken TCP connections",
    long_about = "ftnet multicasts every client TCP segment sent to a virtual IP to N replica servers and merges \
their replies, so unmodified clients keep their connections when a replica crashes or its host drops off \
the network. The router runs in user space on a TUN device with policy routing (needs root / CAP_NET_ADMIN).",
    after_help = "\
Examples:
  ftnet lab demo                              # 3 redis replicas, benchmark, kill one mid-run, compare digests
  ftnet lab run -- redis-cli -h 198.19.0.1 PING
  ftnet check-config /etc/ftnet/ftnet.toml
  ftnet router --config /etc/ftnet/ftnet.toml --log-level debug
  ftnet status                                # table of services, replicas, drops

Run `ftnet <command> --help` for each command's options."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum ReplicaCmd {
    /// Serve new connections with this replica again, from down or draining (connections it left stay without it); a down replica of a service whose servers follow the input order comes back by a join instead (it missed input).
    Enable(ReplicaArgs),
    /// Make an address a replica of a running service: new connections use it (the config file is not changed).
    Add(ReplicaArgs),
    /// No new connections for this replica; the ones it is in finish with it ("drained" is logged when the last one ends).
    Drain(ReplicaArgs),
    /// Take the replica out of every connection at once (never a connection's last replica) and out of the service.
    Remove(ReplicaArgs),
    /// Bring a down replica of a stateful service (a fresh server under `ftnet run`) to the group's state and admit it into every open connection, with proof (equal digests).
    Join(ReplicaArgs),
}

#[derive(clap::Args)]
struct ReplicaArgs {
    /// The replica's address.
    addr: std::net::Ipv4Addr,
    /// The service [default: for enable, every service that lists it; for add, the only service; else the only service that lists it].
    #[arg(long)]
    service: Option<String>,
    /// Status socket of the router [default: status_socket from --config, else /run/ftnet/ftnet0.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Take the socket path from this configuration file.
    #[arg(long, value_name = "FILE", conflicts_with = "socket")]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the router: open the TUN, install policy routing, forward until SIGINT/SIGTERM (SIGHUP reloads replicas and services).
    #[command(after_help = ROUTER_HELP)]
    Router {
        /// Configuration file (TOML; format below).
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
        /// Log filter: error, warn, info, debug, trace, or a tracing directive such as
        /// "ftnet=debug,ftnet_core=trace". RUST_LOG overrides it.
        #[arg(long, default_value = "info", value_name = "LEVEL", value_parser = log_filter)]
        log_level: String,
        /// Log lines as text, or as one JSON object per line (timestamp, level, target,
        /// fields.message and each named field: replica, service, reason, connections, ...) for a
        /// log collector.
        #[arg(long, value_enum, default_value = "text", value_name = "FORMAT")]
        log_format: LogFormat,
    },
    /// Validate a configuration file and print what it configures; exit 1 with file:line:col on error.
    #[command(
        after_help = "Example:\n  ftnet check-config ftnet.toml && ftnet router --config ftnet.toml"
    )]
    CheckConfig {
        /// Configuration file to check.
        file: PathBuf,
    },
    /// Show a running router's services, replicas, connections and drop counters.
    #[command(after_help = "\
Examples:
  ftnet status                                  # /run/ftnet/ftnet0.sock
  ftnet status --config /etc/ftnet/ftnet.toml   # the socket named in that file
  ftnet status --socket /run/ftnet/lab/lab/router.sock --json")]
    Status {
        /// Status socket of the router [default: status_socket from --config, else /run/ftnet/ftnet0.sock].
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// Take the socket path from this configuration file.
        #[arg(long, value_name = "FILE", conflicts_with = "socket")]
        config: Option<PathBuf>,
        /// Print the raw JSON snapshot instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Stop the router gracefully: no new connections; it exits when the last one closes or at the deadline.
    #[command(after_help = "\
New clients' SYNs are dropped (not refused): a client retries, and once this router exits a
standby router (keepalived moves the addresses) answers the retry. Open connections go on; the
router stops when the last one has closed (its post-close quiet period not waited for), or at
the deadline — a standby router then adopts the open ones from the agents' records; without one
they break. `ftnet status` shows the drain; asking again moves the deadline.

Examples:
  ftnet drain                      # deadline 300 s
  ftnet drain --deadline 30 --config /etc/ftnet/ftnet.toml")]
    Drain {
        /// Seconds until the router stops even with connections open (1 to 86400).
        #[arg(long, default_value_t = 300, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
        deadline: u64,
        /// Status socket of the router [default: status_socket from --config, else /run/ftnet/ftnet0.sock].
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// Take the socket path from this configuration file.
        #[arg(long, value_name = "FILE", conflicts_with = "socket")]
        config: Option<PathBuf>,
    },
    /// Change a running service's replicas: join, enable, add, drain, remove (operator actions).
    #[command(after_help = "\
A replica leaves the group when it crashes, resets, stalls, diverges, loses the input order
or its host is lost, and it stays out: its server missed input while it was out, so its
state is no longer the group's. Not a restart of its agent, of the router, nor a takeover
brings it back — only `enable`, once its server holds the group's state again (for
example restarted from a copy of a healthy replica's data).

`add` makes a new address a replica of a running service (its replies are routed to the
router, its agent may register); it gets new connections only, and its server must hold the
service's state (a stateless server, or one restored from a healthy replica). Where the
service's servers follow the input order (`ftnet run`), `add` instead makes it a member out of
service: its agent ends a server already running there (--end-stale-servers), and the fresh
one joins with the group's state (see `join`) before it serves. `drain` stops new connections
to a replica and lets its connections finish; under the input order the other replicas hold
every connection and the state, so it hands over and leaves at once. `remove` takes it out of
every connection at once (never a connection's last replica, never the service's last serving
replica). None of these change the config file: write the change there too.

`join` brings a down replica of a stateful service back with the group's state, proven: the
service's input pauses (clients see a zero window), a serving replica's agent checkpoints its
server at that point of the input order (Redis: SAVE, after checking that no client session
holds state a new connection would not have), the joiner's agent restores it into its fresh
server (started with `ftnet run`), the two digests must be equal, and the joiner is added to
every open connection. A replica whose agent sees a fresh server again joins by itself.

Examples:
  ftnet replica enable 198.18.13.2                       # every service that lists it
  ftnet replica enable 198.18.13.2 --service redis --config /etc/ftnet/ftnet.toml
  ftnet replica drain 198.18.12.2                        # then, once drained:
  ftnet replica remove 198.18.12.2
  ftnet replica add 198.18.14.2 --service redis
  ftnet replica join 198.18.12.2                         # after restarting its server fresh")]
    Replica {
        #[command(subcommand)]
        cmd: ReplicaCmd,
    },
    /// Run on a replica host: register the replica with the router (shared secret), heartbeat, keep connection records.
    #[command(after_help = AGENT_HELP)]
    Agent {
        /// The router's control channel ([control] listen in its config), as seen from this host.
        #[arg(long, value_name = "ADDR:PORT")]
        router: std::net::SocketAddrV4,
        /// This host's replica address, as listed in the router's [[service]] replicas.
        #[arg(long, value_name = "IP")]
        replica: std::net::Ipv4Addr,
        /// File holding the secret shared with the router (at least 16 bytes).
        #[arg(long, value_name = "PATH")]
        secret_file: PathBuf,
        /// Name reported to the router [default: the host name].
        #[arg(long)]
        host: Option<String>,
        /// Unix socket where servers started with `ftnet run` get the input order.
        #[arg(long, value_name = "PATH", default_value = "/run/ftnet/shim.sock")]
        shim_socket: PathBuf,
        /// When the router says this replica's servers are stale (out of service while
        /// another replica serves: they missed input), end them (SIGKILL) so that their
        /// supervisor (`ftnet run --supervise`, systemd Restart=always) starts them afresh and
        /// the fresh server joins with the group's state. Without it they are left running
        /// (out of service) for the operator, and the log says so.
        #[arg(long)]
        end_stale_servers: bool,
        /// Scheduling priority of the agent's control loop: SCHED_RR at this priority (1-99),
        /// so that a host whose servers load every CPU does not delay its heartbeats past the
        /// router's dead_after_ms (read there as a lost host). Falls back to nice -10 where
        /// realtime is refused; 0 keeps normal scheduling.
        #[arg(long, default_value_t = 10, value_name = "0-99", value_parser = clap::value_parser!(i32).range(0..=99))]
        realtime_priority: i32,
        /// Log filter (as for `router`).
        #[arg(long, default_value = "info", value_name = "LEVEL", value_parser = log_filter)]
        log_level: String,
        /// Log format (as for `router`).
        #[arg(long, value_enum, default_value = "text", value_name = "FORMAT")]
        log_format: LogFormat,
    },
    /// Start a server under the determinism shim: it gets its input in the router's order.
    #[command(after_help = RUN_HELP)]
    Run {
        /// The agent's shim socket (`ftnet agent --shim-socket`).
        #[arg(long, value_name = "PATH", default_value = "/run/ftnet/shim.sock")]
        socket: PathBuf,
        /// Stay as the server's supervisor: start it again whenever it ends (a crash, or
        /// its agent ending a stale server), so that the fresh server joins with the
        /// group's state. Without it, `ftnet run` execs the server (for systemd and the like).
        #[arg(long)]
        supervise: bool,
        /// The server command and its arguments.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        cmd: Vec<String>,
    },
    /// Local testbed: client, router and replica network namespaces joined by veth pairs.
    Lab {
        #[command(subcommand)]
        cmd: lab::LabCmd,
    },
    /// Write man pages or shell completions (made from these commands' own help).
    #[command(after_help = GENERATE_HELP)]
    Generate {
        #[command(subcommand)]
        what: GenerateCmd,
    },
}

#[derive(Subcommand)]
enum GenerateCmd {
    /// Write one man page per command into DIR: ftnet.1, ftnet-router.1, ftnet-replica-join.1, ...
    #[command(after_help = "\
Examples:
  ftnet generate man /usr/local/share/man/man1 && mandb -q
  ftnet generate man /tmp/man && man -l /tmp/man/ftnet-router.1")]
    Man {
        /// Directory to write the pages into (created if missing; pages there are replaced).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print the completion script for SHELL to stdout.
    #[command(after_help = "\
Where each shell looks for it (system-wide; the Debian package installs these):
  bash   /usr/share/bash-completion/completions/ftnet    (or ~/.local/share/bash-completion/completions/ftnet)
  zsh    /usr/share/zsh/vendor-completions/_ftnet        (or a directory on $fpath, then compinit)
  fish   /usr/share/fish/vendor_completions.d/ftnet.fish (or ~/.config/fish/completions/ftnet.fish)

Examples:
  source <(ftnet generate completions bash)          # this bash session only
  ftnet generate completions zsh > ~/.zfunc/_ftnet   # with fpath+=(~/.zfunc) before compinit
  ftnet generate completions fish > ~/.config/fish/completions/ftnet.fish")]
    Completions {
        /// The shell.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

const GENERATE_HELP: &str = "\
Both are made from the definitions that parse ftnet's command line, so they say what this binary
accepts. The Debian package ships them already (man ftnet-router; completion in bash, zsh, fish).

Examples:
  ftnet generate man ./man                  # ./man/ftnet.1, ./man/ftnet-router.1, ...
  ftnet generate completions bash > /usr/share/bash-completion/completions/ftnet";

const ROUTER_HELP: &str = r#"Configuration format (every key but the [[service]] ones is optional; defaults shown):

  [router]
  tun = "ftnet0"                             # TUN interface to create
  table = 7000                               # policy routing table, also the rules' priority
  mtu = 1500
  status_socket = "/run/ftnet/ftnet0.sock"   # default /run/ftnet/<tun>.sock
  status_group = "adm"                       # may read the status socket (0660); default root only (0600)
  metrics_listen = "127.0.0.1:9100"          # HTTP: / (live status page), /metrics (Prometheus,
                                             # OpenMetrics text) and /healthz (503 once the data
                                             # plane stalls 2 s); default: off
  threads = 2                                # 1, or even: half read client packets, half replies (default: CPUs, ≤ 8)
  busy_poll_us = 0                           # keep polling this long after a packet instead of sleeping:
                                             # lower latency for a CPU per thread while traffic flows
  tun_queue_len = 8192                       # packets the kernel queues per TUN queue before it drops
                                             # (a full queue: the `tun_dropped` status and a warning)
  [limits]
  max_connections = 65536
  max_half_open = 8192
  [timeouts]
  failure_detection_ms = 100                 # a silent replica is evicted after this; one that
                                             # answers but makes no progress, or whose output stands
                                             # still while another's moves, after 10x (at least 1 s)
  syn_retries = 1                            # client SYNs a replica leaves unanswered (another answered) before it is dropped
  idle_s = 600
  handshake_s = 20
  time_wait_ms = 60000                       # a closed connection's quiet period (TIME_WAIT)
  [control]                                  # optional: agents on the replica hosts
  listen = "0.0.0.0:7400"                    # where `ftnet agent --router` connects
  secret_file = "/etc/ftnet/secret"          # shared with the agents, at least 16 bytes
  heartbeat_ms = 100                         # agents send one heartbeat per interval
  dead_after_ms = 500                        # a silent agent's host is lost: its replica is marked
                                             # down and leaves every connection, idle ones too
  commit_wait_ms = 100                       # a SYN-ACK waits for the agents to confirm the
                                             # connection's record, at most this long (0: no wait)
  realtime_priority = 10                     # SCHED_RR for the threads that hear the agents (0: normal
                                             # scheduling): a loaded CPU must not delay a heartbeat
                                             # past dead_after_ms, where it reads as a lost host
  tick_ms = 10                               # the servers' clock under the shim: the router's time
                                             # enters each service's input order every tick_ms, and
                                             # their clocks and timers move only there (0: the
                                             # kernel's clock; replies that show the time differ)
  [[service]]                                # one block per service
  name = "redis"
  vip = "198.19.0.1"                         # the virtual IP clients connect to
  ports = [6379]
  replicas = ["198.18.11.2", "198.18.12.2", "198.18.13.2"]
  output = "primary"                         # without voting: "primary" = per connection the client
                                             # gets one replica's stream (the first live one listed),
                                             # the others are compared (block hashes) and stand by; one
                                             # whose bytes differ leaves the connection (a majority
                                             # against it and a stateful service: the service); at its
                                             # failure the next one whose stream matched takes over,
                                             # else the client is reset; a reply never mixes replicas.
                                             # "fastest" = first copy of each byte wins (only for
                                             # servers identical byte for byte: where replies differ
                                             # in length the client's stream is spliced)
  vote = "off"                               # "majority": a reply byte reaches the client only once
                                             # most live replicas sent the same byte there; one that
                                             # differs is evicted and logged with the stream offset
  vote_tie = "first"                         # no majority (2 replicas, or all differ): "first" = the
                                             # replica listed first wins, "reset" = reset the client
  stateless = false                          # true: replicas keep no state between connections; one
                                             # that left is probed (SYN every 0.5 s) and serves again
                                             # once its server answers (restart, host back)
  ack = "all"                                # when the client is acknowledged: "all" = once every
                                             # live replica has its bytes; "log" = once the router's
                                             # input log and ack_replicas replicas have them (the
                                             # router sends a lagging replica what it lacks, and a
                                             # client's reset only after it; the log is lost with
                                             # the router: after a takeover a replica behind the
                                             # others leaves those connections)
  ack_replicas = 1                           # with ack = "log": 1..N
  delivery = "best-effort"                   # when the servers (under the shim) get client bytes:
                                             # "best-effort" = as they arrive; "safe" = once every
                                             # live replica holds them, so a client's reset or crash
                                             # never leaves the replicas with different input (the
                                             # reset is then part of the order); needs [control]

What the router changes in its network namespace (all undone on exit), over rtnetlink (it runs no
`ip` command; each change is logged as the equivalent `ip` command, shown here). <dev> is the
interface the router reaches the replica by (the kernel's route to it at start-up, as
`ip route get <replica>` shows it; logged):
  sysctl net.ipv4.ip_forward=1, rp_filter=0 on all, default and the TUN (files under /proc/sys)
  ip link set dev <tun> up mtu <mtu> txqueuelen <tun_queue_len>
  ip route replace default dev <tun> table <table>
  ip route replace blackhole default table <table> metric 4294967295
  ip rule add pref <table+1> nop                                                    (target of the gotos)
  ip rule add to <vip>/32 lookup <table> pref <table>                                (per VIP)
  ip rule add from <replica> iif <dev> ipproto tcp sport <port> lookup <table> pref <table>
                                                                                    (per replica and port)
  ip rule add iif <dev> ipproto icmp lookup <table> pref <table>                    (per replica interface)
  ip rule add from <replica> iif <dev> goto <table+1> pref <table>                   (per replica: the rest
  ip rule add from <replica> blackhole pref <table>                                  of its traffic passes;
                                                                                      its address from any
                                                                                      other interface is dropped)

One router per TUN and per table in a network namespace: it first takes exclusive locks
(/run/ftnet/locks/net<ns>-tun-<tun>.lock, net<ns>-table-<table>.lock) and refuses to start, naming
the running router's pid, if another holds either, or if another process holds the TUN open. The
table's lock file records what was installed; after a crash the next router removes exactly that.
SIGINT and SIGTERM stop the router. SIGHUP (`systemctl reload`) reads the config file again and
applies the replicas added to or removed from a service (like `ftnet replica add|remove`),
starts the services new in the file and retires those gone from it (no new connections; open
ones finish), connections of the others untouched; any other change (a service's vip, ports,
vote, stateless or ack setting, [timeouts], [limits], [router]) needs a restart and is logged as not
applied; a file that does not validate changes nothing.

Example:
  ftnet router --config /etc/ftnet/ftnet.toml --log-level debug"#;

const AGENT_HELP: &str = r#"The agent opens a TCP connection to the router's [control] listen address and both sides prove
they hold the shared secret (HMAC-SHA256 over fresh nonces of both; nothing secret crosses the wire).
Every frame after that carries a tag under that session's key: a frame forged, altered or replayed
on the path ends the session (the agent reconnects) and the router counts it.
Then it heartbeats at the router's pace. If the router hears nothing for dead_after_ms, it declares
the replica's host lost: the replica leaves every connection at once and gets no new ones. An agent
that is stopped cleanly closes its connection; that does not mark the replica down.

The agent must connect from its replica's address (the router compares the connection's source
address with --replica and refuses any other, logging it), so run it on the replica host with the
router reached through the replica's interface. A replica whose agent is alive keeps it: a second
agent for it is refused until the first closes its connection or is silent for dead_after_ms.
A replica that left the group (crash, reset, stall, lost host, lost input order) stays out when its
agent registers again, with this router or the next: the agent keeps the router's list of replicas
out of service and tells it to every router it registers with. `ftnet replica enable` brings one back.
SIGINT and SIGTERM stop the agent; SIGHUP is logged and ignored.

The router sends the agent a record of every connection its replica serves (ISNs, sequence offset,
timestamp base) and a notice when it ends; the agent keeps them across reconnections, for a router
that has to rebuild its connection table.

Example (replica host 198.18.11.2, router reachable at 198.18.11.1):
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > /etc/ftnet/secret   # same file on the router
  ftnet agent --router 198.18.11.1:7400 --replica 198.18.11.2 --secret-file /etc/ftnet/secret"#;

const RUN_HELP: &str = r#"`ftnet run` execs CMD with LD_PRELOAD=libftnet_shim.so (found at $FTNET_SHIM_LIB, next to the
ftnet executable, or in ../lib/ftnet/ from it: /usr/lib/ftnet/ for the Debian package) and FTNET_SHIM_SOCKET=<socket>. The shim connects to the agent and exposes the
server's input in the order the router's sequencer gave the client segments
of all connections: accepts in that order, epoll_wait/poll/select readiness in that order (one
ordered event per call, so what a server does once per loop turn runs between the same events
everywhere), and one read returns at most one router-defined chunk. A server that stops reading a connection does not stall the others
(the order passes over connections not registered for input, and returns to them in place).

Supported: single-threaded event-driven servers on epoll, poll or select with non-blocking sockets
(Redis, nginx with one worker, memcached -t 1, asyncio servers on any selector). Fork-per-
connection servers (socat fork, inetd-style) need no order and are left alone.

What the shim orders: accepts and reads (accept, accept4, read, recv, readv), readiness
(epoll_wait, poll, select).

What it makes the same on every replica besides (from the router and the agent):
  time     clock_gettime (REALTIME, MONOTONIC, BOOTTIME, TAI and their COARSE/RAW kinds),
           gettimeofday and time return the router's clock as of the last tick the server's
           wait reached: the router puts a tick into each service's input order every
           [control] tick_ms (10 ms), so every replica sees the same time at the same point of
           its input. Before the input begins (the server's first accept): 2026-01-01 00:00 UTC,
           on every replica whenever each started; then the tick before that accept. Only the
           thread whose waits follow the order sees this clock; the server's other threads
           (its allocator's, Redis's background threads) see the host's.
  timers   a wait with a timeout (epoll_wait/poll/select) ends at the next tick, with nothing
           ordered in its answer, and its timeout expires only at a tick; so Redis's cron,
           its active expiry (slow and fast) and nginx's timers run at the same point of the
           input everywhere. A zero timeout never waits; a wait with no timeout lets ticks
           pass.
  random   getrandom, getentropy and reads of /dev/urandom and /dev/random (open, openat,
           fopen) return one stream per server from the group's seed (derived by every agent
           from the shared secret): Redis's dict seed, SPOP, RANDOMKEY, SRANDMEMBER.
  pid      getpid is the same on every replica (a forked child sees its own), so a server
           that seeds its generators with time and pid (Redis) seeds them alike.
Before it execs CMD, `ftnet run` waits for its agent's hello (<socket>.hello: the agent writes it
as it starts, and again once it registered with the router, which says whether it ticks) — up to
3 s for the registered one, then the first; at most 30 s for any — and passes it as
FTNET_SHIM_HELLO. Without it the server keeps this host's clock, random bytes and pid, said
loudly.

Not covered (replies that depend on them still differ between replicas): the vDSO or the
clock_gettime/getrandom system calls called directly (not through libc), rdtsc, CPU time
(getrusage, CLOCK_PROCESS_CPUTIME_ID: Redis INFO's used_cpu), arc4random, threads (the order is
one thread's: a server's worker threads, Redis io-threads), memory addresses shown in replies,
and a replica that joined later: its server drew its own random state when it started (Redis's
PRNG state is not in its checkpoint), and its timers keep a phase of their own (Redis's cron and
slow expiry cycle run at other ticks than the group's, so RANDOMKEY and DBSIZE, which see
expired keys not yet deleted, may differ). Replies that show the process's own resources still differ
(Redis INFO's memory and CPU figures, MEMORY USAGE, DEBUG OBJECT). The
router's default output policy (output = "primary": the client follows one replica per
connection, the others are compared) keeps such replies whole and takes a follower whose reply
differs out of that connection only; under vote = "majority" they get replicas evicted, and under
output = "fastest" they splice the client's stream.

--supervise keeps `ftnet run` as the server's parent: it starts the server again whenever it ends
(after 0.5 s; once it died within 10 s of its start more than 3 times in a row, doubling up to 30 s) and passes SIGTERM, SIGINT and
SIGHUP on (SIGTERM and SIGINT end both). With an agent started with --end-stale-servers, a replica
whose server went stale (its link cut, or its order lost, while the others served) heals with no
operator: the agent ends the stale server, the supervisor starts a fresh one, and the fresh one
joins with the group's state.
Without an agent (or if the order breaks) the shim steps aside and says so on stderr.

Example (on a replica host whose agent runs with the default --shim-socket):
  ftnet run -- redis-server --port 6379 --save ''"#;

fn main() {
    abort_on_panic();
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ftnet: error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

/// A panic anywhere in the binary ends the process at once, as
/// `panic = "abort"` would: a router thread that unwound would leave the
/// others serving with a poisoned core, and a dead router is what the
/// standby (keepalived's track file) and the agents are built to replace.
/// The workspace builds with `panic = "unwind"` so that the shim can catch
/// its panics inside the server it is loaded into; this hook keeps the
/// binary's behaviour.
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

/// `--log-level`: a level, or tracing directives (`target=level`, comma
/// separated). A bare word that is no level (`infoo`) would parse as a
/// target name and silence every log: refused instead, with the choices.
fn log_filter(s: &str) -> Result<String, String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let help = "use error, warn, info, debug, trace or off, or directives such as ftnet=debug,ftnet_core=trace";
    for d in s.split(',') {
        let d = d.trim();
        let level = match d.rsplit_once('=') {
            Some((target, level)) if !target.is_empty() => level,
            Some(_) => return Err(format!("{d:?} names no target: {help}")),
            None => d,
        };
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!("{level:?} is not a log level: {help}"));
        }
    }
    tracing_subscriber::EnvFilter::try_new(s).map_err(|e| format!("{e}: {help}"))?;
    Ok(s.to_string())
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// One line of text per event (the default).
    Text,
    /// One JSON object per line (tracing-subscriber's json format).
    Json,
}

fn init_logging(level: &str, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Colour codes only help a human at a terminal; in router.log they are noise.
    let ansi = std::io::stderr().is_terminal();
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => b.with_ansi(ansi).init(),
        LogFormat::Json => b.json().with_current_span(false).init(),
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    match cli.cmd {
        Cmd::Router {
            config,
            log_level,
            log_format,
        } => {
            init_logging(&log_level, log_format);
            let cfg = config::load(&config)?;
            router::run(cfg, &config)?;
            Ok(0)
        }
        Cmd::Agent {
            router,
            replica,
            secret_file,
            host,
            shim_socket,
            end_stale_servers,
            realtime_priority,
            log_level,
            log_format,
        } => {
            init_logging(&log_level, log_format);
            let secret = config::read_secret(&secret_file).map_err(anyhow::Error::msg)?;
            let host = host.unwrap_or_else(sys::hostname);
            agent::run(agent::AgentArgs {
                router,
                replica,
                secret,
                host,
                shim_socket,
                end_stale: end_stale_servers,
                realtime_priority,
            })?;
            Ok(0)
        }
        Cmd::Run {
            socket,
            supervise,
            cmd,
        } => {
            if supervise {
                run::supervise(&socket, &cmd)
            } else {
                run::exec(&socket, &cmd)
            }
        }
        Cmd::CheckConfig { file } => {
            let cfg = config::load(&file)?;
            println!("{}: ok", file.display());
            println!(
                "  tun {} (mtu {}), table {}, status socket {}",
                cfg.tun,
                cfg.mtu,
                cfg.table,
                cfg.status_socket.display()
            );
            if let Some(m) = cfg.metrics_listen {
                println!("  status page: http://{m}/  metrics: http://{m}/metrics  health: http://{m}/healthz");
            }
            let t = &cfg.core.timeouts;
            println!(
                "  failure detection {:?}, syn retries {}, idle {:?}, handshake {:?}, time-wait {:?}",
                t.failure_detection, t.syn_retries, t.idle, t.handshake, t.time_wait
            );
            println!(
                "  limits: {} connections, {} half-open",
                cfg.core.limits.max_connections, cfg.core.limits.max_half_open
            );
            if let Some(c) = &cfg.control {
                println!(
                    "  control: agents connect to {}, secret {} ({} bytes), heartbeat {:?}, host lost after {:?}",
                    c.listen,
                    c.secret_file.display(),
                    c.secret.len(),
                    c.heartbeat,
                    c.dead_after
                );
            }
            println!(
                "  data plane: {} thread(s), busy poll {:?}",
                cfg.threads, cfg.busy_poll
            );
            for s in &cfg.core.services {
                let ports: Vec<String> = s.ports.iter().map(|p| p.to_string()).collect();
                let reps: Vec<String> = s.replicas.iter().map(|r| r.to_string()).collect();
                let ack = match s.ack {
                    ftnet_core::Ack::All => String::new(),
                    ftnet_core::Ack::Log { replicas } => format!(
                        " (clients acknowledged from the input log and {replicas} replica(s); up to {} KiB per connection)",
                        cfg.core.limits.log_per_connection >> 10
                    ),
                };
                println!(
                    "  service {}: {}:{} -> {}{ack}",
                    s.name,
                    s.vip,
                    ports.join(","),
                    reps.join(", ")
                );
            }
            Ok(0)
        }
        Cmd::Status {
            socket,
            config,
            json,
        } => {
            let path = status_socket(socket, config)?;
            status::show(&path, json)?;
            Ok(0)
        }
        Cmd::Drain {
            deadline,
            socket,
            config,
        } => {
            let path = status_socket(socket, config)?;
            status::request(&path, &format!("drain {deadline}"))?;
            Ok(0)
        }
        Cmd::Replica { cmd } => {
            let (verb, a) = match cmd {
                ReplicaCmd::Enable(a) => ("enable", a),
                ReplicaCmd::Add(a) => ("add", a),
                ReplicaCmd::Drain(a) => ("drain", a),
                ReplicaCmd::Remove(a) => ("remove", a),
                ReplicaCmd::Join(a) => ("join", a),
            };
            let path = status_socket(a.socket, a.config)?;
            let req = match a.service {
                Some(s) => format!("replica {verb} {} {s}", a.addr),
                None => format!("replica {verb} {}", a.addr),
            };
            status::request(&path, &req)?;
            Ok(0)
        }
        Cmd::Lab { cmd } => lab::run(cmd),
        Cmd::Generate { what } => {
            match what {
                GenerateCmd::Man { dir } => {
                    for f in generate::man_pages(Cli::command(), &dir)? {
                        println!("{}", f.display());
                    }
                }
                GenerateCmd::Completions { shell } => {
                    generate::completions(Cli::command(), shell, &mut std::io::stdout().lock())?
                }
            }
            Ok(0)
        }
    }
}

/// The router's status socket: `--socket`, or the one `--config` names, or
/// the default.
fn status_socket(socket: Option<PathBuf>, config: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    Ok(match (socket, config) {
        (Some(s), _) => s,
        (None, Some(c)) => {
            config::load(&c)
                .context("reading the status socket path from the config")?
                .status_socket
        }
        (None, None) => PathBuf::from("/run/ftnet/ftnet0.sock"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mistyped level is refused with the choices, where tracing would
    /// take it for a target name and silence every log.
    #[test]
    fn a_mistyped_log_level_is_refused() {
        for ok in [
            "info",
            "DEBUG",
            "off",
            "ftnet=debug,ftnet_core=trace",
            "warn,ftnet=info",
        ] {
            assert_eq!(log_filter(ok).as_deref(), Ok(ok), "{ok}");
        }
        for bad in ["infoo", "ftnet=verbose", "=debug", "info,debg", ""] {
            let e = log_filter(bad).unwrap_err();
            assert!(
                e.contains("use error, warn, info, debug, trace or off"),
                "{bad}: {e}"
            );
        }
        let args = [
            "ftnet",
            "router",
            "--config",
            "x.toml",
            "--log-level",
            "infoo",
        ];
        let Err(e) = Cli::try_parse_from(args) else {
            panic!("--log-level infoo accepted");
        };
        let e = e.to_string();
        assert!(e.contains("\"infoo\" is not a log level"), "{e}");
    }
}
