//! Redis state transfer for a replica that joins a running group.
//!
//! A healthy replica's agent takes a checkpoint of its local Redis while the
//! router holds the group's input at a precise point; the bytes travel to the
//! joiner's agent, which restores them into its own fresh Redis and proves
//! the state with a digest (`DEBUG DIGEST`, equal on both sides or the join
//! is refused). This module is the Redis side of that: a minimal RESP2
//! client over TCP to `127.0.0.1:<port>` (no `redis-cli`) and three calls,
//! [`redis_checkpoint`], [`redis_restore`] and [`redis_digest`].
//!
//! Requirements on the Redis being driven: `enable-debug-command yes` (or
//! `local`: the adapter connects over loopback), no password (the adapter
//! does not AUTH), and the agent runs on the same host as Redis, able to read
//! and write the files in Redis's `dir` (the RDB file travels through the
//! file system, not through the socket).
//!
//! Every timeout given to these calls bounds the connect, each write and the
//! wait for each single reply, not the call as a whole: `SAVE` of a million
//! keys takes about a second, so callers pass a generous timeout.

#![allow(dead_code)] // The agent-side caller is being written separately.

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A checkpoint of one Redis: the RDB file's bytes and the `DEBUG DIGEST` of
/// the dataset they hold (40 hex digits; all zeros for an empty dataset).
pub struct Snapshot {
    pub bytes: Vec<u8>,
    pub digest: String,
}

impl fmt::Debug for Snapshot {
    // The bytes can be hundreds of megabytes: show their length only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("bytes", &format_args!("<{} bytes>", self.bytes.len()))
            .field("digest", &self.digest)
            .finish()
    }
}

/// Why a checkpoint, restore or digest did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    /// A client connection holds session state that a checkpoint cannot
    /// carry (see [`at_rest`]), or the dataset changed while the checkpoint
    /// was taken. Transient: try again later, at another input point.
    NotAtRest(String),
    /// Anything else: Redis unreachable or replying `-ERR`, a timeout, a
    /// protocol error, a file that cannot be read or written, damaged RDB
    /// bytes. Retrying the same way is unlikely to help.
    Failed(String),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::NotAtRest(m) => write!(f, "redis is not at rest: {m}"),
            StateError::Failed(m) => write!(f, "redis state transfer failed: {m}"),
        }
    }
}

impl std::error::Error for StateError {}

fn failed(msg: impl Into<String>) -> StateError {
    StateError::Failed(msg.into())
}

/// Take a checkpoint of the Redis on `127.0.0.1:port`.
///
/// Steps, all on one connection:
/// 1. `CLIENT ID`, then `CLIENT LIST`: every client connection except this
///    one and those from a loopback address (operators and other local
///    tools, which the router does not replicate) must be at rest, see
///    [`at_rest`]. This is checked before `SAVE` so that a busy server does
///    not pay for a useless save.
/// 2. `SAVE` (blocking, in the foreground: nothing runs meanwhile).
/// 3. `CONFIG GET dir` and `CONFIG GET dbfilename` (before the `SAVE`),
///    read that file whole, and check it is a complete RDB file (magic, end
///    marker, CRC-64).
/// 4. `MULTI` / `CLIENT LIST` / `DEBUG DIGEST` / `INFO persistence` / `EXEC`,
///    one atomic step: the clients are checked again, and
///    `rdb_changes_since_last_save` must be 0, which proves that the digest
///    describes exactly the dataset the `SAVE` wrote (nothing was written
///    between the two, not even by an exempt loopback client).
pub fn redis_checkpoint(port: u16, timeout: Duration) -> Result<Snapshot, StateError> {
    checkpoint_with(port, timeout, is_local_addr)
}

/// Load `bytes` (an RDB file from [`redis_checkpoint`]) into the Redis on
/// `127.0.0.1:port`, replacing its whole dataset, and return its
/// `DEBUG DIGEST` afterwards, which the caller compares with the snapshot's.
///
/// The bytes are checked first (magic, end marker, CRC-64 when the writer
/// computed one): Redis ends its own process on a truncated or corrupt RDB
/// file, so damaged bytes must never reach it. They are then written to a
/// temporary file in Redis's `dir` and renamed over `dbfilename` (atomic:
/// Redis never sees half a file), and `DEBUG RELOAD NOSAVE` makes Redis
/// flush its dataset and load that file without saving first (Redis 7.0:
/// `DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE]`).
pub fn redis_restore(port: u16, bytes: &[u8], timeout: Duration) -> Result<String, StateError> {
    reload(port, bytes, timeout)?.digest()
}

/// The common part of the restores: check `bytes`, put them where Redis
/// reads its RDB file (a temporary file renamed over it), and
/// `DEBUG RELOAD NOSAVE`; the connection, for what the caller asks next.
fn reload(port: u16, bytes: &[u8], timeout: Duration) -> Result<Conn, StateError> {
    rdb_verify(bytes)?;
    let mut c = Conn::connect(port, timeout)?;
    let path = c.rdb_path()?;
    let tmp = temp_name(&path);
    let written = fs::write(&tmp, bytes)
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| failed(format!("writing {}: {e}", path.display())));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    c.command(&[b"DEBUG", b"RELOAD", b"NOSAVE"], "DEBUG RELOAD NOSAVE")?
        .expect_ok("DEBUG RELOAD NOSAVE")?;
    Ok(c)
}

/// The `DEBUG DIGEST` of the Redis on `127.0.0.1:port`: 40 hex digits that
/// depend on every key, value and expiry in every database (all zeros when
/// the dataset is empty), and not on how the dataset was built.
pub fn redis_digest(port: u16, timeout: Duration) -> Result<String, StateError> {
    Conn::connect(port, timeout)?.digest()
}

/// [`redis_checkpoint`] with the exemption rule as a parameter, so that
/// tests (whose clients are all on loopback) can exercise the refusal.
fn checkpoint_with(
    port: u16,
    timeout: Duration,
    exempt: impl Fn(&str) -> bool,
) -> Result<Snapshot, StateError> {
    let (bytes, saved) = save_with(port, timeout, &exempt)?;
    let digest = saved.digest_with(&exempt)?;
    Ok(Snapshot { bytes, digest })
}

/// [`redis_checkpoint`] in two halves, so that the state can travel (and
/// be restored) while its digest is computed: `DEBUG DIGEST` reads every
/// key (about 3 s for a million), as long as the `SAVE` and the reload
/// together. This half: steps 1 to 3 (the saved file's bytes); then
/// [`Saved::digest`] is step 4, on the same connection: it proves that the
/// digest describes exactly the dataset the `SAVE` wrote.
pub fn redis_save(port: u16, timeout: Duration) -> Result<(Vec<u8>, Saved), StateError> {
    save_with(port, timeout, &is_local_addr)
}

/// The connection of a [`redis_save`], for its digest.
pub struct Saved {
    c: Conn,
    own_id: u64,
}

impl Saved {
    /// Step 4 of [`redis_checkpoint`]: the digest of the dataset the `SAVE`
    /// wrote, or why it cannot be proven to be that.
    pub fn digest(self) -> Result<String, StateError> {
        self.digest_with(&is_local_addr)
    }

