//! `libftnet_shim.so`: loaded with `LD_PRELOAD` into a single-threaded,
//! event-driven server by `ftnet run`, it hands the server its input in the
//! router's total order. What it does, and all of its state and policy,
//! is `ftnet_shim_core` (no unsafe code, tested with a fake OS); this crate
//! is the thin part that must be unsafe:
//!
//! - [`LibcOs`], the `Os` the logic runs on: the real libc functions
//!   (found with `dlsym(RTLD_NEXT)`, since this library exports their
//!   names) and the calls the logic makes on its own behalf;
//! - the exported `extern "C"` functions (`read`, `recv`, `readv`,
//!   `accept`, `accept4`, `listen`, `close`, `epoll_ctl`, `epoll_wait`,
//!   `poll`, `select`; and the server's clock, random bytes and pid:
//!   `clock_gettime`, `gettimeofday`, `time`, `getrandom`, `getentropy`,
//!   `open`, `open64`, `openat`, `fopen`, `fopen64`, `getpid`): each converts its arguments (pointers to slices,
//!   `fd_set`s to `pollfd`s) and hands `ftnet_shim_core::Shim` the real
//!   call as a closure. The logic runs inside `catch_unwind`; the real call
//!   runs outside it, at most once; on a panic (a shim bug) the call falls
//!   through to libc, and so does every later one. A bug never unwinds
//!   into the server or aborts it.

// The interposed functions are libc's own, with libc's contracts (see
// their man pages); each forwards to the real one.
#![allow(clippy::missing_safety_doc)]

use ftnet_shim_core::{ConnectError, Fd, GroupRandom, Hello, Os, Shim, POLL_INPUT};
use libc::{c_int, c_void, size_t, sockaddr, socklen_t, ssize_t};
use std::cell::Cell;
use std::io;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- real libc

macro_rules! real {
    ($name:ident, $cname:literal, fn($($arg:ty),*) -> $ret:ty) => {
        fn $name() -> Option<unsafe extern "C" fn($($arg),*) -> $ret> {
            static P: AtomicUsize = AtomicUsize::new(0);
            let mut p = P.load(Ordering::Relaxed);
            if p == 0 {
                // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no
                // other preconditions; it returns the next definition or null.
                p = unsafe { libc::dlsym(libc::RTLD_NEXT, $cname.as_ptr()) } as usize;
                P.store(p, Ordering::Relaxed);
            }
            if p == 0 {
                None
            } else {
                // SAFETY: the symbol is libc's function of this exact signature.
                Some(unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> $ret>(p) })
            }
        }
    };
}

real!(
    real_read,
    c"read",
    fn(c_int, *mut c_void, size_t) -> ssize_t
);
real!(
    real_recv,
    c"recv",
    fn(c_int, *mut c_void, size_t, c_int) -> ssize_t
);
real!(
    real_readv,
    c"readv",
    fn(c_int, *const libc::iovec, c_int) -> ssize_t
);
real!(
    real_accept,
    c"accept",
    fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int
);
real!(
    real_accept4,
    c"accept4",
    fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int
);
real!(real_close, c"close", fn(c_int) -> c_int);
real!(real_listen, c"listen", fn(c_int, c_int) -> c_int);
real!(
    real_epoll_ctl,
    c"epoll_ctl",
    fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int
);
real!(
    real_poll,
    c"poll",
    fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int
);
real!(
    real_select,
    c"select",
    fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int
);
real!(
    real_clock_gettime,
    c"clock_gettime",
    fn(libc::clockid_t, *mut libc::timespec) -> c_int
);
real!(
    real_gettimeofday,
    c"gettimeofday",
    fn(*mut libc::timeval, *mut c_void) -> c_int
);
real!(real_time, c"time", fn(*mut libc::time_t) -> libc::time_t);
real!(real_getpid, c"getpid", fn() -> libc::pid_t);
real!(
    real_getrandom,
    c"getrandom",
    fn(*mut c_void, size_t, libc::c_uint) -> ssize_t
);
real!(
    real_getentropy,
    c"getentropy",
    fn(*mut c_void, size_t) -> c_int
);
real!(
    real_open,
    c"open",
    fn(*const libc::c_char, c_int, libc::mode_t) -> c_int
);
real!(
    real_open64,
    c"open64",
    fn(*const libc::c_char, c_int, libc::mode_t) -> c_int
);
real!(
    real_openat,
    c"openat",
    fn(c_int, *const libc::c_char, c_int, libc::mode_t) -> c_int
);
real!(
    real_fopen,
    c"fopen",
    fn(*const libc::c_char, *const libc::c_char) -> *mut libc::FILE
);
real!(
    real_fopen64,
    c"fopen64",
    fn(*const libc::c_char, *const libc::c_char) -> *mut libc::FILE
);
real!(
    real_epoll_wait,
    c"epoll_wait",
    fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int
);

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

fn enosys<R: From<i8>>() -> R {
    set_errno(libc::ENOSYS);
    R::from(-1)
}

/// The size of `T` as a socket address or option length.
fn socklen_of<T>() -> socklen_t {
    socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(socklen_t::MAX)
}

