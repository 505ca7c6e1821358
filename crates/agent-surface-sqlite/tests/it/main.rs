//! The SQLite stores: the store kit's suites, restarts, and crashes.

mod bounds;
mod crash;
mod format;
mod kit;
mod migrate;
mod restart;
mod service;
mod support;
