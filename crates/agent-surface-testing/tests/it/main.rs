//! Tests of the testing kit itself: its assertions fail when they should, its clock, the
//! conformance kit catches lossy adapters, the leak assertion catches leaks, and the fixtures
//! behave as documented.

mod assertions;
mod kit;
mod lint;
mod stores;