/// A real call, made at most once however often it is asked for (by the
/// logic, then by a fallback after a panic): a second ask gets the first
/// answer. So a read or an accept is never repeated.
struct Real<A, R, F: FnOnce(A) -> R> {
    call: Cell<Option<F>>,
    answer: Cell<Option<R>>,
    _arg: PhantomData<A>,
}

impl<A, R: Copy + From<i8>, F: FnOnce(A) -> R> Real<A, R, F> {
    fn new(call: F) -> Self {
        Real {
            call: Cell::new(Some(call)),
            answer: Cell::new(None),
            _arg: PhantomData,
        }
    }

    fn call(&self, arg: A) -> R {
        match self.call.take() {
            Some(f) => {
                let r = f(arg);
                self.answer.set(Some(r));
                r
            }
            // Asked again: the first answer (none only if the call itself
            // failed, which libc's do not: then "try again").
            None => self.answer.get().unwrap_or_else(|| {
                set_errno(libc::EAGAIN);
                R::from(-1)
            }),
        }
    }
}

// ---------------------------------------------------------------- the OS

/// Set in a forked child (Redis' BGSAVE): the child must not touch the
/// parent's order or its lock (another thread may have held it at the fork).
static IN_CHILD: AtomicBool = AtomicBool::new(false);

extern "C" fn after_fork_in_child() {
    IN_CHILD.store(true, Ordering::Relaxed);
}

/// The `Os` the shim runs on: libc, bypassing this library's own exports.
pub struct LibcOs;

/// The local IPv4 address and port of `fd` (host order).
fn sockname(fd: c_int) -> Option<(u32, u16)> {
    // SAFETY: sockaddr_in is plain old data; all zeroes is a valid value.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = socklen_of::<libc::sockaddr_in>();
    let p = (&mut sa as *mut libc::sockaddr_in).cast::<sockaddr>();
    // SAFETY: `sa` is a writable sockaddr_in of `len` bytes for the call.
    let rc = unsafe { libc::getsockname(fd, p, &mut len) };
    if rc != 0 || i32::from(sa.sin_family) != libc::AF_INET {
        return None;
    }
    Some((u32::from_be(sa.sin_addr.s_addr), u16::from_be(sa.sin_port)))
}

impl Os for LibcOs {
    fn now(&self) -> Instant {
        let _inside = Inside::enter();
        Instant::now()
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }

    fn in_child(&self) -> bool {
        #[cfg(test)]
        tests::maybe_fail();
        IN_CHILD.load(Ordering::Relaxed)
    }

    fn set_errno(&self, errno: i32) {
        set_errno(errno);
    }

    fn thread(&self) -> i32 {
        THREAD_ID.with(|t| {
            if t.get() == 0 {
                // SAFETY: gettid(2) takes no argument and cannot fail.
                let id = unsafe { libc::syscall(libc::SYS_gettid) };
                t.set(i32::try_from(id).unwrap_or(-1));
            }
            t.get()
        })
    }

    fn initial_thread(&self) -> bool {
        // The kernel's pid, not the group's (this library's getpid).
        // SAFETY: getpid(2) takes no argument and cannot fail.
        let pid = unsafe { libc::syscall(libc::SYS_getpid) };
        i64::from(self.thread()) == pid
    }