    fn digest_with(mut self, exempt: &dyn Fn(&str) -> bool) -> Result<String, StateError> {
        let c = &mut self.c;
        c.send(&[b"MULTI"]);
        c.send(&[b"CLIENT", b"LIST"]);
        c.send(&[b"DEBUG", b"DIGEST"]);
        c.send(&[b"INFO", b"persistence"]);
        c.send(&[b"EXEC"]);
        c.flush("MULTI")?;
        // Read all five replies before judging any, as a queued command that
        // Redis refuses (DEBUG disabled, say) only shows in its own reply.
        let mut queued = Vec::with_capacity(4);
        for _ in 0..4 {
            queued.push(c.recv("MULTI")?);
        }
        let exec = c.recv("EXEC")?;
        for r in queued {
            match r {
                Reply::Status(_) => {}
                other => return Err(unexpected("MULTI", &other)),
            }
        }
        let items = match exec {
            Reply::Array(Some(items)) if items.len() == 3 => items,
            other => return Err(unexpected("EXEC", &other)),
        };
        let mut items = items.into_iter();
        let (list, digest, info) = match (items.next(), items.next(), items.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => return Err(failed("EXEC: fewer than 3 replies")),
        };
        at_rest(&list.text("CLIENT LIST")?, self.own_id, exempt)?;
        let digest = parse_digest(digest)?;
        let changes = changes_since_save(&info.text("INFO persistence")?)?;
        if changes != 0 {
            return Err(StateError::NotAtRest(format!(
                "{changes} write(s) between SAVE and DEBUG DIGEST"
            )));
        }
        Ok(digest)
    }
}

fn save_with(
    port: u16,
    timeout: Duration,
    exempt: &dyn Fn(&str) -> bool,
) -> Result<(Vec<u8>, Saved), StateError> {
    let mut c = Conn::connect(port, timeout)?;
    let own_id = match c.command(&[b"CLIENT", b"ID"], "CLIENT ID")? {
        Reply::Int(id) => u64::try_from(id).map_err(|_| failed(format!("CLIENT ID: {id}")))?,
        other => return Err(unexpected("CLIENT ID", &other)),
    };
    let list = c
        .command(&[b"CLIENT", b"LIST"], "CLIENT LIST")?
        .text("CLIENT LIST")?;
    at_rest(&list, own_id, exempt)?;
    let path = c.rdb_path()?;

    c.command(&[b"SAVE"], "SAVE")?.expect_ok("SAVE")?;

    let bytes = fs::read(&path).map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
    rdb_verify(&bytes)?;
    Ok((bytes, Saved { c, own_id }))
}

/// What [`redis_fork`] reports as it goes.
pub enum Fork {
    /// The checkpoint is fixed: Redis forked (or, where it could not,
    /// saved) with the dataset as it stood; the service's input may resume.
    Point,
    /// The saved RDB file's bytes and their proof ([`rdb_proof`]).
    Saved(Vec<u8>, String),
}

/// Take a checkpoint of the Redis on `127.0.0.1:port` without stopping
/// it for longer than a fork, for a join that does not pause the service
/// while the state travels.
///
/// 1. As [`redis_checkpoint`]'s step 1: every replicated client at rest.
/// 2. The number of keys (`INFO keyspace`, every database), then `BGSAVE`:
///    its reply comes once Redis forked, and the child writes exactly the
///    dataset of that instant. `report(Fork::Point)` follows at once (the
///    caller lets input flow again). A `BGSAVE` that cannot start (no
///    fork) falls back to `SAVE`, which blocks Redis for its duration; one
///    refused because another save runs waits for that save first.
/// 3. `INFO persistence` until the background save ended with status `ok`
///    and `rdb_saves` counted exactly it, then the file is read, checked
///    (magic, end marker, CRC-64), and `rdb_saves` checked again: no other
///    save replaced the file meanwhile (it would hold a later state).
/// 4. `report(Fork::Saved(bytes, proof))`.
pub fn redis_fork(
    port: u16,
    timeout: Duration,
    report: &mut dyn FnMut(Fork),
) -> Result<(), StateError> {
    fork_with(port, timeout, &is_local_addr, report)
}

