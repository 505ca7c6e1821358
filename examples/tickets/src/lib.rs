//! The tickets service that `docs/guide.md` builds step by step: typed capabilities on shared
//! state, the shipped policies under default-deny, a per-user quota, a confirmation, a natural
//! idempotency key, and the servers (MCP over stdio and streamable HTTP, the plain HTTP binding)
//! in `main.rs`; in [`production`], the same service for replicas on Redis (the guide's part 2).
//!
//! The guide quotes this file between its `// guide:` markers; `tests/guide.rs` fails when a quote
//! and the code differ.

pub mod production;

// guide:begin imports
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use agent_surface::core::details::PreconditionDetails;
use agent_surface::core::{AgentSurfaceError, DefinitionError, Effect};
use agent_surface::policy::{AllowAll, Clock, Policies, Quota, RateBudgets, RequireIdentity, RequireRole, Scope};
use agent_surface::registry::{Caller, Mount, Registry, State, Unmet};
use agent_surface::{Serve, ServiceBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
// guide:end imports

// guide:begin state
/// The tickets, shared by every call (a database pool in a real service).
#[derive(Default)]
pub struct Desk {
    tickets: Mutex<Vec<Ticket>>,
}

/// One ticket, as the capabilities return it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Ticket {
    /// Its number.
    pub id: u64,
    /// What is wrong.
    pub title: String,
    /// The user who opened it.
    pub opened_by: String,
    /// Whether it is still open.
    pub open: bool,
}

impl Desk {
    /// Opens a ticket for `user` (an `INSERT … RETURNING` in a real service).
    pub fn open(&self, title: String, user: &str) -> Ticket {
        let mut tickets = self.tickets();
        let id = tickets.last().map_or(1, |t| t.id + 1);
        let ticket = Ticket { id, title, opened_by: user.to_string(), open: true };
        tickets.push(ticket.clone());
        ticket
    }