    fn connect_agent(&self, path: &[u8]) -> Result<Fd, ConnectError> {
        // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
        let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        if path.len() >= sa.sun_path.len() {
            return Err(ConnectError::PathTooLong);
        }
        sa.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).unwrap_or_default();
        for (d, s) in sa.sun_path.iter_mut().zip(path) {
            *d = *s as libc::c_char;
        }
        // SAFETY: plain socket(2).
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(ConnectError::Failed);
        }
        let len = socklen_of::<libc::sockaddr_un>();
        // SAFETY: `sa` is a valid sockaddr_un of `len` bytes for the call.
        if unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_un).cast(), len) } != 0 {
            self.close(fd);
            return Err(ConnectError::Failed);
        }
        Ok(fd)
    }

    fn read(&self, fd: Fd, buf: &mut [u8]) -> io::Result<usize> {
        let Some(rd) = real_read() else {
            return Err(io::Error::from_raw_os_error(libc::ENOSYS));
        };
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { rd(fd, buf.as_mut_ptr().cast(), buf.len()) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    fn send(&self, fd: Fd, buf: &[u8]) {
        // SAFETY: `buf` is readable for its length; MSG_DONTWAIT: never block
        // the server.
        unsafe {
            libc::send(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
    }

    fn close(&self, fd: Fd) {
        if let Some(c) = real_close() {
            // SAFETY: the shim's own fd, no pointers.
            unsafe { c(fd) };
        }
    }

    fn stand_in(&self) -> Option<Fd> {
        // SAFETY: plain socket(2), no pointers.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        (fd >= 0).then_some(fd)
    }

    fn accept_queued(&self, listener: Fd) -> Option<(Fd, Option<(u32, u16)>)> {
        // The server's listening socket may be blocking: only accept what
        // is already queued.
        let mut p = [libc::pollfd {
            fd: listener,
            events: libc::POLLIN,
            revents: 0,
        }];
        if self.poll(&mut p, 0) <= 0 {
            return None;
        }
        let acc = real_accept4()?;
        // SAFETY: sockaddr_in is plain old data; all zeroes is a valid value.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = socklen_of::<libc::sockaddr_in>();
        // SAFETY: `sa` is a writable sockaddr_in of `len` bytes, as
        // accept4(2) requires; it writes at most `len` bytes.
        let fd = unsafe {
            acc(
                listener,
                (&mut sa as *mut libc::sockaddr_in).cast::<sockaddr>(),
                &mut len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        // The address accept(2) reports (a connection reset while queued
        // still has it; getpeername(2) would fail on it).
        let peer = (i32::from(sa.sin_family) == libc::AF_INET
            && usize::try_from(len).is_ok_and(|l| l >= std::mem::size_of::<libc::sockaddr_in>()))
        .then(|| (u32::from_be(sa.sin_addr.s_addr), u16::from_be(sa.sin_port)));
        Some((fd, peer))
    }

    fn local_addr(&self, fd: Fd) -> Option<(u32, u16)> {
        sockname(fd)
    }

    fn unread(&self, fd: Fd) -> u32 {
        let mut n: c_int = 0;
        // SAFETY: FIONREAD writes one int through the pointer.
        if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } < 0 {
            return 0;
        }
        u32::try_from(n).unwrap_or(0)
    }

    fn peer_closed(&self, fd: Fd) -> bool {
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLRDHUP,
            revents: 0,
        }];
        let n = self.poll(&mut p, 0);
        n == 1 && p[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    fn is_blocking(&self, fd: Fd) -> bool {
        // SAFETY: F_GETFL takes no pointer.
        unsafe { libc::fcntl(fd, libc::F_GETFL) & libc::O_NONBLOCK == 0 }
    }

    fn is_tcp(&self, fd: Fd) -> bool {
        let mut proto: c_int = 0;
        let mut len = socklen_of::<c_int>();
        // SAFETY: `proto` and `len` are live locals of the sizes given.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PROTOCOL,
                (&raw mut proto).cast(),
                &raw mut len,
            )
        };
        rc == 0 && proto == libc::IPPROTO_TCP
    }

    fn epoll_wait(&self, epfd: Fd, events: &mut [libc::epoll_event], timeout_ms: i32) -> i32 {
        let Some(wait) = real_epoll_wait() else {
            return enosys();
        };
        let max = c_int::try_from(events.len()).unwrap_or(c_int::MAX);
        // SAFETY: `events` is writable for `max` events.
        unsafe { wait(epfd, events.as_mut_ptr(), max, timeout_ms) }
    }

    fn poll(&self, fds: &mut [libc::pollfd], timeout_ms: i32) -> i32 {
        let Some(poll) = real_poll() else {
            return enosys();
        };
        let n = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
        // SAFETY: `fds` is a valid, writable array of its length.
        unsafe { poll(fds.as_mut_ptr(), n, timeout_ms) }
    }
}

static SHIM: OnceLock<Shim<LibcOs>> = OnceLock::new();

fn shim() -> &'static Shim<LibcOs> {
    SHIM.get_or_init(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        let path = std::env::var_os("FTNET_SHIM_SOCKET").map(|p| {
            use std::os::unix::ffi::OsStrExt;
            p.as_bytes().to_vec()
        });
        Shim::new(LibcOs, path, env_hello())
    })
}

/// The agent's hello, as `ftnet run` passed it (`FTNET_SHIM_HELLO`): read
/// once, without allocating (the first clock call may come from inside the
/// server's allocator).
fn env_hello() -> Option<Hello> {
    static HELLO: OnceLock<Option<Hello>> = OnceLock::new();
    *HELLO.get_or_init(|| {
        // SAFETY: getenv with a NUL-terminated name; the answer is null or a
        // NUL-terminated string that lives while the environment is not
        // changed (read at once).
        let p = unsafe { libc::getenv(c"FTNET_SHIM_HELLO".as_ptr()) };
        if p.is_null() {
            return None;
        }
        // SAFETY: not null, NUL-terminated (getenv).
        Hello::from_hex(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
    })
}

/// Run `f`; a panic of the shim's that escaped the logic's own guard (in
/// the shim's entry, e.g. its first initialisation) falls through to
/// `libc` rather than unwind into the server.
fn last_resort<R>(f: impl FnOnce() -> R, libc: impl FnOnce() -> R) -> R {
    let _inside = Inside::enter();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| libc())
}

thread_local! {
    /// This thread runs the shim's own code: the time, pid and random
    /// bytes it asks for (`Instant::now`, `std::process::id`, ...) are the
    /// kernel's, never the server's (and never a second entry into the
    /// shim's lock).
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// The calling thread's id (0: not asked yet). A forked child's copy
    /// is its parent's thread's, but a child never sees the group's clock.
    static THREAD_ID: Cell<i32> = const { Cell::new(0) };
}

struct Inside(bool);

impl Inside {
    fn enter() -> Inside {
        Inside(INSIDE.with(|i| i.replace(true)))
    }
    fn now() -> bool {
        INSIDE.with(Cell::get)
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let was = self.0;
        INSIDE.with(|i| i.set(was));
    }
}

// ---------------------------------------------------------------- exports
//
// Every exported function converts its arguments and hands the shim the
// real call (see the crate documentation). The fallback of `last_resort`
// is only reached when the shim itself fails before it could run the
// logic (`Shim` catches what the logic does): then no real call was made.

