//! The HTTP binding end to end: a real server on a loopback port, a hand-written HTTP/1.1 client.

mod asynchronous;
mod client;
mod conformance;
mod drain;
mod hostile;
#[cfg(feature = "inbox")]
mod inbox;
mod openapi;
mod routes;
mod snapshots;
mod strict;
