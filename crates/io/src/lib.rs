//! The I/O side of the router: the TUN device it reads client and replica
//! packets from (with virtio-net offloads, so the kernel hands over 64 KB
//! GSO super-packets), and the policy routing that steers packets into it,
//! both configured over rtnetlink (no `ip` command is run).
//!
//! Architecture invariant: this crate knows nothing about connections; it
//! moves [`ftnet_core::Packet`]s and configures the kernel.

mod device;
pub mod netlink;
mod routing;
pub mod steer;
mod tun;

pub use device::{Device, MemDevice};
pub use netlink::{link_show, Link};
pub use routing::{remove_recorded, rules_at, Binding, Plan, ReplicaRules, Routing, RoutingSpec};
pub use tun::{Tun, TunOptions, RECV_BUF_LEN};

use std::io;

/// What can go wrong while setting up or using the kernel side.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An ioctl or open on `/dev/net/tun` failed.
    #[error("{op} for TUN device {name:?}: {source}")]
    Tun {
        op: &'static str,
        name: String,
        #[source]
        source: io::Error,
    },
    /// The TUN name is empty, too long for `IFNAMSIZ` or has odd bytes.
    #[error("invalid interface name {0:?}: 1 to 15 bytes, no '/', ':' or whitespace")]
    BadName(String),
    /// The kernel refused a netlink request (or it could not be sent);
    /// `cmd` is the equivalent `ip` command line.
    #[error("`{cmd}` failed (netlink): {source}")]
    Netlink {
        cmd: String,
        #[source]
        source: io::Error,
    },
    /// An external command (iproute2) exited with an error.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command {
        cmd: String,
        status: String,
        stderr: String,
    },
    /// An external command could not be started at all.
    #[error("could not run `{cmd}`: {source} (is iproute2 installed?)")]
    Spawn {
        cmd: String,
        #[source]
        source: io::Error,
    },
    /// The kernel refused an eBPF program.
    #[error("{what}: {source}{}", if verifier.is_empty() { String::new() } else { format!(" (verifier: {verifier})") })]
    Bpf {
        what: &'static str,
        verifier: String,
        #[source]
        source: io::Error,
    },
    /// A sysctl file could not be read or written.
    #[error("sysctl {path}: {source}")]
    Sysctl {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Run `ip ARGS...`; on failure the error names the full command line and
/// its stderr, because that is what an operator needs to fix it. For the
/// lab and the tests: the router itself configures the kernel over
/// rtnetlink ([`netlink`]) and runs no `ip`.
pub fn ip(args: &[&str]) -> Result<String, Error> {
    run("ip", args)
}

/// Run a command to completion, returning stdout, or an error naming it.
pub fn run(prog: &str, args: &[&str]) -> Result<String, Error> {
    let cmd = std::iter::once(prog)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let out = std::process::Command::new(prog)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            cmd: cmd.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