// ------------------------------------------------- time, randomness, pid
//
// The server's clock, random bytes and pid are the group's (see
// `ftnet_shim_core::Shim::time_us`, `random`, `pid`): the same at the same
// point of the input on every replica. Not interposed: the vDSO called
// directly (no libc), `rdtsc`, the `getrandom`/`clock_gettime` system
// calls made with syscall(2), `arc4random`, and the shim's own calls
// (`Inside`).

/// The time the server sees on clock `id`, µs since the Unix epoch
/// (`None`: the kernel's). Never initialises the shim, never allocates:
/// the allocator reads the clock too, from inside malloc.
fn server_time(id: libc::clockid_t) -> Option<u64> {
    if Inside::now() || !ftnet_shim_core::ticked_clock(id) || IN_CHILD.load(Ordering::Relaxed) {
        return None;
    }
    match SHIM.get() {
        Some(s) => last_resort(|| s.time_us(), || None),
        // Before the server's first interposed call: the hello's epoch.
        None => env_hello()
            .filter(|h| h.ticks)
            .map(|h| h.epoch_ms.saturating_mul(1000)),
    }
}

/// # Safety
/// clock_gettime(2)'s contract: `tp` is writable.
#[no_mangle]
pub unsafe extern "C" fn clock_gettime(id: libc::clockid_t, tp: *mut libc::timespec) -> c_int {
    if !tp.is_null() {
        if let Some(us) = server_time(id) {
            // SAFETY: `tp` is not null and writable (clock_gettime(2)).
            unsafe {
                (*tp).tv_sec = libc::time_t::try_from(us / 1_000_000).unwrap_or(libc::time_t::MAX);
                (*tp).tv_nsec = libc::c_long::try_from(us % 1_000_000 * 1000).unwrap_or(0);
            }
            return 0;
        }
    }
    // SAFETY: the caller's arguments.
    real_clock_gettime().map_or_else(enosys, |f| unsafe { f(id, tp) })
}

/// # Safety
/// gettimeofday(2)'s contract: `tv` and `tz` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn gettimeofday(tv: *mut libc::timeval, tz: *mut c_void) -> c_int {
    if !tv.is_null() && tz.is_null() {
        if let Some(us) = server_time(libc::CLOCK_REALTIME) {
            // SAFETY: `tv` is not null and writable.
            unsafe {
                (*tv).tv_sec = libc::time_t::try_from(us / 1_000_000).unwrap_or(libc::time_t::MAX);
                (*tv).tv_usec = libc::suseconds_t::try_from(us % 1_000_000).unwrap_or(0);
            }
            return 0;
        }
    }
    // SAFETY: the caller's arguments.
    real_gettimeofday().map_or_else(enosys, |f| unsafe { f(tv, tz) })
}

/// # Safety
/// time(2)'s contract: `t` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn time(t: *mut libc::time_t) -> libc::time_t {
    if let Some(us) = server_time(libc::CLOCK_REALTIME) {
        let secs = libc::time_t::try_from(us / 1_000_000).unwrap_or(libc::time_t::MAX);
        if !t.is_null() {
            // SAFETY: `t` is not null and writable.
            unsafe { *t = secs };
        }
        return secs;
    }
    // SAFETY: the caller's argument.
    real_time().map_or_else(|| -1, |f| unsafe { f(t) })
}

/// getpid(2): the same pid on every replica (a forked child sees its own).
#[no_mangle]
pub extern "C" fn getpid() -> libc::pid_t {
    if !Inside::now() && !IN_CHILD.load(Ordering::Relaxed) {
        if let Some(h) = env_hello() {
            return h.pid();
        }
    }
    match real_getpid() {
        // SAFETY: no arguments.
        Some(f) => unsafe { f() },
        // SAFETY: getpid(2) takes no arguments.
        None => libc::pid_t::try_from(unsafe { libc::syscall(libc::SYS_getpid) }).unwrap_or(-1),
    }
}

/// The group's random bytes, one stream per process.
static RANDOM: std::sync::Mutex<GroupRandom> = std::sync::Mutex::new(GroupRandom::new());

/// Fill `len` bytes at `p` with the group's random bytes; `false`: the
/// kernel's are to be used (no hello, a forked child, the shim's own
/// call). Allocates nothing.
///
/// # Safety
/// `p` is writable for `len` bytes.
unsafe fn group_random(p: *mut c_void, len: size_t) -> bool {
    if Inside::now() || p.is_null() || IN_CHILD.load(Ordering::Relaxed) {
        return false;
    }
    let Some(h) = env_hello() else {
        return false;
    };
    // SAFETY: writable for `len` bytes (the caller's contract).
    let buf = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    RANDOM
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .fill(&h.seed, buf);
    true
}

/// # Safety
/// getrandom(2)'s contract: `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn getrandom(buf: *mut c_void, len: size_t, flags: libc::c_uint) -> ssize_t {
    // SAFETY: the caller's contract.
    if unsafe { group_random(buf, len) } {
        return ssize_t::try_from(len).unwrap_or(ssize_t::MAX);
    }
    // SAFETY: the caller's arguments.
    real_getrandom().map_or_else(enosys, |f| unsafe { f(buf, len, flags) })
}

