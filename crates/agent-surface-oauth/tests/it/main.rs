//! The resource server: every token case on both transports, the metadata document, the identity
//! policies see, and a JWKS fetched from a loopback server.

mod fixture;
mod identity;
mod remote;
mod transports;
