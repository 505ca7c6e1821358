//! The example payloads of each code: what `spec/error-matrix.json` shows and what the adapters'
//! and the conformance kit's tests run through every encoder.
//!
//! The examples are built with the constructors of [`AgentSurfaceError`], which derive `retry`
//! from the matrix; so they sit above the table ([`crate::matrix`]), which knows nothing of them.
//! Every code has examples (each block of the table of codes, `codes.rs`, gives them), one per
//! value of its retry rule at least (checked by a test here and by `cargo xtask verify-matrix`).

use std::time::Duration;

use crate::code::{Effect, ErrorCode};
use crate::details::*;
use crate::error::AgentSurfaceError;
use crate::payload::ErrorPayload;
use crate::text::SafeText;
use crate::time::Timestamp;

/// [`of`], from the table's `examples` column (`codes.rs`): each code's examples are written in
/// its block there, as the errors its constructors build; the `match` is over every code.
macro_rules! examples_of {
    ($( $code:ident [ $($example:expr),* $(,)? ] )*) => {
        /// The example payloads of `code`, one per retry outcome of its retry rule at least.
        ///
        /// ```
        /// use agent_surface_core::{examples, ErrorCode, Retry};
        /// let timeouts = examples::of(ErrorCode::Timeout);
        /// assert!(timeouts.iter().all(|p| p.retry() == Retry::Yes));
        /// let cancellations = examples::of(ErrorCode::Cancelled);
        /// assert!(cancellations.iter().all(|p| p.retry() == Retry::Yes));
        /// ```
        pub fn of(code: ErrorCode) -> Vec<ErrorPayload> {
            match code {
                $( ErrorCode::$code => vec![$($example.into_payload()),*], )*
            }
        }
    };
}

crate::codes::code_table!(examples => examples_of);

/// The example payloads of every code, in [`ErrorCode::ALL`] order.
pub fn all() -> impl Iterator<Item = ErrorPayload> {
    ErrorCode::ALL.into_iter().flat_map(of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::MATRIX;

    #[test]
    fn every_retry_outcome_has_an_example() {
        for s in &MATRIX {
            let examples = of(s.code);
            for r in s.retry.values() {
                assert!(examples.iter().any(|p| p.retry() == r), "{}: no example with retry {r}", s.code);
            }
            for p in &examples {
                assert_eq!(p.code(), s.code);
            }
        }
    }
}