/// # Safety
/// getentropy(3)'s contract: `buf` is writable for `len` (≤ 256) bytes.
#[no_mangle]
pub unsafe extern "C" fn getentropy(buf: *mut c_void, len: size_t) -> c_int {
    // SAFETY: the caller's contract.
    if len <= 256 && unsafe { group_random(buf, len) } {
        return 0;
    }
    // SAFETY: the caller's arguments.
    real_getentropy().map_or_else(enosys, |f| unsafe { f(buf, len) })
}

/// Descriptors of `/dev/urandom` and `/dev/random` the server opened: its
/// reads of them are the group's random bytes.
static RANDOM_FDS: std::sync::Mutex<Vec<c_int>> = std::sync::Mutex::new(Vec::new());
static RANDOM_FD_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Is `path` one of the kernel's random devices?
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn is_random_device(path: *const libc::c_char) -> bool {
    if path.is_null() || Inside::now() {
        return false;
    }
    // SAFETY: NUL-terminated (the caller's contract).
    let p = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    p == b"/dev/urandom" || p == b"/dev/random"
}

fn note_random_fd(fd: c_int) -> c_int {
    if fd >= 0 {
        let mut v = RANDOM_FDS.lock().unwrap_or_else(|p| p.into_inner());
        v.push(fd);
        RANDOM_FD_COUNT.store(v.len(), Ordering::Release);
    }
    fd
}

fn forget_random_fd(fd: c_int) {
    if RANDOM_FD_COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut v = RANDOM_FDS.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|f| *f != fd);
    RANDOM_FD_COUNT.store(v.len(), Ordering::Release);
}

fn is_random_fd(fd: c_int) -> bool {
    RANDOM_FD_COUNT.load(Ordering::Acquire) > 0
        && RANDOM_FDS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&fd)
}

/// # Safety
/// open(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn open(
    path: *const libc::c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    let fd = real_open().map_or_else(enosys, |f| unsafe { f(path, flags, mode) });
    // SAFETY: `path` is NUL-terminated (open(2)'s contract).
    if unsafe { is_random_device(path) } {
        return note_random_fd(fd);
    }
    fd
}

/// # Safety
/// open(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn open64(
    path: *const libc::c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    let fd = real_open64().map_or_else(enosys, |f| unsafe { f(path, flags, mode) });
    // SAFETY: `path` is NUL-terminated (open(2)'s contract).
    if unsafe { is_random_device(path) } {
        return note_random_fd(fd);
    }
    fd
}

/// # Safety
/// openat(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn openat(
    dir: c_int,
    path: *const libc::c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    let fd = real_openat().map_or_else(enosys, |f| unsafe { f(dir, path, flags, mode) });
    // SAFETY: `path` is NUL-terminated (openat(2)'s contract).
    if unsafe { is_random_device(path) } {
        return note_random_fd(fd);
    }
    fd
}

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut libc::c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const libc::c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const libc::c_char, io: CookieIo)
        -> *mut libc::FILE;
}

/// The read of a `FILE` opened on a random device: the group's bytes.
unsafe extern "C" fn random_cookie_read(
    _cookie: *mut c_void,
    buf: *mut libc::c_char,
    len: size_t,
) -> ssize_t {
    // SAFETY: stdio hands a buffer writable for `len` bytes.
    if unsafe { group_random(buf.cast(), len) } {
        return ssize_t::try_from(len).unwrap_or(ssize_t::MAX);
    }
    -1
}

/// `fopen` of a random device while the group's bytes are to be had: a
/// stream of them (glibc's stdio reads through its own `read`, which the
/// shim does not see).
///
/// # Safety
/// `path` and `mode` are NUL-terminated.
unsafe fn fopen_random(
    path: *const libc::c_char,
    mode: *const libc::c_char,
) -> Option<*mut libc::FILE> {
    // SAFETY: NUL-terminated (fopen(3)'s contract).
    if !unsafe { is_random_device(path) } || mode.is_null() {
        return None;
    }
    // Reading only, and only when the group's bytes are there (probe one).
    // SAFETY: NUL-terminated (fopen(3)'s contract).
    let m = unsafe { std::ffi::CStr::from_ptr(mode) }.to_bytes();
    if !m.starts_with(b"r") || m.contains(&b'+') {
        return None;
    }
    let mut probe = [0u8; 0];
    // SAFETY: a zero-length buffer.
    if !unsafe { group_random(probe.as_mut_ptr().cast(), 0) } {
        return None;
    }
    let io = CookieIo {
        read: Some(random_cookie_read),
        write: None,
        seek: None,
        close: None,
    };
    // SAFETY: a valid mode string and functions of glibc's signatures.
    let f = unsafe { fopencookie(std::ptr::null_mut(), c"r".as_ptr(), io) };
    (!f.is_null()).then_some(f)
}

/// # Safety
/// fopen(3)'s contract.
#[no_mangle]
pub unsafe extern "C" fn fopen(
    path: *const libc::c_char,
    mode: *const libc::c_char,
) -> *mut libc::FILE {
    // SAFETY: the caller's contract.
    if let Some(f) = unsafe { fopen_random(path, mode) } {
        return f;
    }
    // SAFETY: the caller's arguments.
    real_fopen().map_or(std::ptr::null_mut(), |f| unsafe { f(path, mode) })
}