fn fork_with(
    port: u16,
    timeout: Duration,
    exempt: &dyn Fn(&str) -> bool,
    report: &mut dyn FnMut(Fork),
) -> Result<(), StateError> {
    let mut c = Conn::connect(port, timeout)?;
    let own_id = match c.command(&[b"CLIENT", b"ID"], "CLIENT ID")? {
        Reply::Int(id) => u64::try_from(id).map_err(|_| failed(format!("CLIENT ID: {id}")))?,
        other => return Err(unexpected("CLIENT ID", &other)),
    };
    let path = c.rdb_path()?;
    let deadline = Instant::now() + timeout;
    // A save already running (Redis's own `save` schedule) must end first:
    // BGSAVE is refused meanwhile.
    let mut info = c.persistence()?;
    while info_field(&info, "rdb_bgsave_in_progress") == Some(1) {
        if Instant::now() >= deadline {
            return Err(failed(
                "a background save of Redis's own did not end in time",
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
        info = c.persistence()?;
    }
    let list = c
        .command(&[b"CLIENT", b"LIST"], "CLIENT LIST")?
        .text("CLIENT LIST")?;
    at_rest(&list, own_id, exempt)?;
    let keys = c.keys()?;
    let saves = info_field(&info, "rdb_saves")
        .ok_or_else(|| failed("INFO persistence without rdb_saves (Redis 7.0 or later needed)"))?;
    let forked = match c.command(&[b"BGSAVE"], "BGSAVE") {
        Ok(Reply::Status(_)) => true,
        Ok(other) => return Err(unexpected("BGSAVE", &other)),
        Err(_) => {
            // No fork here (memory, a container's limits): save in the
            // foreground; the point is fixed once it returns.
            c.command(&[b"SAVE"], "SAVE")?.expect_ok("SAVE")?;
            false
        }
    };
    report(Fork::Point);
    if forked {
        loop {
            let info = c.persistence()?;
            if info_field(&info, "rdb_bgsave_in_progress") == Some(0)
                && info_field(&info, "rdb_saves").is_some_and(|n| n > saves)
            {
                if !info.contains("rdb_last_bgsave_status:ok") {
                    return Err(failed(
                        "the background save failed (rdb_last_bgsave_status)",
                    ));
                }
                break;
            }
            if Instant::now() >= deadline {
                return Err(failed(format!(
                    "the background save did not end within {} s",
                    timeout.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let bytes = fs::read(&path).map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
    rdb_verify(&bytes)?;
    let after = info_field(&c.persistence()?, "rdb_saves");
    if after != Some(saves + 1) {
        return Err(StateError::NotAtRest(format!(
            "another save replaced the checkpoint's file ({} saves where 1 was ours)",
            after.map_or(0, |a| a.saturating_sub(saves))
        )));
    }
    report(Fork::Saved(bytes.clone(), rdb_proof(&bytes, keys)));
    Ok(())
}

/// The proof a join compares: the SHA-256 of the RDB file's bytes and the
/// number of keys it holds (at the donor: its dataset's at the fork; at
/// the joiner: the keys its reload loaded, or found expired). Equal on
/// both sides: the joiner loaded exactly the file the donor wrote at the
/// join's input point.
pub fn rdb_proof(bytes: &[u8], keys: u64) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(bytes);
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!("rdb sha256 {hex}, {keys} keys")
}

/// Load `bytes` (an RDB file of [`redis_fork`]) into the Redis on
/// `127.0.0.1:port` as [`redis_restore`] does, and return its proof
/// ([`rdb_proof`]): the bytes' hash and the keys the reload took
/// (`rdb_last_load_keys_loaded` + `rdb_last_load_keys_expired`), which
/// must also be all the keys Redis now holds.
pub fn redis_restore_proof(
    port: u16,
    bytes: &[u8],
    timeout: Duration,
) -> Result<String, StateError> {
    let mut c = reload(port, bytes, timeout)?;
    let info = c.persistence()?;
    let loaded = info_field(&info, "rdb_last_load_keys_loaded")
        .ok_or_else(|| failed("INFO persistence without rdb_last_load_keys_loaded"))?;
    let expired = info_field(&info, "rdb_last_load_keys_expired").unwrap_or(0);
    let now = c.keys()?;
    if now != loaded {
        return Err(failed(format!(
            "after the reload Redis holds {now} keys, the file loaded {loaded}"
        )));
    }
    Ok(rdb_proof(bytes, loaded + expired))
}

/// A numeric field of an `INFO` section's text.
fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines().find_map(|l| {
        let (k, v) = l.trim().split_once(':')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

/// The exemption of [`redis_checkpoint`]: a client whose `addr` (as Redis
/// prints it: `1.2.3.4:port`, `[::1]:port`, or a Unix socket path) is a
/// loopback address or a Unix socket. Such clients are local tools (an
/// operator's `redis-cli`, another agent's probe), never connections the
/// router replicates: a routed connection always comes from a client's own
/// address, which the kernel never lets be a loopback one on the wire.
fn is_local_addr(addr: &str) -> bool {
    if addr.starts_with('/') {
        return true; // Unix socket
    }
    let Some((host, _port)) = addr.rsplit_once(':') else {
        return false;
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => a.is_loopback(),
        Ok(IpAddr::V6(a)) => {
            a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

/// Per-connection counters that must be 0 for a client to be at rest:
/// (field, whether every supported Redis prints it, what a non-zero value
/// means). On the joiner, each client connection is re-created as a NEW
/// connection to a Redis restored from the RDB file; the file carries the
/// dataset and nothing of any connection, so any of these would be lost or
/// would make the joiner's replies differ from the group's.
const ZERO_FIELDS: &[(&str, bool, &str)] = &[
    // The start of a command Redis has received but not yet run: the rest
    // arrives after the hold point, and the joiner would get only that rest.
    ("qbuf", true, "part of a command waits in the query buffer"),
    // Redis parses a multibulk command argument by argument and moves the
    // complete arguments out of the query buffer, so a half-received
    // `*2\r\n$3\r\nGET\r\n` shows qbuf=0 but argv-mem=3. (A client whose
    // bytes end exactly after a `*N\r\n` or `$N\r\n` header of its first
    // argument shows neither: CLIENT LIST cannot reveal it.) A blocked
    // client also holds its command's arguments here.
    (
        "argv-mem",
        false,
        "the arguments of an unfinished command are held",
    ),
    // Subscriptions: the joiner's new connection would not receive the
    // messages (and in RESP2 would reply to commands it must refuse).
    ("sub", true, "subscribed to channels"),
    ("psub", true, "subscribed to patterns"),
    ("ssub", false, "subscribed to shard channels"),
    // WATCHed keys decide whether a later EXEC runs (Redis 7.4+ prints it).
    ("watch", false, "watches keys for a later EXEC"),
    // SELECT: the new connection would start in database 0.
    ("db", true, "selected a database other than 0"),
    // A reply produced but not yet sent: the client is still to get it, and
    // the joiner, having never run the command, would never send it.
    ("obl", true, "a reply waits in the output buffer"),
    ("oll", true, "replies wait in the output list"),
    ("omem", true, "replies wait in output memory"),
];

/// Flags (the `flags` field) that must be absent, with what each means.
const BAD_FLAGS: &[(char, &str)] = &[
    (
        'b',
        "blocked in a blocking command (BLPOP, XREAD BLOCK, WAIT, ...)",
    ),
    ('x', "inside MULTI: queued commands would be lost"),
    ('P', "in publish/subscribe mode"),
    ('t', "CLIENT TRACKING is on: invalidations would be lost"),
];

/// Check that every client in `client_list` (the text of `CLIENT LIST`)
/// carries no session state a fresh connection would not have: the client
/// `own_id` (the caller's own connection, which is running `CLIENT LIST`
/// and so has a full query buffer) and clients whose `addr` satisfies
/// `exempt` are skipped.
///
/// At rest means: `qbuf=0` and `argv-mem=0` (no half-received command),
/// `multi=-1` (not in MULTI), `sub=0`, `psub=0`, `ssub=0` (no
/// subscriptions), `watch=0` (no WATCHed keys), `db=0` (no SELECT),
/// `resp=2` (no `HELLO 3`), no `b`, `x`, `P` or `t` flag (blocked, MULTI,
/// pub/sub, client tracking) and an empty output buffer (`obl=0`, `oll=0`,
/// `omem=0`). Fields this Redis version does not print (`ssub`, `watch`,
/// `resp`, `argv-mem`) are not required; fields this code does not know are
/// ignored. A busy client gives [`StateError::NotAtRest`] naming every busy
/// client (its `addr` and `id`) and field; a line that lacks `id`, `addr`
/// or a field every supported Redis prints gives [`StateError::Failed`].
///
/// Not checked: the connection's name (`CLIENT SETNAME`) and user (`AUTH`),
/// which do not change replies to data commands on a password-less Redis.
fn at_rest(
    client_list: &str,
    own_id: u64,
    exempt: impl Fn(&str) -> bool,
) -> Result<(), StateError> {
    let mut busy: Vec<String> = Vec::new();
    for line in client_list.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields = client_fields(line);
        let get = |k: &str| fields.iter().find(|(name, _)| *name == k).map(|(_, v)| *v);
        let need = |k: &str| {
            get(k).ok_or_else(|| failed(format!("CLIENT LIST line without {k}=: {line}")))
        };
        let id = need("id")?;
        let id: u64 = id
            .parse()
            .map_err(|_| failed(format!("CLIENT LIST: bad id={id}: {line}")))?;
        let addr = need("addr")?;
        if id == own_id || exempt(addr) {
            continue;
        }
        let mut why: Vec<String> = Vec::new();
        let mut expect =
            |key: &str, value: &str, want: i64, meaning: &str| match value.parse::<i64>() {
                Ok(v) if v == want => {}
                Ok(_) => why.push(format!("{key}={value} ({meaning})")),
                Err(_) => why.push(format!("{key}={value} (not a number)")),
            };
        for &(key, required, meaning) in ZERO_FIELDS {
            match get(key) {
                Some(v) => expect(key, v, 0, meaning),
                None if required => return Err(need(key).unwrap_err()),
                None => {}
            }
        }
        expect(
            "multi",
            need("multi")?,
            -1,
            "inside MULTI: queued commands would be lost",
        );
        if let Some(v) = get("resp") {
            expect("resp", v, 2, "switched protocol with HELLO");
        }
        let flags = need("flags")?;
        for &(flag, meaning) in BAD_FLAGS {
            if flags.contains(flag) {
                why.push(format!("flags={flags} ({flag}: {meaning})"));
            }
        }
        if !why.is_empty() {
            busy.push(format!("client {addr} (id {id}): {}", why.join(", ")));
        }
    }
    if busy.is_empty() {
        return Ok(());
    }
    const SHOWN: usize = 8;
    let more = busy.len().saturating_sub(SHOWN);
    busy.truncate(SHOWN);
    let mut msg = busy.join("; ");
    if more > 0 {
        msg.push_str(&format!("; and {more} more client(s)"));
    }
    Err(StateError::NotAtRest(msg))
}

/// The `key=value` fields of one `CLIENT LIST` line, in order. Redis
/// separates fields by single spaces and forbids spaces in the values it
/// lets clients set (names, library names); a token without `=` is skipped.
fn client_fields(line: &str) -> Vec<(&str, &str)> {
    line.split(' ')
        .filter_map(|tok| tok.split_once('='))
        .collect()
}

/// `rdb_changes_since_last_save` from the text of `INFO persistence`.
fn changes_since_save(info: &str) -> Result<u64, StateError> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| failed("INFO persistence without rdb_changes_since_last_save"))
}

/// A `DEBUG DIGEST` reply: exactly 40 hex digits.
fn parse_digest(reply: Reply) -> Result<String, StateError> {
    let d = reply.text("DEBUG DIGEST")?;
    if d.len() == 40 && d.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(d)
    } else {
        Err(failed(format!("DEBUG DIGEST: not 40 hex digits: {d:?}")))
    }
}

/// A name for the temporary file of a restore, next to `path` (same
/// directory, so the rename is atomic) and unique to this process and call.
fn temp_name(path: &Path) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{base}.ftnet-restore-{}-{nanos}.tmp",
        std::process::id()
    ))
}

// ---------------------------------------------------------------------------
// RDB file checks

/// Check that `bytes` is a complete RDB file: the `REDIS` magic and a
/// 4-digit version, the end-of-file opcode 0xFF 8 bytes before the end, and
/// the trailing little-endian CRC-64 (Jones polynomial, as Redis computes
/// it) over everything before it, unless it is 0 (`rdbchecksum no`).
fn rdb_verify(bytes: &[u8]) -> Result<(), StateError> {
    const MIN: usize = 9 + 1 + 8; // "REDISnnnn", EOF opcode, checksum
    if bytes.len() < MIN
        || !bytes.starts_with(b"REDIS")
        || !bytes[5..9].iter().all(u8::is_ascii_digit)
    {
        return Err(failed(format!("not an RDB file ({} bytes)", bytes.len())));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if body.last() != Some(&0xFF) {
        return Err(failed(format!(
            "RDB file truncated ({} bytes, no end marker)",
            bytes.len()
        )));
    }
    let mut le = [0u8; 8];
    le.copy_from_slice(sum);
    let expected = u64::from_le_bytes(le);
    if expected != 0 {
        let got = crc64(0, body);
        if got != expected {
            return Err(failed(format!(
                "RDB checksum mismatch ({} bytes): file says {expected:016x}, content is {got:016x}",
                bytes.len()
            )));
        }
    }
    Ok(())
}

/// Redis's CRC-64 (Jones polynomial 0xad93d23594c935a9, reflected, no final
/// xor), slice-by-8 so that a few hundred megabytes take well under a second.
fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    let t = crc64_tables();
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let x = crc ^ u64::from_le_bytes(w);
        let b = x.to_le_bytes();
        crc = t[7][usize::from(b[0])]
            ^ t[6][usize::from(b[1])]
            ^ t[5][usize::from(b[2])]
            ^ t[4][usize::from(b[3])]
            ^ t[3][usize::from(b[4])]
            ^ t[2][usize::from(b[5])]
            ^ t[1][usize::from(b[6])]
            ^ t[0][usize::from(b[7])];
    }
    for &byte in chunks.remainder() {
        crc = t[0][usize::from(crc.to_le_bytes()[0] ^ byte)] ^ (crc >> 8);
    }
    crc
}

fn crc64_tables() -> &'static [[u64; 256]; 8] {
    static TABLES: std::sync::OnceLock<Box<[[u64; 256]; 8]>> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5; // 0xad93d23594c935a9 bit-reversed
        let mut t = Box::new([[0u64; 256]; 8]);
        for (i, slot) in t[0].iter_mut().enumerate() {
            let mut c = i as u64;
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ POLY_REFLECTED
                } else {
                    c >> 1
                };
            }
            *slot = c;
        }
        for k in 1..8 {
            for i in 0..256 {
                let prev = t[k - 1][i];
                t[k][i] = t[0][usize::from(prev.to_le_bytes()[0])] ^ (prev >> 8);
            }
        }
        t
    })
}

