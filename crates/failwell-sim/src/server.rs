//! The accept loop and the [`Simulator`] handle: one hyper HTTP/1 connection per
//! accepted socket, each able to be reset (RST) on a handler's request.
//!
//! Resets work like this: before the stream is handed to hyper, a dup of its fd
//! is kept as a [`socket2::Socket`], and a [`ConnReset`] signal is put into every
//! request's extensions. A handler that wants a reset triggers it and waits
//! forever; the connection task then sets `SO_LINGER` to zero on the dup, drops
//! the hyper connection (closing the original fd, dropping the handler) and then
//! the dup, so the kernel sends RST without any response bytes.
//! This file deliberately contains no payment logic, and no graceful shutdown:
//! shutdown aborts open connections instead of waiting for hanging handlers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tower::ServiceExt;

use crate::config::{Fault, SimConfig};
use crate::handlers::router;
use crate::reset::ConnReset;
use crate::state::{Effects, SimState};
use crate::webhooks::Webhooks;

/// A running simulator on a TCP listener. Dropping it stops the server and its
/// webhook deliveries too (like [`Simulator::shutdown`], but without waiting).
#[derive(Debug)]
pub struct Simulator {
    addr: SocketAddr,
    state: Arc<SimState>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Simulator {
    /// Spawns the server on `listener` and returns at once. The outage window of
    /// [`crate::Profile::Outage`] starts now. Fails if the listener's local
    /// address cannot be read, or (`InvalidInput`) if the webhook URL does not
    /// parse or its HTTP client cannot be built. Must be called inside a Tokio
    /// runtime.
    pub async fn start(config: SimConfig, listener: TcpListener) -> std::io::Result<Simulator> {
        let addr = listener.local_addr()?;
        let webhooks = config.webhooks.clone().map(Webhooks::new).transpose()?.map(Arc::new);
        let state = Arc::new(SimState::new(config, webhooks));
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(accept_loop(listener, router(Arc::clone(&state)), stopped));
        tracing::debug!(%addr, "failwell simulator started");
        Ok(Simulator { addr, state, stop: Some(stop), task: Some(task) })
    }

    /// The address the simulator listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `"http://IP:PORT"` of the simulator, without a trailing slash (e.g.
    /// `"http://127.0.0.1:40123"`; an unspecified bind address is shown as loopback).
    pub fn base_url(&self) -> String {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        format!("http://{addr}")
    }

    /// A snapshot of the counters (same data as `GET /_sim/effects`).
    pub fn effects(&self) -> Effects {
        self.state.effects()
    }

    /// Scripts the faults of `reference` (same as `PUT /_sim/script/{reference}`):
    /// its request number `n` (0-based, counting every `POST /v1/charges` with this
    /// reference since start) uses `faults[n]`; past the end the profile decides.
    /// Replaces any previous script; scripted requests keep the profile's latency.
    pub fn script(&self, reference: &str, faults: Vec<Fault>) {
        self.state.set_script(reference, faults);
    }

    /// Sets down mode (same as `PUT /_sim/down`): while on, every `/v1` request
    /// answers 503 before commit.
    pub fn set_down(&self, down: bool) {
        self.state.set_down(down);
    }

    /// Waits until no webhook event is in flight (every copy of every event
    /// emitted so far delivered or given up); true if so before `timeout`,
    /// false otherwise. True at once without [`SimConfig::webhooks`]. Events of
    /// charges committing meanwhile are waited for too.
    pub async fn wait_webhooks(&self, timeout: Duration) -> bool {
        match &self.state.webhooks {
            Some(webhooks) => webhooks.wait_idle(timeout).await,
            None => true,
        }
    }

    /// Stops accepting, aborts every open connection (hanging handlers are dropped,
    /// not awaited) and waits for the server task to end. Webhook copies not yet
    /// being sent are abandoned (see [`Simulator::wait_webhooks`] to let them finish).
    pub async fn shutdown(mut self) {
        drop(self.stop.take());
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        if let Some(webhooks) = &self.state.webhooks {
            webhooks.stop();
        }
    }
}

/// Runs a simulator on `listener` until Ctrl-C, for the CLI. Returns the error
/// if the Ctrl-C handler cannot be installed or the address cannot be read.
pub async fn serve(config: SimConfig, listener: TcpListener) -> std::io::Result<()> {
    let simulator = Simulator::start(config, listener).await?;
    tracing::info!(url = %simulator.base_url(), "failwell simulator listening");
    let waited = tokio::signal::ctrl_c().await;
    simulator.shutdown().await;
    waited
}

async fn accept_loop(listener: TcpListener, router: Router, mut stopped: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(serve_connection(stream, router.clone()));
                }
                Err(err) => {
                    // E.g. EMFILE: back off briefly instead of spinning.
                    tracing::warn!(%err, "simulator accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

async fn serve_connection(stream: TcpStream, router: Router) {
    let _ = stream.set_nodelay(true);
    let dup = match stream.as_fd().try_clone_to_owned() {
        Ok(fd) => Some(socket2::Socket::from(fd)),
        Err(err) => {
            tracing::warn!(%err, "cannot dup connection fd; resets will be plain closes");
            None
        }
    };
    let reset = ConnReset(Arc::new(Notify::new()));
    let handle = reset.clone();
    let service = service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(handle.clone());
        router.clone().oneshot(request)
    });
    let connection = Box::pin(
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .serve_connection(TokioIo::new(stream), service),
    );
    let mut connection = connection;
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(err) = result {
                tracing::debug!(%err, "simulator connection ended with an error");
            }
        }
        () = reset.0.notified() => {
            if let Some(dup) = &dup
                && let Err(err) = dup.set_linger(Some(Duration::ZERO))
            {
                tracing::warn!(%err, "cannot set SO_LINGER=0; reset becomes a close");
            }
            // Closes the original fd and drops the waiting handler; the socket
            // stays open through the dup until the dup is dropped below.
            drop(connection);
        }
    }
    drop(dup);
}
