//! The HTTP server loop: hyper's HTTP/1.1 connections with the limits a public listener needs.
//!
//! - A connection has [`Limits::idle_timeout`] to send a request's headers, counted from when
//!   it is ready for the next request: a client that sends partial headers (slowloris), and an
//!   idle keep-alive connection, are closed after it.
//! - At most [`Limits::max_connections`] connections are served at once; past it the loop stops
//!   accepting, so new connections wait in the kernel's listen backlog until one closes.
//! - On shutdown the listener closes, idle connections close, and requests in flight finish.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connection limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a connection may take to send a request's headers, from when it is ready for
    /// one.
    pub idle_timeout: Duration,
    /// Most connections served at once.
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `stop` completes, then waits for the requests in flight.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout);
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut stop = std::pin::pin!(stop);
    loop {
        let permit = tokio::select! {
            biased;
            () = &mut stop => break,
            permit = permits.clone().acquire_owned() => permit,
        };
        let Ok(permit) = permit else { break };
        if permits.available_permits() == 0 {
            tracing::warn!(
                max_connections = limits.max_connections,
                "at the connection limit: new connections wait until one closes"
            );
        }
        let (stream, _) = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
