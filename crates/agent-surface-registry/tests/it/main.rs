//! Integration tests of the registry and the invocation pipeline, through the public API.

mod support;

mod concurrency;
mod definitions;
mod phases;
mod surface;
