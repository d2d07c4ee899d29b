//! The signal a handler gives its connection's task to reset the TCP
//! connection ([`ConnReset`]), for the faults that cut a connection.

use std::sync::Arc;

use tokio::sync::Notify;

/// Per-connection reset signal, found in request extensions.
#[derive(Clone, Debug)]
pub(crate) struct ConnReset(pub(crate) Arc<Notify>);

impl ConnReset {
    /// Asks the connection task to reset the TCP connection (RST).
    pub fn trigger(&self) {
        self.0.notify_one();
    }
}
