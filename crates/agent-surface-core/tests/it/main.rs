//! Integration tests of the error model: wire shapes, retry rules, messages, hostile causes.

mod hostile;
mod parse;
mod props;
mod repair;
mod retry;
mod wire;
mod wording;
