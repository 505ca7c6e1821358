//! The process's descriptor limit, raised at start, and the connection cap fitted under it: every
//! connection holds a descriptor, and a process out of descriptors cannot accept anything, so the
//! cap must bind before the limit does.

use tokio::sync::Semaphore;

use crate::TARGET;

/// The descriptor limit (`RLIMIT_NOFILE`) a server found at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Descriptors {
    /// The soft limit in force (after raising it).
    pub(crate) soft: u64,
    /// The soft limit before the server raised it.
    pub(crate) soft_at_start: u64,
    /// The hard limit (the most the soft limit can be raised to).
    pub(crate) hard: u64,
}

/// Reads the descriptor limit and, if `raise`, raises the soft limit to the hard one (on macOS, to
/// `kern.maxfilesperproc` when the hard limit is unlimited). `None` where the platform has no such
/// limit or it cannot be read (then the cap stays as configured); a failed raise keeps the soft
/// limit as it was. Either failure is a `WARN`.
pub(crate) fn at_start(raise: bool) -> Option<Descriptors> {
    #[cfg(unix)]
    {
        let (soft, hard) = match rlimit::Resource::NOFILE.get() {
            Ok(limits) => limits,
            Err(e) => {
                tracing::warn!(target: TARGET, error = %e, "the descriptor limit cannot be read; the connection cap is as configured");
                return None;
            }
        };
        let found = Descriptors { soft, soft_at_start: soft, hard };
        if !raise || soft >= hard {
            return Some(found);
        }
        match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(raised) => Some(Descriptors { soft: raised.max(soft), ..found }),
            Err(e) => {
                tracing::warn!(target: TARGET, error = %e, soft, hard, "the descriptor soft limit cannot be raised");
                Some(found)
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = raise;
        None
    }
}

/// The connection cap: `configured` (at least 1), lowered where needed so that `reserve`
/// descriptors stay free under the soft limit `soft` (none known: no lowering). At least 1.
pub(crate) fn connection_cap(configured: usize, soft: Option<u64>, reserve: usize) -> usize {
    let configured = configured.clamp(1, Semaphore::MAX_PERMITS);
    let Some(soft) = soft else { return configured };
    let room = soft.saturating_sub(u64::try_from(reserve).unwrap_or(u64::MAX));
    configured.min(usize::try_from(room).unwrap_or(usize::MAX)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_the_reserve_free_under_the_soft_limit() {
        // The hostile re-run's process: a soft limit of 1,024 and the default cap of 1,024.
        assert_eq!(connection_cap(1024, Some(1024), 128), 896);
        // Raised to a hard limit of 20,000: the configured cap binds first.
        assert_eq!(connection_cap(1024, Some(20_000), 128), 1024);
        assert_eq!(connection_cap(1024, Some(1024 + 128), 128), 1024, "exactly the room");
        assert_eq!(connection_cap(1024, Some(u64::MAX), 128), 1024, "an unlimited soft limit");
        assert_eq!(connection_cap(1024, None, 128), 1024, "no descriptor limit known");
        // A soft limit below the reserve leaves one connection, never none.
        assert_eq!(connection_cap(1024, Some(100), 128), 1);
        assert_eq!(connection_cap(0, Some(20_000), 128), 1, "a cap of 0 is 1");
        assert_eq!(connection_cap(usize::MAX, None, 0), Semaphore::MAX_PERMITS);
    }

    #[cfg(unix)]
    #[test]
    fn the_limit_is_read_and_never_lowered() {
        let (before, _) = rlimit::Resource::NOFILE.get().unwrap();
        let found = at_start(false).unwrap();
        assert_eq!((found.soft, found.soft_at_start), (before, before), "not raised when not asked to");
        let raised = at_start(true).unwrap();
        assert!(raised.soft >= before && raised.soft <= raised.hard.max(before));
        assert_eq!(rlimit::Resource::NOFILE.get().unwrap().0, raised.soft, "what it reports is in force");
    }
}
