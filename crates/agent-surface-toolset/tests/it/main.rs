//! Integration tests of the toolset adapter and the recovery loop, through the public API.

mod support;

mod conformance;
mod gemini;
mod golden;
mod losses;
mod recovery;
mod scenarios;
mod schemas;
mod session;
mod snapshots;
mod toolset;
