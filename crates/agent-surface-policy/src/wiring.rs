//! Wiring warnings that outlive the moment they were said: a part built before any `tracing`
//! subscriber records the operator channel (the usual order: build the service, then serve it,
//! and the server installs the log) would otherwise tell nobody what is wrong with it.
//!
//! A part that finds, as it is made, that its wiring or its environment puts a guarantee at risk
//! (a Redis that may forget what the stores wrote, several OAuth issuers sharing one key set, a
//! registry whose parts read different clocks), or what the operator must look at (what a crash
//! left in a store or audit file), says so with [`warn`]: a `WARN` event on
//! `agent_surface::wiring` when a subscriber records that event where it is said, and otherwise a
//! copy kept in a small process-wide list. Whoever installs the operator log afterwards [takes](take_unrecorded) the
//! list and says them: `Serve` (in `agent-surface`) does when it starts, to the log it installs
//! or, with none, to standard error. An application that installs its own subscriber after
//! building the service does the same.
//!
//! The list is process-wide because the operator channel is (`tracing` has one global
//! subscriber). It holds each distinct warning once and at most [`HELD_MAX`] of them; a warning
//! said while a subscriber records it is not kept.
//!
//! ```
//! use agent_surface_policy::wiring;
//!
//! // No subscriber here: the event goes nowhere, the warning is kept.
//! wiring::warn("the frobnicator reads another clock");
//! wiring::warn("the frobnicator reads another clock");
//! let held = wiring::take_unrecorded();
//! assert_eq!(held.iter().filter(|w| w.contains("frobnicator")).count(), 1);
//! // Taken: said again once, by whoever took it.
//! assert!(!wiring::take_unrecorded().iter().any(|w| w.contains("frobnicator")));
//! ```

use std::sync::{Mutex, PoisonError};

/// The most distinct warnings kept for a later subscriber; one more is dropped (a process says a
/// handful at start, each once).
pub const HELD_MAX: usize = 64;

/// The warnings no subscriber recorded, in the order first said.
static HELD: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Logs `warning` at `WARN` on `agent_surface::wiring` when a subscriber records that event
/// here; otherwise (no subscriber, or one whose filter leaves the target out) keeps it for
/// [`take_unrecorded`]. Returns whether a subscriber recorded it.
///
/// The text says what is wrong and what to do; it passes through the process's
/// [redactor](crate::redact) and has its control characters escaped (a value read from a server
/// may hold a line break), since it may be written to standard error as it is.
pub fn warn(warning: &str) -> bool {
    let warning = fit(warning);
    // Asked, and kept, under the lock `take_unrecorded` takes, so that a log installed meanwhile
    // finds the warning kept or is asked after it was; and the event is sent only when something
    // records it: one sent to nothing and recorded by a log installed just after would also be
    // said by whoever takes the kept copy.
    let recorded = {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        // Asked of the subscriber the event goes to: the global one, or this thread's.
        let recorded = tracing::event_enabled!(target: "agent_surface::wiring", tracing::Level::WARN);
        if !recorded && held.len() < HELD_MAX && !held.contains(&warning) {
            held.push(warning.clone());
        }
        recorded
    };
    if recorded {
        tracing::warn!(target: "agent_surface::wiring", "{warning}");
    }
    recorded
}

/// `warning` redacted, with its control characters escaped (`\n`, `\u{1b}`).
fn fit(warning: &str) -> String {
    let redacted = crate::redact(warning);
    if !redacted.chars().any(char::is_control) {
        return redacted.into_owned();
    }
    redacted.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// The wiring warnings [`warn`] kept because nothing recorded them, in the order first said; the
/// list is empty afterwards, so each is said once, by whoever took it.
pub fn take_unrecorded() -> Vec<String> {
    std::mem::take(&mut *HELD.lock().unwrap_or_else(PoisonError::into_inner))
}

#[cfg(test)]
mod tests {
    use super::{HELD_MAX, take_unrecorded, warn};

    /// One test for the process-wide list, so that no other test of this binary takes it
    /// meanwhile.
    #[test]
    fn warnings_nobody_recorded_are_kept_once_each_until_taken() {
        // Recorded by a subscriber: not kept.
        let recording = tracing::subscriber::with_default(Recorder, || warn("recorded"));
        assert!(recording);
        // Nothing records: kept, once each, in order.
        assert!(!warn("first"));
        assert!(!warn("second"));
        assert!(!warn("first"));
        assert_eq!(take_unrecorded(), ["first", "second"]);
        assert!(take_unrecorded().is_empty());
        // Fit to be written as it is: redacted, one line.
        assert!(!warn("Redis says:\nmaxmemory-policy x\u{1b}[2J at redis://app:s3cret@db.internal"));
        assert_eq!(take_unrecorded(), ["Redis says:\\nmaxmemory-policy x\\u{1b}[2J at redis://app:***@db.internal"]);
        // Bounded.
        for i in 0..HELD_MAX + 5 {
            warn(&format!("warning {i}"));
        }
        let held = take_unrecorded();
        assert_eq!(held.len(), HELD_MAX);
        assert_eq!(held.last().map(String::as_str), Some(format!("warning {}", HELD_MAX - 1).as_str()));
    }

    /// A subscriber that records every event, and nothing of it.
    struct Recorder;

    impl tracing::Subscriber for Recorder {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {}
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }
}