/// # Safety
/// fopen(3)'s contract.
#[no_mangle]
pub unsafe extern "C" fn fopen64(
    path: *const libc::c_char,
    mode: *const libc::c_char,
) -> *mut libc::FILE {
    // SAFETY: the caller's contract.
    if let Some(f) = unsafe { fopen_random(path, mode) } {
        return f;
    }
    // SAFETY: the caller's arguments.
    real_fopen64().map_or(std::ptr::null_mut(), |f| unsafe { f(path, mode) })
}

/// # Safety
/// read(2)'s contract: `buf` is writable for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: `buf` is writable for `count` bytes (read(2)'s contract).
    if is_random_fd(fd) && unsafe { group_random(buf, count) } {
        return ssize_t::try_from(count).unwrap_or(ssize_t::MAX);
    }
    let Some(real) = real_read() else {
        return enosys();
    };
    // SAFETY: the caller's arguments, under read(2)'s contract; a limit
    // only shortens the buffer.
    let call =
        |limit: Option<usize>| unsafe { real(fd, buf, limit.map_or(count, |b| count.min(b))) };
    let real = Real::new(call);
    last_resort(
        || shim().read("read", fd, false, |l| real.call(l)),
        || real.call(None),
    )
}

/// # Safety
/// recv(2)'s contract: `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    let Some(real) = real_recv() else {
        return enosys();
    };
    // SAFETY: the caller's arguments, under recv(2)'s contract; a limit
    // only shortens the buffer.
    let call =
        |limit: Option<usize>| unsafe { real(fd, buf, limit.map_or(len, |b| len.min(b)), flags) };
    let real = Real::new(call);
    let peek = flags & libc::MSG_PEEK != 0;
    last_resort(
        || shim().read("recv", fd, peek, |l| real.call(l)),
        || real.call(None),
    )
}

/// # Safety
/// readv(2)'s contract: `iov` points to `iovcnt` iovecs of writable buffers.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, iovcnt: c_int) -> ssize_t {
    let Some(real) = real_readv() else {
        return enosys();
    };
    let call = |limit: Option<usize>| {
        let (Some(b), Ok(cnt)) = (limit, usize::try_from(iovcnt)) else {
            // SAFETY: the caller's arguments, under readv(2)'s contract.
            return unsafe { real(fd, iov, iovcnt) };
        };
        if b == 0 || iov.is_null() || cnt == 0 {
            // SAFETY: as above.
            return unsafe { real(fd, iov, iovcnt) };
        }
        // Shorten the vector to the limit.
        // SAFETY: `iov` is not null and points to `iovcnt` iovecs (readv(2)).
        let src = unsafe { std::slice::from_raw_parts(iov, cnt) };
        let mut left = b;
        let mut v = Vec::with_capacity(src.len());
        for x in src {
            if left == 0 {
                break;
            }
            let l = x.iov_len.min(left);
            v.push(libc::iovec {
                iov_base: x.iov_base,
                iov_len: l,
            });
            left -= l;
        }
        let n = c_int::try_from(v.len()).unwrap_or(c_int::MAX);
        // SAFETY: `v` holds prefixes of the caller's writable buffers.
        unsafe { real(fd, v.as_ptr(), n) }
    };
    let real = Real::new(call);
    last_resort(
        || shim().read("readv", fd, false, |l| real.call(l)),
        || real.call(None),
    )
}