// ---------------------------------------------------------------------------
// A minimal RESP2 client

/// One RESP2 reply. `Bulk(None)` and `Array(None)` are the nil replies.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a status or (non-nil) bulk reply.
    fn text(self, what: &str) -> Result<String, StateError> {
        match self {
            Reply::Status(s) => Ok(s),
            Reply::Bulk(Some(b)) => {
                String::from_utf8(b).map_err(|_| failed(format!("{what}: reply is not UTF-8")))
            }
            other => Err(unexpected(what, &other)),
        }
    }

    fn expect_ok(self, what: &str) -> Result<(), StateError> {
        match self {
            Reply::Status(s) if s == "OK" => Ok(()),
            other => Err(unexpected(what, &other)),
        }
    }
}

fn unexpected(what: &str, r: &Reply) -> StateError {
    match r {
        Reply::Error(e) => failed(format!("{what}: {e}")),
        other => {
            let mut s = format!("{other:?}");
            if s.len() > 200 {
                let mut cut = 200;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                s.truncate(cut);
                s.push_str("...");
            }
            failed(format!("{what}: unexpected reply {s}"))
        }
    }
}

/// Longest status, error or integer line accepted.
const MAX_LINE: usize = 1 << 20;
/// Largest bulk string accepted (Redis's proto-max-bulk-len is 512 MiB).
const MAX_BULK: usize = 1 << 30;
/// Deepest array nesting accepted.
const MAX_DEPTH: usize = 16;

/// A byte source whose blocking reads can be bounded (`TcpStream`; plain
/// byte slices in tests).
trait TimedRead: Read {
    /// Bound the next reads to `d` (`None`: no bound).
    fn set_timeout(&mut self, d: Option<Duration>) -> io::Result<()>;
}

impl TimedRead for TcpStream {
    fn set_timeout(&mut self, d: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(d)
    }
}

/// Buffered RESP2 reply parser over a [`TimedRead`]. Each reply has its own
/// deadline; before each read from the source the remaining time becomes
/// the source's read timeout.
struct RespReader<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    deadline: Option<Instant>,
}

impl<R: TimedRead> RespReader<R> {
    fn new(inner: R) -> Self {
        RespReader {
            inner,
            buf: vec![0; 64 * 1024],
            pos: 0,
            end: 0,
            deadline: None,
        }
    }

    /// Read one reply, waiting at most `timeout` for all of it.
    fn read_reply(&mut self, timeout: Option<Duration>) -> io::Result<Reply> {
        self.deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        self.reply(0)
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.pos == self.end {
            self.pos = 0;
            self.end = 0;
        }
        if self.end == self.buf.len() {
            // Only a line can span the buffer: keep its start.
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
            if self.end == self.buf.len() {
                let n = self.buf.len() * 2;
                self.buf.resize(n, 0);
            }
        }
        let remaining = match self.deadline {
            None => None,
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(r) if !r.is_zero() => Some(r),
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "timed out waiting for the reply",
                    ))
                }
            },
        };
        self.inner.set_timeout(remaining)?;
        let n = loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "timed out waiting for the reply",
                    ))
                }
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed by redis",
            ));
        }
        self.end += n;
        Ok(())
    }

    /// A line up to CRLF, without it.
    fn line(&mut self) -> io::Result<String> {
        let mut scanned = 0;
        loop {
            if let Some(i) = self.buf[self.pos + scanned..self.end]
                .windows(2)
                .position(|w| w == b"\r\n")
            {
                let at = self.pos + scanned + i;
                let s = String::from_utf8(self.buf[self.pos..at].to_vec())
                    .map_err(|_| proto("line is not UTF-8"))?;
                self.pos = at + 2;
                return Ok(s);
            }
            scanned = (self.end - self.pos).saturating_sub(1);
            if scanned > MAX_LINE {
                return Err(proto("line too long"));
            }
            self.fill()?;
        }
    }

    fn exact(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(n.min(1 << 20));
        while out.len() < n {
            if self.pos == self.end {
                self.fill()?;
            }
            let take = (n - out.len()).min(self.end - self.pos);
            out.extend_from_slice(&self.buf[self.pos..self.pos + take]);
            self.pos += take;
        }
        Ok(out)
    }

    fn reply(&mut self, depth: usize) -> io::Result<Reply> {
        let line = self.line()?;
        let (kind, rest) = match line.char_indices().nth(1) {
            Some((i, _)) => line.split_at(i),
            None if !line.is_empty() => (line.as_str(), ""),
            None => return Err(proto("empty reply line")),
        };
        let len = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| proto(&format!("bad length {s:?}")))
        };
        match kind {
            "+" => Ok(Reply::Status(rest.to_owned())),
            "-" => Ok(Reply::Error(rest.to_owned())),
            ":" => Ok(Reply::Int(len(rest)?)),
            "$" => {
                let n = len(rest)?;
                if n < 0 {
                    return Ok(Reply::Bulk(None));
                }
                let n = usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= MAX_BULK)
                    .ok_or_else(|| proto("bulk too large"))?;
                let data = self.exact(n)?;
                if self.exact(2)? != b"\r\n" {
                    return Err(proto("bulk string not followed by CRLF"));
                }
                Ok(Reply::Bulk(Some(data)))
            }
            "*" => {
                let n = len(rest)?;
                if n < 0 {
                    return Ok(Reply::Array(None));
                }
                if depth >= MAX_DEPTH {
                    return Err(proto("arrays nested too deep"));
                }
                let n = usize::try_from(n).map_err(|_| proto("array too large"))?;
                let mut items = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    items.push(self.reply(depth + 1)?);
                }
                Ok(Reply::Array(Some(items)))
            }
            other => Err(proto(&format!("unknown reply type {other:?} (RESP3?)"))),
        }
    }
}

