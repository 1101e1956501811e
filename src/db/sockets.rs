//! The sockets of the pool's database connections: TCP keepalives on every one, and cutting
//! them all when the server stops answering.
//!
//! sqlx 0.8 opens its sockets itself and offers no hook to reach them, so ojsd finds each one
//! among the process's open files (`/proc/self/fd`, Linux only) just after the connection is
//! made: the TCP socket whose local port is the one the server sees (`inet_client_port()`)
//! and whose peer port is a database port. It remembers the sockets it found by inode, so it
//! only ever touches its own pool's connections (not another pool's in the same process, as
//! in the tests). A connection through a proxy or NAT that changes the client's port, and a
//! connection over a Unix socket, is not found and keeps the kernel's defaults. Elsewhere than
//! Linux this does nothing, and says so once.
//!
//! * **Keepalives** ([`adopt`]): a server that vanishes without a reset (a host powered off, a
//!   network partition) is noticed in seconds rather than after the kernel's two hours of
//!   silence or fifteen minutes of retransmissions.
//! * **Cutting** ([`cut`], when the listener's ping goes unanswered): a server whose processes
//!   froze while its kernel still runs acknowledges every packet, so neither keepalives nor a
//!   user timeout ever fire, and every statement sent to it waits forever, each holding a pool
//!   connection: background passes, batched statements, the listener's own `UNLISTEN`. Shutting
//!   their sockets down makes each of those statements fail at once with an I/O error, so the
//!   pool has its connections back for the server that takes over.

use std::time::Duration;

/// Idle time before the first keepalive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// Time between probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the connection is dropped.
pub const KEEPALIVE_PROBES: u32 = 3;
/// How long sent data may stay unacknowledged before the connection is dropped (Linux's
/// `TCP_USER_TIMEOUT`): what notices a server that vanished while a statement was being sent.
pub const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The database's TCP ports.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    pub ports: Vec<u16>,
}

impl Endpoints {
    /// The TCP ports of `hosts` (those reached over a Unix socket have none).
    pub fn of(hosts: &[sqlx::postgres::PgConnectOptions]) -> Endpoints {
        let mut ports: Vec<u16> = hosts
            .iter()
            .filter(|host| host.get_socket().is_none())
            .map(sqlx::postgres::PgConnectOptions::get_port)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        Endpoints { ports }
    }
}

/// The sockets of one pool's connections, by inode.
#[derive(Debug, Default)]
pub struct Adopted {
    inodes: std::sync::Mutex<std::collections::HashSet<u64>>,
}

/// Finds the socket of a new connection (TCP, from local port `local_port` to a database
/// port), sets its keepalives and user timeout, and remembers it in `adopted`. Sockets
/// remembered earlier that are closed by now are forgotten. Returns whether it was found.
pub fn adopt(endpoints: &Endpoints, local_port: u16, adopted: &Adopted) -> bool {
    let mut found = false;
    let mut open = std::collections::HashSet::new();
    imp::each_database_socket(endpoints, |inode, local, socket| {
        open.insert(inode);
        if local != local_port {
            return;
        }
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_PROBES);
        let set = socket
            .set_tcp_keepalive(&keepalive)
            .and_then(|()| socket.set_keepalive(true))
            .and_then(|()| socket.set_tcp_user_timeout(Some(USER_TIMEOUT)));
        if let Err(e) = set {
            tracing::debug!(error = %e, "cannot set keepalive on a database socket");
        }
        found = true;
        let mut inodes = adopted.inodes.lock().expect("sockets lock");
        inodes.insert(inode);
    });
    adopted
        .inodes
        .lock()
        .expect("sockets lock")
        .retain(|inode| open.contains(inode));
    found
}

/// Shuts down every socket in `adopted`: pending and future reads and writes on them fail at
/// once. Returns how many it shut down.
pub fn cut(endpoints: &Endpoints, adopted: &Adopted) -> usize {
    let inodes = std::mem::take(&mut *adopted.inodes.lock().expect("sockets lock"));
    let mut cut = 0;
    imp::each_database_socket(endpoints, |inode, _, socket| {
        if inodes.contains(&inode) && socket.shutdown(std::net::Shutdown::Both).is_ok() {
            cut += 1;
        }
    });
    cut
}

#[cfg(target_os = "linux")]
mod imp {
    use std::os::fd::{BorrowedFd, RawFd};

    use socket2::SockRef;

    use super::Endpoints;

    /// Calls `f` with the inode, local port and socket of each TCP socket of this process
    /// connected to a port of `endpoints`.
    #[allow(unsafe_code)]
    pub fn each_database_socket(endpoints: &Endpoints, mut f: impl FnMut(u64, u16, &SockRef<'_>)) {
        if endpoints.ports.is_empty() {
            return;
        }
        let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
            return;
        };
        for entry in entries.flatten() {
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<RawFd>().ok())
            else {
                continue;
            };
            // Only sockets: the link reads `socket:[inode]`.
            let Some(inode) = std::fs::read_link(entry.path()).ok().and_then(|target| {
                target
                    .to_str()?
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .parse::<u64>()
                    .ok()
            }) else {
                continue;
            };
            // SAFETY: the descriptor is only passed to getsockname, getpeername, setsockopt
            // and shutdown, and never closed here. Should another thread close it meanwhile,
            // the calls fail with EBADF; should the number be reused for another socket, that
            // socket's addresses are what the checks below and the caller's inode check see.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            let socket = SockRef::from(&fd);
            let (Some(peer), Some(local)) = (
                socket.peer_addr().ok().and_then(|a| a.as_socket()),
                socket.local_addr().ok().and_then(|a| a.as_socket()),
            ) else {
                continue;
            };
            if endpoints.ports.contains(&peer.port()) {
                f(inode, local.port(), &socket);
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::Endpoints;

    /// Does nothing: finding sqlx's sockets needs Linux's `/proc/self/fd`.
    pub fn each_database_socket(
        _endpoints: &Endpoints,
        _f: impl FnMut(u64, u16, &socket2::SockRef<'_>),
    ) {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::info!(
                "database sockets are reached on Linux only: no TCP keepalives, and a frozen \
                 server's statements wait for their timeouts"
            );
        });
    }
}