/// Give the caller `cfd` as accept4 would have: its address and flags.
/// `peer` is the address accept(2) reported when the shim took the
/// connection from the kernel; getpeername(2) is asked only without one
/// (it fails on a connection the client reset while it was queued, where
/// accept(2) still reports the address).
///
/// # Safety
/// `addr`/`len` are null or valid as accept(2) requires.
unsafe fn finish_accept(
    cfd: c_int,
    peer: Option<(u32, u16)>,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    if !addr.is_null() && !len.is_null() {
        match peer {
            Some((ip, port)) => {
                // SAFETY: sockaddr_in is plain old data; all zeroes is valid.
                let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
                sa.sin_family = libc::sa_family_t::try_from(libc::AF_INET).unwrap_or(2);
                sa.sin_port = port.to_be();
                sa.sin_addr.s_addr = ip.to_be();
                let full = std::mem::size_of::<libc::sockaddr_in>();
                // SAFETY: `len` is valid (accept(2)'s contract); as accept(2)
                // does, at most `*len` bytes are written to `addr`, and
                // `*len` then says the address's full size.
                unsafe {
                    let room = usize::try_from(*len).unwrap_or(0);
                    std::ptr::copy_nonoverlapping(
                        (&raw const sa).cast::<u8>(),
                        addr.cast::<u8>(),
                        room.min(full),
                    );
                    *len = socklen_of::<libc::sockaddr_in>();
                }
            }
            // SAFETY: the caller's pointers, valid as accept(2) requires.
            None => unsafe {
                libc::getpeername(cfd, addr, len);
            },
        }
    }
    // We accepted non-blocking and close-on-exec; give the caller what it asked for.
    if flags & libc::SOCK_NONBLOCK == 0 {
        // SAFETY: fcntl with integer arguments on our descriptor.
        unsafe {
            let fl = libc::fcntl(cfd, libc::F_GETFL);
            libc::fcntl(cfd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    if flags & libc::SOCK_CLOEXEC == 0 {
        // SAFETY: as above.
        unsafe { libc::fcntl(cfd, libc::F_SETFD, 0) };
    }
    cfd
}

/// accept(2) or accept4(2) (`four`) through the shim.
///
/// # Safety
/// accept(2)'s contract: `addr` and `len` are null or valid.
unsafe fn accept_common(
    call: &str,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
    four: bool,
) -> c_int {
    let real = Real::new(|()| {
        if four {
            // SAFETY: the caller's arguments, under accept4(2)'s contract.
            real_accept4().map_or_else(enosys, |f| unsafe { f(fd, addr, len, flags) })
        } else {
            // SAFETY: the caller's arguments, under accept(2)'s contract.
            real_accept().map_or_else(enosys, |f| unsafe { f(fd, addr, len) })
        }
    });
    last_resort(
        || {
            shim().accept(
                call,
                fd,
                || real.call(()),
                // SAFETY: the caller's pointers (accept(2)'s contract);
                // `cfd` is a connection the shim took for the server.
                |cfd, peer| unsafe { finish_accept(cfd, peer, addr, len, flags) },
            )
        },
        || real.call(()),
    )
}

/// # Safety
/// accept(2)'s contract: `addr` and `len` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's arguments, under accept(2)'s contract.
    unsafe { accept_common("accept", fd, addr, len, 0, false) }
}

/// # Safety
/// accept4(2)'s contract: `addr` and `len` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's arguments, under accept4(2)'s contract.
    unsafe { accept_common("accept4", fd, addr, len, flags, true) }
}

/// # Safety
/// listen(2) has no pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    // SAFETY: no pointers.
    let real = Real::new(|()| real_listen().map_or_else(enosys, |f| unsafe { f(fd, backlog) }));
    last_resort(|| shim().listen(fd, || real.call(())), || real.call(()))
}

/// # Safety
/// close(2) has no pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    forget_random_fd(fd);
    // SAFETY: no pointers.
    let real = Real::new(|()| real_close().map_or_else(enosys, |f| unsafe { f(fd) }));
    last_resort(|| shim().close(fd, || real.call(())), || real.call(()))
}

/// # Safety
/// epoll_ctl(2)'s contract: `ev` is null or points to an epoll_event.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    // SAFETY: the caller's arguments, under epoll_ctl(2)'s contract.
    let real =
        Real::new(|()| real_epoll_ctl().map_or_else(enosys, |f| unsafe { f(epfd, op, fd, ev) }));
    // SAFETY: `ev` is null or points to an epoll_event (read unaligned: the
    // type is packed on some targets).
    let event = (!ev.is_null()).then(|| unsafe { std::ptr::read_unaligned(ev) });
    last_resort(
        || shim().epoll_ctl(epfd, op, fd, event, || real.call(())),
        || real.call(()),
    )
}

/// # Safety
/// epoll_wait(2)'s contract: `events` is writable for `max` events.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let real = Real::new(|()| {
        // SAFETY: the caller's arguments, under epoll_wait(2)'s contract.
        real_epoll_wait().map_or_else(enosys, |f| unsafe { f(epfd, events, max, timeout) })
    });
    let deliver = |out: &[libc::epoll_event]| {
        let n = out.len().min(usize::try_from(max).unwrap_or(0));
        // SAFETY: `events` is writable for `max` events; at most that many
        // are written, from a live buffer that does not overlap it.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), events, n) };
        c_int::try_from(n).unwrap_or(c_int::MAX)
    };
    last_resort(
        || shim().epoll_wait(epfd, max, timeout, deliver, || real.call(())),
        || real.call(()),
    )
}

/// # Safety
/// poll(2)'s contract: `fds` points to `nfds` pollfds.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's arguments, under poll(2)'s contract.
    let real = || real_poll().map_or_else(enosys, |f| unsafe { f(fds, nfds, timeout) });
    let len = usize::try_from(nfds).unwrap_or(usize::MAX);
    if fds.is_null() || len == 0 || len > 1 << 20 {
        return real();
    }
    let ordered = last_resort(
        || {
            // SAFETY: `fds` points to `nfds` pollfds (poll(2)'s contract),
            // not null; the slice lives for this closure only.
            let user = unsafe { std::slice::from_raw_parts_mut(fds, len) };
            shim().poll("poll", user, timeout)
        },
        || None,
    );
    ordered.unwrap_or_else(real)
}