    fn tickets(&self) -> std::sync::MutexGuard<'_, Vec<Ticket>> {
        // A poisoned lock only means a handler panicked while holding it; the list is still whole.
        self.tickets.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
// guide:end state

/// The input of `tickets.create`.
// guide:begin input
#[derive(Deserialize, JsonSchema)]
pub struct NewTicket {
    /// What is wrong, in one line.
    #[schemars(length(min = 1, max = 120))]
    pub title: String,
}
// guide:end input

/// The input of `tickets.close` and `tickets.delete`.
#[derive(Deserialize, JsonSchema)]
pub struct TicketId {
    /// The ticket's number.
    #[schemars(range(min = 1))]
    pub id: u64,
}

// guide:begin report-input
/// An outside report (a monitoring alert, a customer's e-mail) that needs a ticket.
#[derive(Deserialize, JsonSchema)]
pub struct Report {
    /// The report's id in the system it comes from; one ticket per id.
    #[schemars(length(min = 1, max = 64))]
    pub report_id: String,
    /// What it says, in one line.
    #[schemars(length(min = 1, max = 100))]
    pub title: String,
}
// guide:end report-input

/// What `tickets.list` returns.
#[derive(Serialize, JsonSchema)]
pub struct TicketList {
    /// The tickets, oldest first.
    pub tickets: Vec<Ticket>,
}

// guide:begin unknown
/// What the model is told of a ticket number that is not on the desk.
const UNKNOWN_TICKET: &str = "There is no ticket with this id. List the tickets to find it.";

/// The answer for a ticket number that is not on the desk.
fn unknown_ticket() -> AgentSurfaceError {
    let details = PreconditionDetails { reason: Some("unknown-ticket".into()), ..Default::default() };
    AgentSurfaceError::precondition_failed_with(UNKNOWN_TICKET, details)
}
// guide:end unknown

// guide:begin define
/// Defines the `tickets` type on `registry`.
pub fn define(registry: &Registry) -> Result<(), DefinitionError> {
    registry.define("tickets", |t| {
        // guide:begin create
        t.capability("create", "Open a ticket.").effect(Effect::Write).handle(
            |State(desk): State<Desk>, Caller(who): Caller, i: NewTicket| async move {
                let user = who.identity().map_or(who.key(), |id| &id.subject);
                Ok::<_, AgentSurfaceError>(desk.open(i.title, user))
            },
        );
        // guide:end create
        // guide:begin report
        t.capability("report", "Open a ticket for an outside report; sending a report again opens no second one.")
            .effect(Effect::Write)
            .idempotency_key(|i: &Report| i.report_id.clone()) // one ticket per report, whoever sends it
            .handle(|State(desk): State<Desk>, Caller(who): Caller, i: Report| async move {
                let user = who.identity().map_or(who.key(), |id| &id.subject);
                Ok::<_, AgentSurfaceError>(desk.open(format!("{} (report {})", i.title, i.report_id), user))
            });
        // guide:end report
        t.capability("list", "List every ticket, oldest first.").effect(Effect::Read).idempotent().handle(
            |State(desk): State<Desk>, _: serde_json::Value| async move {
                Ok::<_, AgentSurfaceError>(TicketList { tickets: desk.tickets().clone() })
            },
        );
        t.capability("close", "Close a ticket.").effect(Effect::Write).idempotent().handle(
            |State(desk): State<Desk>, i: TicketId| async move {
                let mut tickets = desk.tickets();
                let ticket = tickets.iter_mut().find(|t| t.id == i.id).ok_or_else(unknown_ticket)?;
                ticket.open = false;
                Ok::<_, AgentSurfaceError>(ticket.clone())
            },
        );
        t.capability("delete", "Delete a ticket for good.")
            .effect(Effect::Destructive)
            // Checked before anyone is asked to approve: nobody approves deleting a ticket that
            // is not there.
            .precondition(|State(desk): State<Desk>, i: &TicketId| {
                let known = desk.tickets().iter().any(|t| t.id == i.id);
                if known { Ok(()) } else { Err(Unmet::new(UNKNOWN_TICKET).reason("unknown-ticket")) }
            })
            .confirm(|i: &TicketId| format!("Delete ticket {} for good.", i.id))
            // The handler checks again: the ticket may be gone by the time a person approved.
            .handle(|State(desk): State<Desk>, i: TicketId| async move {
                let mut tickets = desk.tickets();
                let at = tickets.iter().position(|t| t.id == i.id).ok_or_else(unknown_ticket)?;
                Ok::<_, AgentSurfaceError>(tickets.remove(at))
            });
    })
}
// guide:end define

// guide:begin service
/// The assembled service: the wired parts (`service.registry` to call, `service.confirmations`
/// where deletions wait for a person's approval) and the mount that keeps the tickets callable
/// (dropping it unmounts them).
pub struct Service {
    wired: agent_surface::Service,
    _tickets: Mount,
}

impl std::ops::Deref for Service {
    type Target = agent_surface::Service;

    fn deref(&self) -> &agent_surface::Service {
        &self.wired
    }
}

impl Service {
    /// Serves it (`main.rs`): over HTTP, or over MCP stdio.
    pub fn serve(&self) -> Serve {
        Serve::new(self.wired.clone())
    }
}

/// Builds the service on `clock` (the system clock in `main`, a test clock in tests), its state in
/// memory.
pub fn service(clock: Arc<dyn Clock>) -> Result<Service, DefinitionError> {
    assemble(ServiceBuilder::new().clock(clock))
}

/// The tickets with their policies and quota, on the parts `builder` was given: the clock and
/// the stores (memory by default; Redis in [`production`]), the audit sink, the public URL.
pub fn assemble(builder: ServiceBuilder) -> Result<Service, DefinitionError> {
    let policies = Policies::default_deny() // a capability no rule names is refused
        .global(RequireIdentity) // every caller signs in
        .for_type("tickets", AllowAll) // every signed-in user may use tickets.* …
        .for_capability("tickets.close", RequireRole::new("agent")) // … support agents close
        .for_capability("tickets.delete", RequireRole::new("admin")); // … admins delete
    let budgets = RateBudgets {
        consumer_quotas: HashMap::from([
            // 5 creates per minute per user
            (Scope::capability("tickets.create"), Quota::per_minute(NonZeroU32::new(5).expect("5 > 0"))),
        ]),
        ..Default::default()
    };
    // Each part once: the builder gives every engine the same clock and stores (memory for
    // `service`, Redis for `production::service`), so the wiring cannot disagree with itself.
    let wired = builder.authority(policies).rate_budgets(budgets).build();
    wired.registry.provide(Desk::default());
    define(&wired.registry)?;
    let tickets = wired.registry.mount("tickets", "main")?;
    Ok(Service { wired, _tickets: tickets })
}
// guide:end service
