//! The SQLite stores: the store kit's suites, restarts, and crashes.

mod kit;
mod support;