fn proto(msg: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("RESP protocol error: {msg}"),
    )
}

/// Append one command, as an array of bulk strings, to `out`.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// One connection to the Redis on `127.0.0.1:port`. Commands can be
/// pipelined: [`Conn::send`] several, [`Conn::flush`], then [`Conn::recv`]
/// one reply per command, in order.
struct Conn {
    stream: TcpStream,
    reader: RespReader<TcpStream>,
    out: Vec<u8>,
    timeout: Duration,
    port: u16,
}

impl Conn {
    fn connect(port: u16, timeout: Duration) -> Result<Conn, StateError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let io_err = |e: io::Error| failed(format!("redis {addr}: {e}"));
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(io_err)?;
        stream.set_nodelay(true).map_err(io_err)?;
        stream
            .set_write_timeout(Some(timeout).filter(|t| !t.is_zero()))
            .map_err(io_err)?;
        let reader = RespReader::new(stream.try_clone().map_err(io_err)?);
        Ok(Conn {
            stream,
            reader,
            out: Vec::new(),
            timeout,
            port,
        })
    }

    fn send(&mut self, args: &[&[u8]]) {
        encode(&mut self.out, args);
    }

    fn flush(&mut self, what: &str) -> Result<(), StateError> {
        let r = self.stream.write_all(&self.out);
        self.out.clear();
        r.map_err(|e| failed(format!("redis 127.0.0.1:{} {what}: {e}", self.port)))
    }

    /// The next reply; an error reply is returned as [`Reply::Error`].
    fn recv(&mut self, what: &str) -> Result<Reply, StateError> {
        self.reader.read_reply(Some(self.timeout)).map_err(|e| {
            failed(format!(
                "redis 127.0.0.1:{} {what}: {e} (timeout {:?})",
                self.port, self.timeout
            ))
        })
    }

    /// Send one command and read its reply; an error reply becomes
    /// [`StateError::Failed`] with Redis's message.
    fn command(&mut self, args: &[&[u8]], what: &str) -> Result<Reply, StateError> {
        self.send(args);
        self.flush(what)?;
        match self.recv(what)? {
            Reply::Error(e) => Err(failed(format!("{what}: {e}"))),
            r => Ok(r),
        }
    }

    fn config_get(&mut self, name: &str) -> Result<String, StateError> {
        let what = format!("CONFIG GET {name}");
        match self.command(&[b"CONFIG", b"GET", name.as_bytes()], &what)? {
            Reply::Array(Some(items)) if items.len() == 2 => {
                let mut it = items.into_iter().skip(1);
                it.next().ok_or_else(|| failed(what.clone()))?.text(&what)
            }
            other => Err(unexpected(&what, &other)),
        }
    }

    /// `dir` joined with `dbfilename`: where `SAVE` writes and
    /// `DEBUG RELOAD` reads. Redis keeps `dir` absolute (it is its working
    /// directory) and refuses a `dbfilename` that is a path.
    fn rdb_path(&mut self) -> Result<PathBuf, StateError> {
        let dir = self.config_get("dir")?;
        let file = self.config_get("dbfilename")?;
        if file.is_empty() || file.contains('/') {
            return Err(failed(format!("unusable dbfilename {file:?}")));
        }
        Ok(Path::new(&dir).join(file))
    }

    fn digest(&mut self) -> Result<String, StateError> {
        let r = self.command(&[b"DEBUG", b"DIGEST"], "DEBUG DIGEST")?;
        parse_digest(r)
    }

    fn persistence(&mut self) -> Result<String, StateError> {
        self.command(&[b"INFO", b"persistence"], "INFO persistence")?
            .text("INFO persistence")
    }

    /// The keys of every database (`INFO keyspace`: `db0:keys=N,...`).
    fn keys(&mut self) -> Result<u64, StateError> {
        let info = self
            .command(&[b"INFO", b"keyspace"], "INFO keyspace")?
            .text("INFO keyspace")?;
        let mut n = 0u64;
        for l in info.lines() {
            let Some((db, rest)) = l.trim().split_once(':') else {
                continue;
            };
            if !db.starts_with("db") {
                continue;
            }
            let k = rest
                .split(',')
                .find_map(|f| f.strip_prefix("keys="))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| failed(format!("INFO keyspace: {l:?}")))?;
            n += k;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};

    const REDIS_SERVER: &str = "/usr/bin/redis-server";
    const T: Duration = Duration::from_secs(60);
    const ZERO_DIGEST: &str = "0000000000000000000000000000000000000000";

    impl TimedRead for &[u8] {
        fn set_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
            Ok(())
        }
    }

    /// A redis-server on a free loopback port with its own directory;
    /// killed and its directory removed on drop.
    struct Redis {
        child: Child,
        port: u16,
        dir: PathBuf,
    }

    impl Redis {
        fn start() -> Redis {
            static N: AtomicUsize = AtomicUsize::new(0);
            for _attempt in 0..5 {
                let port = {
                    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
                    l.local_addr().expect("local_addr").port()
                };
                let dir = std::env::temp_dir().join(format!(
                    "ftnet-state-test-{}-{}-{port}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                let _ = fs::remove_dir_all(&dir);
                fs::create_dir_all(&dir).expect("create test dir");
                let child = Command::new(REDIS_SERVER)
                    .args([
                        "--port",
                        &port.to_string(),
                        "--bind",
                        "127.0.0.1",
                        "--save",
                        "",
                    ])
                    .args(["--appendonly", "no", "--enable-debug-command", "yes"])
                    .arg("--dir")
                    .arg(&dir)
                    .arg("--logfile")
                    .arg(dir.join("redis.log"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap_or_else(|e| {
                        panic!("cannot run {REDIS_SERVER} (these tests need redis-server 7): {e}")
                    });
                let mut r = Redis { child, port, dir };
                if r.wait_ready() {
                    return r;
                }
                let log = fs::read_to_string(r.dir.join("redis.log")).unwrap_or_default();
                eprintln!("redis-server on port {port} did not come up, retrying; log:\n{log}");
            }
            panic!("redis-server did not start in 5 attempts");
        }

        /// PING answered by this very process (a port taken meanwhile by
        /// another server must not pass).
        fn wait_ready(&mut self) -> bool {
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return false;
                }
                if let Ok(mut c) = Conn::connect(self.port, Duration::from_secs(1)) {
                    if let Ok(Reply::Status(p)) = c.command(&[b"PING"], "PING") {
                        assert_eq!(p, "PONG");
                        let info = c
                            .command(&[b"INFO", b"server"], "INFO")
                            .unwrap()
                            .text("INFO")
                            .unwrap();
                        return info.contains(&format!("process_id:{}\r\n", self.child.id()));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        }

        fn conn(&self) -> Conn {
            Conn::connect(self.port, T).expect("connect")
        }
    }

    impl Drop for Redis {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    /// `n` keys, a third each strings, lists and hashes, pipelined in
    /// batches; every reply checked.
    fn populate(port: u16, prefix: &str, n: usize) {
        let mut c = Conn::connect(port, T).unwrap();
        let batch = 10_000;
        let mut i = 0;
        while i < n {
            let end = (i + batch).min(n);
            for k in i..end {
                let v = format!("value-{prefix}-{k}");
                match k % 3 {
                    0 => c.send(&[b"SET", format!("{prefix}s:{k}").as_bytes(), v.as_bytes()]),
                    1 => c.send(&[
                        b"RPUSH",
                        format!("{prefix}l:{k}").as_bytes(),
                        b"a",
                        b"b",
                        v.as_bytes(),
                    ]),
                    _ => c.send(&[
                        b"HSET",
                        format!("{prefix}h:{k}").as_bytes(),
                        b"f1",
                        v.as_bytes(),
                        b"f2",
                        b"x",
                    ]),
                }
            }
            c.flush("populate").unwrap();
            for _ in i..end {
                let r = c.recv("populate").unwrap();
                assert!(!matches!(r, Reply::Error(_)), "populate: {r:?}");
            }
            i = end;
        }
    }

    fn dbsize(c: &mut Conn) -> i64 {
        match c.command(&[b"DBSIZE"], "DBSIZE").unwrap() {
            Reply::Int(n) => n,
            r => panic!("DBSIZE: {r:?}"),
        }
    }

    /// The fork's checkpoint holds the dataset of the point it reported,
    /// not the writes made right after (while the child still writes the
    /// file), and the joiner's proof equals the donor's only for the same
    /// file with every key loaded.
    #[test]
    fn fork_checkpoint_is_the_point_and_restore_proves_it() {
        let src = Redis::start();
        populate(src.port, "", 20_000);
        let before = redis_digest(src.port, T).unwrap();
        let mut writer = src.conn();
        let mut got = Vec::new();
        let mut point_seen = false;
        fork_with(src.port, T, &|_| false, &mut |f| match f {
            Fork::Point => {
                // The service resumes: writes land at once.
                point_seen = true;
                for k in 0..50 {
                    let key = format!("after:{k}");
                    writer
                        .command(&[b"SET", key.as_bytes(), b"x"], "SET")
                        .unwrap();
                }
            }
            Fork::Saved(bytes, proof) => got.push((bytes, proof)),
        })
        .unwrap();
        assert!(point_seen);
        let (bytes, proof) = got.pop().expect("saved");
        assert!(
            proof.starts_with("rdb sha256 ") && proof.ends_with(", 20000 keys"),
            "{proof}"
        );
        assert_eq!(dbsize(&mut src.conn()), 20_050);

        let dst = Redis::start();
        let restored = redis_restore_proof(dst.port, &bytes, T).unwrap();
        assert_eq!(restored, proof);
        // The state of the point: the writes after it are not in it.
        assert_eq!(redis_digest(dst.port, T).unwrap(), before);
        assert_eq!(dbsize(&mut dst.conn()), 20_000);

        // Other bytes (another save's file) prove something else.
        let mut other = bytes.clone();
        let n = other.len();
        other[n / 2] ^= 0x01;
        assert_ne!(rdb_proof(&other, 20_000), proof);
        assert_ne!(rdb_proof(&bytes, 19_999), proof);
    }

    #[test]
    fn checkpoint_restore_roundtrip() {
        let src = Redis::start();
        populate(src.port, "", 3000);
        let snap = redis_checkpoint(src.port, T).unwrap();
        assert_eq!(snap.digest.len(), 40);
        assert_ne!(snap.digest, ZERO_DIGEST);
        assert!(snap.bytes.starts_with(b"REDIS"));
        assert_eq!(redis_digest(src.port, T).unwrap(), snap.digest);

        let dst = Redis::start();
        assert_eq!(redis_digest(dst.port, T).unwrap(), ZERO_DIGEST);
        let restored = redis_restore(dst.port, &snap.bytes, T).unwrap();
        assert_eq!(restored, snap.digest);
        assert_eq!(redis_digest(dst.port, T).unwrap(), snap.digest);

        let mut c = dst.conn();
        assert_eq!(dbsize(&mut c), 3000);
        assert_eq!(
            c.command(&[b"GET", b"s:300"], "GET").unwrap(),
            Reply::Bulk(Some(b"value--300".to_vec()))
        );
        assert_eq!(
            c.command(&[b"LRANGE", b"l:301", b"0", b"-1"], "LRANGE")
                .unwrap(),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"a".to_vec())),
                Reply::Bulk(Some(b"b".to_vec())),
                Reply::Bulk(Some(b"value--301".to_vec())),
            ]))
        );
        assert_eq!(
            c.command(&[b"HGET", b"h:302", b"f1"], "HGET").unwrap(),
            Reply::Bulk(Some(b"value--302".to_vec()))
        );
        // No temporary file left behind.
        let names: Vec<_> = fs::read_dir(&dst.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.to_string_lossy().contains("ftnet-restore")),
            "{names:?}"
        );
    }

    #[test]
    fn restore_replaces_existing_keys() {
        let src = Redis::start();
        populate(src.port, "", 2000);
        let snap = redis_checkpoint(src.port, T).unwrap();

        let dst = Redis::start();
        populate(dst.port, "other-", 500);
        let mut c = dst.conn();
        c.command(&[b"SET", b"s:0", b"stale"], "SET").unwrap();
        c.command(&[b"SELECT", b"3"], "SELECT").unwrap();
        c.command(&[b"SET", b"in-db-3", b"x"], "SET").unwrap();
        c.command(&[b"SELECT", b"0"], "SELECT").unwrap();
        let before = redis_digest(dst.port, T).unwrap();
        assert_ne!(before, snap.digest);

        assert_eq!(
            redis_restore(dst.port, &snap.bytes, T).unwrap(),
            snap.digest
        );
        assert_eq!(dbsize(&mut c), 2000);
        assert_eq!(
            c.command(&[b"GET", b"s:0"], "GET").unwrap(),
            Reply::Bulk(Some(b"value--0".to_vec()))
        );
        assert_eq!(
            c.command(&[b"EXISTS", b"other-s:0"], "EXISTS").unwrap(),
            Reply::Int(0)
        );
        c.command(&[b"SELECT", b"3"], "SELECT").unwrap();
        assert_eq!(dbsize(&mut c), 0);
    }

    #[test]
    fn restore_rejects_damaged_bytes_and_leaves_the_server_alone() {
        let src = Redis::start();
        populate(src.port, "", 300);
        let snap = redis_checkpoint(src.port, T).unwrap();
        let dst = Redis::start();
        populate(dst.port, "mine-", 30);
        let before = redis_digest(dst.port, T).unwrap();

        let truncated = &snap.bytes[..snap.bytes.len() - 100];
        let mut flipped = snap.bytes.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x40;
        for (name, bad) in [
            ("truncated", truncated),
            ("flipped", &flipped[..]),
            ("empty", &[][..]),
        ] {
            match redis_restore(dst.port, bad, T) {
                Err(StateError::Failed(_)) => {}
                other => panic!("{name}: {other:?}"),
            }
        }
        assert_eq!(redis_digest(dst.port, T).unwrap(), before);
        assert!(!dst.dir.join("dump.rdb").exists());
    }

    #[test]
    fn digest_follows_the_dataset() {
        let r = Redis::start();
        assert_eq!(redis_digest(r.port, T).unwrap(), ZERO_DIGEST);
        let mut c = r.conn();
        c.command(&[b"SET", b"a", b"1"], "SET").unwrap();
        let d1 = redis_digest(r.port, T).unwrap();
        assert_ne!(d1, ZERO_DIGEST);
        c.command(&[b"SET", b"a", b"2"], "SET").unwrap();
        let d2 = redis_digest(r.port, T).unwrap();
        assert_ne!(d2, d1);
        c.command(&[b"SET", b"a", b"1"], "SET").unwrap();
        assert_eq!(redis_digest(r.port, T).unwrap(), d1);
    }

    #[test]
    fn errors_are_failed_with_the_message() {
        let r = Redis::start();
        let mut c = r.conn();
        match c.command(&[b"NOSUCHCOMMAND"], "NOSUCHCOMMAND") {
            Err(StateError::Failed(m)) => assert!(m.contains("ERR unknown command"), "{m}"),
            other => panic!("{other:?}"),
        }
        // Nothing listens on a port just released.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        assert!(matches!(redis_digest(port, T), Err(StateError::Failed(_))));
    }

    /// A raw connection put into some state; `expect` is the start of the
    /// reply to wait for (empty: send and do not wait).
    fn raw(port: u16, send: &[u8], expect: &[u8]) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(send).unwrap();
        let mut got = Vec::new();
        while got.len() < expect.len() {
            let mut b = [0u8; 4096];
            let n = s.read(&mut b).unwrap();
            assert!(n > 0, "closed");
            got.extend_from_slice(&b[..n]);
        }
        assert!(
            got.starts_with(expect),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
        s
    }

    fn line_of<'a>(list: &'a str, s: &TcpStream) -> Option<&'a str> {
        let addr = format!("addr={} ", s.local_addr().unwrap());
        list.lines().find(|l| l.contains(&addr))
    }

    #[test]
    fn at_rest_rules_on_real_client_list() {
        let r = Redis::start();
        let mut c = r.conn();
        let own_id = match c.command(&[b"CLIENT", b"ID"], "CLIENT ID").unwrap() {
            Reply::Int(id) => u64::try_from(id).unwrap(),
            x => panic!("{x:?}"),
        };
        // A value large enough that its reply cannot all fit in the socket
        // buffers of a client that never reads.
        let big = vec![b'v'; 64 << 20];
        c.command(&[b"SET", b"big", &big], "SET").unwrap();
        drop(big);

        let idle = raw(r.port, b"PING\r\n", b"+PONG\r\n");
        let cases: Vec<(&str, TcpStream, &str)> = vec![
            ("multi", raw(r.port, b"MULTI\r\n", b"+OK\r\n"), "multi="),
            (
                "subscribe",
                raw(r.port, b"SUBSCRIBE ch\r\n", b"*3\r\n"),
                "sub=1",
            ),
            (
                "psubscribe",
                raw(r.port, b"PSUBSCRIBE p*\r\n", b"*3\r\n"),
                "psub=1",
            ),
            (
                "ssubscribe",
                raw(r.port, b"SSUBSCRIBE sch\r\n", b"*3\r\n"),
                "ssub=1",
            ),
            ("select", raw(r.port, b"SELECT 1\r\n", b"+OK\r\n"), "db=1"),
            ("hello3", raw(r.port, b"HELLO 3\r\n", b"%"), "resp=3"),
            (
                "tracking",
                raw(r.port, b"CLIENT TRACKING on\r\n", b"+OK\r\n"),
                "t: ",
            ),
            (
                "half command",
                raw(r.port, b"*2\r\n$3\r\nGET\r\n", b""),
                "argv-mem=",
            ),
            (
                "half argument",
                raw(r.port, b"*2\r\n$3\r\nGET\r\n$3\r\nab", b""),
                "qbuf=",
            ),
            ("half inline", raw(r.port, b"GET a", b""), "qbuf="),
            ("blocked", raw(r.port, b"BLPOP q 0\r\n", b""), "b: "),
            ("unread reply", raw(r.port, b"GET big\r\n", b""), "omem="),
        ];

        // The states without a reply to wait for show up when Redis has
        // read the bytes (or written what it can): poll until every case is
        // refused, with the field that says why.
        let until = Instant::now() + Duration::from_secs(10);
        let list = loop {
            let list = c
                .command(&[b"CLIENT", b"LIST"], "CLIENT LIST")
                .unwrap()
                .text("")
                .unwrap();
            let all = cases.iter().all(|(_, s, field)| {
                line_of(&list, s).is_some_and(|l| match at_rest(l, own_id, |_| false) {
                    Err(StateError::NotAtRest(m)) => m.contains(field),
                    _ => false,
                })
            });
            if all {
                break list;
            }
            if Instant::now() > until {
                for (name, s, field) in &cases {
                    let l = line_of(&list, s);
                    let verdict = l.map(|l| at_rest(l, own_id, |_| false));
                    eprintln!("{name} (wants {field}): {l:?} -> {verdict:?}");
                }
                panic!("not every case was refused:\n{list}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };

        for (name, s, _) in &cases {
            let addr = s.local_addr().unwrap().to_string();
            match at_rest(line_of(&list, s).unwrap(), own_id, |_| false) {
                Err(StateError::NotAtRest(m)) => assert!(m.contains(&addr), "{name}: {m}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        // The idle connection is at rest; so is our own, skipped by id
        // (though it is running CLIENT LIST and has a full query buffer).
        let idle_line = line_of(&list, &idle).unwrap();
        assert_eq!(at_rest(idle_line, own_id, |_| false), Ok(()));
        let own_line = list
            .lines()
            .find(|l| l.starts_with(&format!("id={own_id} ")))
            .unwrap();
        assert_eq!(at_rest(own_line, own_id, |_| false), Ok(()));
        assert!(matches!(
            at_rest(own_line, own_id + 1_000_000, |_| false),
            Err(StateError::NotAtRest(_))
        ));
        // The whole list: every busy client is named; all are loopback, so
        // the default exemption accepts them.
        match at_rest(&list, own_id, |_| false) {
            Err(StateError::NotAtRest(m)) => assert!(m.contains("more client(s)"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(at_rest(&list, own_id, is_local_addr), Ok(()));
        drop(cases);
    }

    #[test]
    fn checkpoint_refuses_a_busy_client_and_takes_an_idle_one() {
        let r = Redis::start();
        populate(r.port, "", 100);
        let _idle = raw(r.port, b"PING\r\n", b"+PONG\r\n");
        let snap = checkpoint_with(r.port, T, |_| false).unwrap();
        assert_eq!(snap.digest, redis_digest(r.port, T).unwrap());

        let multi = raw(r.port, b"MULTI\r\n", b"+OK\r\n");
        let addr = multi.local_addr().unwrap().to_string();
        match checkpoint_with(r.port, T, |_| false) {
            Err(StateError::NotAtRest(m)) => {
                assert!(m.contains(&addr) && m.contains("multi="), "{m}")
            }
            other => panic!("{other:?}"),
        }
        // The same client from loopback is exempt by default.
        assert_eq!(redis_checkpoint(r.port, T).unwrap().digest, snap.digest);
        drop(multi);
    }

    #[test]
    fn checkpoint_refuses_writes_between_save_and_digest() {
        // A loopback writer (exempt from the client rules) that never
        // stops: its commands queue up while SAVE blocks Redis and run as
        // soon as SAVE has replied, before the adapter's MULTI can arrive.
        let r = Redis::start();
        populate(r.port, "", 20_000);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut w = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
        let writer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let batch = b"INCR n\r\n".repeat(100);
                while !stop.load(Ordering::Relaxed) {
                    if w.write_all(&batch).is_err() {
                        break;
                    }
                }
            })
        };
        let mut c = r.conn();
        let until = Instant::now() + Duration::from_secs(10);
        while matches!(
            c.command(&[b"GET", b"n"], "GET").unwrap(),
            Reply::Bulk(None)
        ) {
            assert!(Instant::now() < until, "writer did not start");
        }
        let result = redis_checkpoint(r.port, T);
        stop.store(true, Ordering::Relaxed);
        drop(r); // unblocks a writer stuck on a full socket
        writer.join().unwrap();
        match result {
            Err(StateError::NotAtRest(m)) => {
                assert!(m.contains("between SAVE and DEBUG DIGEST"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn client_list_parsing_is_tolerant_and_strict_where_it_must() {
        let idle = "id=7 addr=10.0.0.5:4000 laddr=10.0.0.1:6379 fd=8 name= age=3 idle=3 flags=N db=0 sub=0 psub=0 multi=-1 qbuf=0 qbuf-free=0 obl=0 oll=0 omem=0 events=r cmd=get";
        // Old Redis: no ssub, watch, resp, argv-mem. Accepted.
        assert_eq!(at_rest(idle, 1, |_| false), Ok(()));
        // Unknown fields and odd tokens are ignored; CRLF and blank lines too.
        let newer = format!("{idle} watch=0 ssub=0 resp=2 argv-mem=0 io-thread=0 tot-net-in=99 lib-name=x junk\r\n\r\n");
        assert_eq!(at_rest(&newer, 1, |_| false), Ok(()));
        for (field, bad) in [
            ("watch", "watch=2"),
            ("ssub", "ssub=1"),
            ("resp", "resp=3"),
            ("argv-mem", "argv-mem=5"),
            ("flags", "flags=P"),
            ("flags", "flags=t"),
            ("obl", "obl=12"),
            ("oll", "oll=1"),
            ("db", "db=x"),
        ] {
            let key = bad.split('=').next().unwrap();
            let line: String = newer
                .lines()
                .next()
                .unwrap()
                .split(' ')
                .map(|t| {
                    if t.split('=').next() == Some(key) {
                        bad
                    } else {
                        t
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
            match at_rest(&line, 1, |_| false) {
                Err(StateError::NotAtRest(m)) => {
                    assert!(
                        m.contains("client 10.0.0.5:4000 (id 7)") && m.contains(field),
                        "{bad}: {m}"
                    )
                }
                other => panic!("{bad}: {other:?}"),
            }
            // Exempt by address, or our own id: accepted.
            assert_eq!(at_rest(&line, 1, |a| a == "10.0.0.5:4000"), Ok(()));
            assert_eq!(at_rest(&line, 7, |_| false), Ok(()));
        }
        // A field every supported Redis prints is missing: not a transient
        // condition.
        let no_qbuf = idle.replace(" qbuf=0", "");
        assert!(
            matches!(at_rest(&no_qbuf, 1, |_| false), Err(StateError::Failed(m)) if m.contains("qbuf"))
        );
        let no_id = idle.replace("id=7 ", "");
        assert!(matches!(
            at_rest(&no_id, 1, |_| false),
            Err(StateError::Failed(_))
        ));
    }

    #[test]
    fn local_addresses() {
        for a in [
            "127.0.0.1:5000",
            "127.1.2.3:1",
            "[::1]:6379",
            "[::ffff:127.0.0.1]:9",
            "/run/redis.sock:0",
        ] {
            assert!(is_local_addr(a), "{a}");
        }
        for a in [
            "10.0.0.1:5000",
            "198.19.0.1:6379",
            "[fe80::1]:1",
            "[2001:db8::1]:80",
            "garbage",
            "",
        ] {
            assert!(!is_local_addr(a), "{a}");
        }
    }

    #[test]
    fn info_persistence_changes() {
        let info = "# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:12\r\nrdb_bgsave_in_progress:0\r\n";
        assert_eq!(changes_since_save(info), Ok(12));
        assert!(changes_since_save("# Persistence\r\n").is_err());
    }

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        RespReader::new(bytes).read_reply(None)
    }

    #[test]
    fn resp_replies() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Reply::Status("OK".into()));
        assert_eq!(
            parse(b"-ERR bad thing\r\n").unwrap(),
            Reply::Error("ERR bad thing".into())
        );
        assert_eq!(parse(b":-42\r\n").unwrap(), Reply::Int(-42));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(parse(b"*-1\r\n").unwrap(), Reply::Array(None));
        assert_eq!(parse(b"$0\r\n\r\n").unwrap(), Reply::Bulk(Some(vec![])));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n").unwrap(),
            Reply::Bulk(Some(b"a\r\nb".to_vec()))
        );
        assert_eq!(
            parse(b"*3\r\n:1\r\n*2\r\n$1\r\nx\r\n$-1\r\n*0\r\n").unwrap(),
            Reply::Array(Some(vec![
                Reply::Int(1),
                Reply::Array(Some(vec![
                    Reply::Bulk(Some(b"x".to_vec())),
                    Reply::Bulk(None)
                ])),
                Reply::Array(Some(vec![])),
            ]))
        );
        // A reply split across many reads, and larger than the buffer.
        let big = vec![b'z'; 200_000];
        let mut wire = format!("${}\r\n", big.len()).into_bytes();
        wire.extend_from_slice(&big);
        wire.extend_from_slice(b"\r\n");
        assert_eq!(parse(&wire).unwrap(), Reply::Bulk(Some(big)));
        let long_line = format!("+{}\r\n", "s".repeat(100_000));
        assert_eq!(
            parse(long_line.as_bytes()).unwrap(),
            Reply::Status("s".repeat(100_000))
        );
        // Truncated and malformed input are errors, never panics.
        for bad in [
            &b"$5\r\nab"[..],
            b"$5\r\nabcdeXY",
            b"*2\r\n:1\r\n",
            b"+OK",
            b"\r\n",
            b":x\r\n",
            b"%1\r\n+a\r\n+b\r\n",
            b"$99999999999\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = "*1\r\n".repeat(100) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
        // Pipelined replies come out one at a time, in order.
        let mut r = RespReader::new(&b"+A\r\n:2\r\n$1\r\nc\r\n"[..]);
        assert_eq!(r.read_reply(None).unwrap(), Reply::Status("A".into()));
        assert_eq!(r.read_reply(None).unwrap(), Reply::Int(2));
        assert_eq!(
            r.read_reply(None).unwrap(),
            Reply::Bulk(Some(b"c".to_vec()))
        );
        assert!(r.read_reply(None).is_err());
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&mut out, &[b"SET", b"k", b"a b\r\n"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\na b\r\n\r\n");
    }

    #[test]
    fn crc64_and_rdb_checks() {
        // Redis's own test vector (src/crc64.c).
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        // Slice-by-8 agrees with byte-at-a-time on every length and split.
        let data: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_le_bytes()[0])
            .collect();
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 999, 1000] {
            let whole = crc64(0, &data[..len]);
            let mut bytewise = 0u64;
            for &b in &data[..len] {
                bytewise = crc64(bytewise, &[b]);
            }
            assert_eq!(whole, bytewise, "len {len}");
        }
        let mut rdb = b"REDIS0010\xfa\x09redis-ver\x067.0.15\xff".to_vec();
        let sum = crc64(0, &rdb);
        rdb.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(rdb_verify(&rdb), Ok(()));
        let mut unsummed = rdb.clone();
        let n = unsummed.len();
        unsummed[n - 8..].fill(0);
        assert_eq!(rdb_verify(&unsummed), Ok(()));
        let mut bad = rdb.clone();
        bad[12] ^= 1;
        assert!(matches!(rdb_verify(&bad), Err(StateError::Failed(m)) if m.contains("checksum")));
        assert!(rdb_verify(&rdb[..rdb.len() - 1]).is_err());
        assert!(rdb_verify(b"NOTREDIS0010\xff\0\0\0\0\0\0\0\0").is_err());
    }

    /// One-off timing: `cargo test --release -p ftnet state::tests::timing -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn timing() {
        for n in [10_000, 100_000, 1_000_000] {
            let src = Redis::start();
            let t = Instant::now();
            populate(src.port, "", n);
            let fill = t.elapsed();
            let t = Instant::now();
            let snap = redis_checkpoint(src.port, T).unwrap();
            let cp = t.elapsed();
            let t = Instant::now();
            let d = redis_digest(src.port, T).unwrap();
            let dg = t.elapsed();
            let t = Instant::now();
            src.conn().command(&[b"SAVE"], "SAVE").unwrap();
            let save = t.elapsed();
            let t = Instant::now();
            rdb_verify(&snap.bytes).unwrap();
            let crc = t.elapsed();
            let dst = Redis::start();
            let t = Instant::now();
            let restored = redis_restore(dst.port, &snap.bytes, T).unwrap();
            let rs = t.elapsed();
            assert_eq!(restored, snap.digest);
            assert_eq!(d, snap.digest);
            eprintln!(
                "{n:>9} keys: rdb {:>11} bytes, checkpoint {cp:>10.1?}, restore {rs:>10.1?} \
                 (alone: SAVE {save:.1?}, DEBUG DIGEST {dg:.1?}, CRC check {crc:.1?}; populate {fill:.1?})",
                snap.bytes.len()
            );
        }
    }
}
