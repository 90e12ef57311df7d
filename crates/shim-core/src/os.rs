//! The operating system as the shim's logic sees it: the calls it makes on
//! its own behalf (the agent's socket, the kernel's accept queues, readiness
//! and byte counts of the server's sockets, the clock). `crates/shim`
//! implements it with libc; the tests with a fake.
//!
//! The server's own calls (its `read` into its buffer, its `accept` with its
//! address pointers) are not here: the logic decides, and the caller makes
//! the call, outside the section a panic is caught in (see [`crate::Shim`]).

use std::io;
use std::time::{Duration, Instant};

/// A file descriptor.
pub type Fd = i32;

/// Why the agent's socket could not be connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectError {
    /// Not now (no agent listening yet): try again later.
    Failed,
    /// The path does not fit a `sockaddr_un`: never.
    PathTooLong,
}

pub trait Os {
    /// The shim's monotonic clock.
    fn now(&self) -> Instant;
    /// Pause the calling thread (a short wait between polls).
    fn sleep(&self, d: Duration);
    /// This process is a forked child (Redis' BGSAVE): it must not touch the
    /// parent's order.
    fn in_child(&self) -> bool;
    /// Set the calling thread's `errno` (an answer that says `EAGAIN`).
    fn set_errno(&self, errno: i32);
    /// The calling thread's id (`gettid(2)`), never 0.
    fn thread(&self) -> i32;
    /// The calling thread is the process's first (its id is the pid).
    fn initial_thread(&self) -> bool;

    /// Connect a non-blocking, close-on-exec Unix stream socket to the
    /// agent at `path`.
    fn connect_agent(&self, path: &[u8]) -> Result<Fd, ConnectError>;
    /// read(2) on the shim's own descriptor (the agent's socket); `EAGAIN`
    /// as an error of that raw OS code.
    fn read(&self, fd: Fd, buf: &mut [u8]) -> io::Result<usize>;
    /// send(2) that never blocks nor raises SIGPIPE; what does not fit is lost.
    fn send(&self, fd: Fd, buf: &[u8]);
    /// close(2) of a descriptor the shim owns.
    fn close(&self, fd: Fd);

    /// Take a connection the kernel has already queued on `listener`
    /// (non-blocking and close-on-exec), without ever blocking, with its
    /// peer's IPv4 address and port (host order) as accept(2) reports them
    /// (`None`: not IPv4). accept(2) reports them also for a connection
    /// the client reset while it was queued, where getpeername(2) fails
    /// (`ENOTCONN`): the shim must still know which connection it is.
    fn accept_queued(&self, listener: Fd) -> Option<(Fd, Option<(u32, u16)>)>;
    /// A TCP socket connected to nothing (non-blocking, close-on-exec),
    /// given to the server in place of a connection the client reset
    /// before the kernel here gave it (see `State::stands_in`).
    fn stand_in(&self) -> Option<Fd>;
    /// IPv4 address and port of the local end of `fd` (host order).
    fn local_addr(&self, fd: Fd) -> Option<(u32, u16)>;
    /// Bytes that have arrived on `fd` and were not read (FIONREAD).
    fn unread(&self, fd: Fd) -> u32;
    /// The peer's FIN is in (or the connection failed): every byte has arrived.
    fn peer_closed(&self, fd: Fd) -> bool;
    /// `fd` is in blocking mode.
    fn is_blocking(&self, fd: Fd) -> bool;
    /// `fd` is a TCP socket.
    fn is_tcp(&self, fd: Fd) -> bool;
    /// The real epoll_wait(2) (never the shim's).
    fn epoll_wait(&self, epfd: Fd, events: &mut [libc::epoll_event], timeout_ms: i32) -> i32;
    /// The real poll(2) (never the shim's).
    fn poll(&self, fds: &mut [libc::pollfd], timeout_ms: i32) -> i32;
}