/// `select(2)` as `poll(2)`: readable = `POLLIN`, writable = `POLLOUT`,
/// exceptional = `POLLPRI`; the sets are rewritten with what is ready and
/// `timeout` with the time left, as Linux does.
///
/// # Safety
/// select(2)'s contract: the sets and `timeout` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's arguments, under select(2)'s contract.
    let real = || real_select().map_or_else(enosys, |f| unsafe { f(nfds, rd, wr, ex, timeout) });
    let setsize = c_int::try_from(libc::FD_SETSIZE).unwrap_or(c_int::MAX);
    if !(0..=setsize).contains(&nfds) || rd.is_null() {
        return real();
    }
    // SAFETY: a set is null or valid for descriptors below `nfds` <= FD_SETSIZE.
    let isset =
        |set: *mut libc::fd_set, fd: c_int| !set.is_null() && unsafe { libc::FD_ISSET(fd, set) };
    let mut pfds: Vec<libc::pollfd> = (0..nfds)
        .filter_map(|fd| {
            let mut events = 0;
            if isset(rd, fd) {
                events |= libc::POLLIN;
            }
            if isset(wr, fd) {
                events |= libc::POLLOUT;
            }
            if isset(ex, fd) {
                events |= libc::POLLPRI;
            }
            (events != 0).then_some(libc::pollfd {
                fd,
                events,
                revents: 0,
            })
        })
        .collect();
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: `timeout` is not null and valid (select(2)'s contract).
        let t = unsafe { *timeout };
        let ms = t.tv_sec.max(0).saturating_mul(1000) + (t.tv_usec.max(0) + 999) / 1000;
        c_int::try_from(ms).unwrap_or(c_int::MAX)
    };
    let t0 = Instant::now();
    let Some(n) = last_resort(|| shim().poll("select", &mut pfds, ms), || None) else {
        return real();
    };
    if n < 0 {
        return n;
    }
    if pfds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        set_errno(libc::EBADF);
        return -1;
    }
    for set in [rd, wr, ex] {
        if !set.is_null() {
            // SAFETY: a valid set (select(2)'s contract).
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut count = 0;
    for p in &pfds {
        let r = p.revents;
        let mut mark = |set: *mut libc::fd_set, yes: bool| {
            if yes && !set.is_null() {
                // SAFETY: a valid set; `p.fd` < `nfds` <= FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, set) };
                count += 1;
            }
        };
        mark(
            rd,
            p.events & libc::POLLIN != 0 && r & (POLL_INPUT | libc::POLLHUP | libc::POLLERR) != 0,
        );
        mark(
            wr,
            p.events & libc::POLLOUT != 0
                && r & (libc::POLLOUT | libc::POLLWRNORM | libc::POLLERR) != 0,
        );
        mark(ex, p.events & libc::POLLPRI != 0 && r & libc::POLLPRI != 0);
    }
    if !timeout.is_null() {
        let ms = u64::try_from(ms).unwrap_or(0);
        let left = Duration::from_millis(ms).saturating_sub(t0.elapsed());
        let secs = libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX);
        // SAFETY: `timeout` is not null and valid (select(2)'s contract).
        unsafe {
            (*timeout).tv_sec = secs;
            (*timeout).tv_usec = libc::suseconds_t::from(left.subsec_micros());
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static FAIL: Cell<bool> = const { Cell::new(false) };
    }

    /// The shim's logic panics on this thread's next call (a stand-in for
    /// any bug in it): `LibcOs::in_child` is the first thing it asks.
    pub(super) fn maybe_fail() {
        if FAIL.with(|f| f.replace(false)) {
            panic!("shim bug (test)");
        }
    }

    fn pipe_with(bytes: &[u8]) -> [c_int; 2] {
        let mut p = [0; 2];
        // SAFETY: `p` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: `bytes` is readable for its length.
        let n = unsafe { libc::write(p[1], bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(usize::try_from(n).unwrap(), bytes.len());
        p
    }

    /// A panic inside the shim never crosses into the server: the exported
    /// `read` returns what libc's would (without `catch_unwind` the panic
    /// would abort this process: the test harness reports the crash), and
    /// from then on the shim stays out of the way.
    #[test]
    fn a_panic_in_the_shim_falls_through_to_libc() {
        let p = pipe_with(b"hi");
        let mut buf = [0u8; 8];
        FAIL.with(|f| f.set(true));
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { read(p[0], buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(n, 2);
        assert_eq!(&buf[..2], b"hi");
        assert!(shim().panicked());
        assert!(!FAIL.with(Cell::get), "the logic ran and panicked");
        // Later calls go straight to libc.
        // SAFETY: as above.
        let n = unsafe { libc::write(p[1], b"yo".as_ptr().cast(), 2) };
        assert_eq!(n, 2);
        FAIL.with(|f| f.set(true));
        // SAFETY: as above.
        let n = unsafe { read(p[0], buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(n, 2);
        assert!(FAIL.with(Cell::get), "the logic no longer runs");
        FAIL.with(|f| f.set(false));
        for fd in p {
            // SAFETY: our descriptors.
            unsafe { libc::close(fd) };
        }
    }

    /// While the hold after a panic lasts, TCP sockets are withheld (the
    /// server must not answer input outside the order before the replica is
    /// out of the group); other descriptors are not.
    #[test]
    fn after_a_panic_tcp_input_is_withheld_for_the_hold() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let p = pipe_with(b"x");
        use std::os::fd::AsRawFd;
        let s = shim();
        s.set_panic_hold(Some(Instant::now() + Duration::from_secs(60)));
        assert!(s.withheld(c.as_raw_fd()));
        assert!(s.withheld(l.as_raw_fd()));
        assert!(!s.withheld(p[0]));
        s.set_panic_hold(Some(Instant::now()));
        assert!(!s.withheld(c.as_raw_fd()), "the hold ends");
        s.set_panic_hold(None);
        for fd in p {
            // SAFETY: our descriptors.
            unsafe { libc::close(fd) };
        }
    }
}
