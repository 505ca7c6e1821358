//! Fail-closed evaluation of application code (policies, approvers): an error, a panic or an
//! overrun of the time budget becomes a [`Failure`] the caller turns into its closed outcome.

use std::any::Any;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Either};

use crate::clock::Clock;

/// Why a guarded evaluation produced no answer. For the operator channel only.
#[derive(Debug)]
#[non_exhaustive]
pub enum Failure {
    /// The code returned an error.
    Error(PolicyError),
    /// The code panicked (building its future or while it ran).
    Panic(String),
    /// The code did not answer within its budget.
    Overrun(Duration),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Error(e) => write!(f, "returned an error: {e}"),
            Failure::Panic(text) => write!(f, "panicked: {text}"),
            Failure::Overrun(budget) => write!(f, "did not answer within {} ms", budget.as_millis()),
        }
    }
}

/// The text of a panic payload, redacted ([`crate::redact`]): it is bound for the operator
/// channel, and a panic's message is whatever the code had at hand.
///
/// ```
/// let payload: Box<dyn std::any::Any + Send> = Box::new(String::from("token=sk_live_51H expired"));
/// assert_eq!(agent_surface_policy::guard::panic_text(payload.as_ref()), "token=*** expired");
/// ```
pub fn panic_text(payload: &(dyn Any + Send)) -> String {
    let text = if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.as_str()
    } else {
        return non_string_payload(payload);
    };
    crate::redact::redact(text).into_owned()
}

/// What the operator is told of a panic whose payload is not text (`std::panic::panic_any`): its
/// type and, for a number, a boolean or a character, its value; an error (`Box<dyn Error>`, an
/// `anyhow`-like boxed error) by its redacted message. Anything else only by what it is not.
///
/// ```
/// use agent_surface_policy::guard::panic_text;
/// assert_eq!(panic_text(&42_u16), "a panic with a u16 payload: 42");
/// assert_eq!(panic_text(&()), "a panic with a payload of a type that is not text, a number, a boolean, a character or an error");
/// ```
fn non_string_payload(payload: &(dyn Any + Send)) -> String {
    macro_rules! shown {
        ($($t:ty),*) => {
            $(if let Some(v) = payload.downcast_ref::<$t>() {
                return format!("a panic with a {} payload: {v}", stringify!($t));
            })*
        };
    }
    shown!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, f32, f64, bool, char);
    if let Some(e) = payload.downcast_ref::<Box<dyn std::error::Error + Send + Sync>>() {
        return format!("a panic with an error payload: {}", crate::redact::redact(&e.to_string()));
    }
    if let Some(e) = payload.downcast_ref::<Box<dyn std::error::Error + Send>>() {
        return format!("a panic with an error payload: {}", crate::redact::redact(&e.to_string()));
    }
    "a panic with a payload of a type that is not text, a number, a boolean, a character or an error".to_string()
}

/// Runs user code `f`; a panic becomes `Err` with its text. The one panic guard for synchronous
/// user code (bindings, preconditions, summaries, ask steps): the registry calls it, as
/// [`catch_future`] for user futures.
///
/// ```
/// assert_eq!(agent_surface_policy::guard::catch(|| 2 + 2), Ok(4));
/// let caught = agent_surface_policy::guard::catch(|| -> u8 { panic!("boom") });
/// assert_eq!(caught, Err("boom".to_string()));
/// ```
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|payload| panic_text(payload.as_ref()))
}

/// Runs user code `f` that decides without awaiting when it can (a hook's `…_at_once`): `None`
/// when it has no decision, else its decision, or the error it returned or its panic as a
/// [`Failure`].
///
/// ```
/// use agent_surface_policy::{PolicyError, guard::{Failure, at_once}};
///
/// assert!(matches!(at_once(|| Some(Ok::<_, PolicyError>(3))), Some(Ok(3))));
/// assert!(at_once(|| None::<Result<u8, PolicyError>>).is_none());
/// let panicked = at_once(|| -> Option<Result<u8, PolicyError>> { panic!("boom") });
/// assert!(matches!(panicked, Some(Err(Failure::Panic(text))) if text == "boom"));
/// ```
pub fn at_once<T>(f: impl FnOnce() -> Option<Result<T, PolicyError>>) -> Option<Result<T, Failure>> {
    match catch(f) {
        Ok(None) => None,
        Ok(Some(answer)) => Some(answer.map_err(Failure::Error)),
        Err(text) => Some(Err(Failure::Panic(text))),
    }
}

