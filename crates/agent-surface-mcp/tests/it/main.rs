//! Integration tests of the MCP adapter: an `rmcp` client against the adapter over an in-memory
//! pipe, raw frames against the stdio framing, and the conformance kit on the codec.

mod calls;
mod codec;
#[cfg(feature = "http")]
mod compose;
mod confirm;
mod frames;
#[cfg(feature = "http")]
mod http;
mod list;
mod modern;
mod not_processed;
mod snapshots;
mod support;