/// Builds a user future with `start` and runs it; a panic while building it or while it runs
/// becomes `Err` with its text. The future is `Unpin` when the user future is.
///
/// ```
/// # futures_util::FutureExt::now_or_never(async {
/// let ok = agent_surface_policy::guard::catch_future(|| async { 7 }).await;
/// assert_eq!(ok, Ok(7));
/// let built = agent_surface_policy::guard::catch_future(|| -> std::future::Ready<u8> { panic!("at once") }).await;
/// assert_eq!(built, Err("at once".to_string()));
/// # }).unwrap();
/// ```
pub fn catch_future<F: Future>(start: impl FnOnce() -> F) -> impl Future<Output = Result<F::Output, String>> {
    catch_started(catch(start))
}

/// [`catch_future`] for a future already built under [`catch`]: a panic while it runs becomes
/// `Err` with its text, and a panic while building it (`started` is `Err`) is its answer. Its
/// type depends on the user future's alone, not on the code that built it, so a future of this
/// kind can outlive what `start` borrowed.
///
/// ```
/// # futures_util::FutureExt::now_or_never(async {
/// let started = agent_surface_policy::guard::catch(|| async { 7 });
/// assert_eq!(agent_surface_policy::guard::catch_started(started).await, Ok(7));
/// # }).unwrap();
/// ```
pub fn catch_started<F: Future>(started: Result<F, String>) -> impl Future<Output = Result<F::Output, String>> {
    match started {
        Ok(fut) => Either::Left(
            AssertUnwindSafe(fut).catch_unwind().map(|answer| answer.map_err(|payload| panic_text(payload.as_ref()))),
        ),
        Err(text) => Either::Right(std::future::ready(Err(text))),
    }
}

/// Runs `start()` and awaits its future, bounded by `budget` on `clock`, catching panics.
///
/// The future is polled once before a timer is armed: a policy that answers at once (the common
/// case) costs no timer.
pub async fn guarded<'a, T>(
    clock: &dyn Clock,
    budget: Duration,
    start: impl FnOnce() -> BoxFuture<'a, Result<T, PolicyError>>,
) -> Result<T, Failure> {
    match within(clock, budget, catch_future(start)).await {
        Some(answer) => flatten(answer),
        None => Err(Failure::Overrun(budget)),
    }
}

/// `fut`'s output, or `None` when it takes longer than `budget` on `clock`. The future is polled
/// once before a timer is armed, so an answer ready at once costs no timer.
pub async fn within<T>(clock: &dyn Clock, budget: Duration, fut: impl Future<Output = T>) -> Option<T> {
    let mut fut = std::pin::pin!(fut);
    if let Some(answer) = (&mut fut).now_or_never() {
        return Some(answer);
    }
    match futures_util::future::select(fut, clock.sleep(budget)).await {
        Either::Left((answer, _)) => Some(answer),
        Either::Right(_) => None,
    }
}

/// Runs `start()` and awaits its future without a budget (the caller bounds it), catching
/// panics.
pub(crate) async fn caught<'a, T>(start: impl FnOnce() -> BoxFuture<'a, Result<T, PolicyError>>) -> Result<T, Failure> {
    flatten(catch_future(start).await)
}

fn flatten<T>(answer: Result<Result<T, PolicyError>, String>) -> Result<T, Failure> {
    match answer {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Failure::Error(e)),
        Err(text) => Err(Failure::Panic(text)),
    }
}

/// A policy failure; the pipeline denies (fails closed) and logs it on the operator channel.
///
/// The text never reaches the agent.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

impl PolicyError {
    /// A failure with this description (for the operator channel).
    pub fn new(description: impl Into<String>) -> PolicyError {
        PolicyError(description.into())
    }
}
