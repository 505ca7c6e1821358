//! The demo surface: a small shop whose capabilities, between them, produce every error code and
//! every retry category.
//!
//! | tool | what it shows |
//! |---|---|
//! | `orders-list`, `orders-get` | reads; `orders-get` declares an output schema, and an unknown order is a `PRECONDITION_FAILED` for a tool with one |
//! | `orders-update_address` | a write with schema checks (`INVALID_INPUT`) and a precondition (`PRECONDITION_FAILED`) |
//! | `orders-cancel` | a destructive call behind confirmation (`CONFIRMATION_REQUIRED` / `CONFIRMATION_INVALID`); `STALE_CAPABILITY` with a surface id from another server process |
//! | `refunds-issue` | an external effect gated by authorization (`NOT_AUTHENTICATED`, `NOT_AUTHORIZED`), one refund per order (a natural idempotency key: a repeat is answered with the refund on record); each refund issued is in the shop's refund ledger |
//! | `shipping-quote` | rate-limited (`RATE_LIMITED`, `after-delay`) |
//! | `shipping-track` | slow on a cold lookup (`TIMEOUT`, idempotent so `yes`; `CANCELLED` when the client cancels) |
//! | `cart-view`, `cart-add_item`, `cart-checkout` | view actions on live cart instances (`AMBIGUOUS_INSTANCE`; `COMPONENT_UNMOUNTED` after checkout closes the cart) |
//! | `cart-clear` | a destructive call on a cart: `STALE_CAPABILITY` when planned against a surface version from before the carts changed |
//! | `reports-export` | a handler that panics (`EXECUTION_FAILED`, the panic stays in the operator log) |
//! | `loyalty-redeem` | disabled with a reason (`CAPABILITY_NOT_AVAILABLE`) |
//! | `admin-purge_cache` | hidden from everyone but admins (`CAPABILITY_NOT_FOUND`, like a name that never existed) |
//! | `approvals-approve` | the second channel for a two-phase confirmation: an approver (role `approver`, hidden from everyone else) approves a confirmation someone else requested |
//! | `tickets-open` | a write anyone may call, whose output carries a fresh `ticketId` per execution: a second execution of one call is visible from outside (in its answers, and in the shop's ticket ledger) |

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::details::{ExecutionFailedReason, PreconditionDetails};
use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_policy::{
    ApprovalError, AuditConfig, AuditSink, ConfirmationConfig, ConfirmationEngine, ConfirmationStore, Quorum,
    RateLimiter, Scope,
};
use agent_surface_registry::{Ctx, Instance, Mount, Registry, RegistryConfig, Unmet};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::data::{Data, Ledger, Refused};
use crate::orders::{Address, Order, Status, seed_orders};

/// An order id such as `A-1001`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(transparent)]
struct OrderId(#[schemars(regex(pattern = r"^[A-Z]-[0-9]{4}$"))] String);

/// The shop's state, shared by every handler.
pub(crate) struct Shop {
    /// Orders and warm tracking lookups, in memory or in Redis.
    data: Data,
    /// The live cart instances, by instance id; dropping a handle closes the cart. Carts are
    /// instances of this process (a replica's view instances are its own).
    carts: Mutex<HashMap<String, Mount>>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct NoInput {}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct OrderLine {
    order_id: String,
    status: Status,
    total_cents: u64,
}

#[derive(Serialize, JsonSchema)]
struct OrderList {
    orders: Vec<OrderLine>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct GetOrder {
    order_id: OrderId,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct UpdateAddress {
    order_id: OrderId,
    address: Address,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AddressUpdated {
    order_id: String,
    address: Address,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Cancelled {
    order_id: String,
    refunded_cents: u64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct IssueRefund {
    order_id: OrderId,
    /// At least one cent.
    #[schemars(range(min = 1))]
    amount_cents: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Refund {
    refund_id: String,
    order_id: String,
    amount_cents: u64,
}

#[derive(Deserialize, JsonSchema)]
struct Quote {
    /// Destination postal code, five digits.
    #[schemars(regex(pattern = r"^[0-9]{5}$"))]
    zip: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct QuoteResult {
    carrier: String,
    cents: u64,
    days: u32,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Tracking {
    order_id: String,
    status: String,
}

#[derive(Deserialize, JsonSchema)]
struct AddItem {
    /// The item's stock-keeping unit, at most 64 characters.
    #[schemars(length(min = 1, max = 64))]
    sku: String,
    /// Between 1 and 10.
    #[schemars(range(min = 1, max = 10))]
    qty: u32,
}

#[derive(Clone, Serialize, JsonSchema)]
struct Item {
    sku: String,
    qty: u32,
}

#[derive(Serialize, JsonSchema)]
struct CartView {
    owner: String,
    items: Vec<Item>,
}

/// A cart instance's state.
struct Cart {
    owner: String,
    items: Mutex<Vec<Item>>,
}

/// How the shop is set up.
#[derive(Clone)]
pub(crate) struct ShopOptions {
    /// The time budget of `shipping-track`.
    pub(crate) track_budget: Duration,
    /// How long a cold tracking lookup takes.
    pub(crate) cold_lookup: Duration,
    /// One more shipping quote every this long (two at once).
    pub(crate) quote_refill: Duration,
    /// Where confirmations live (default: in this process's memory).
    pub(crate) confirmations: Option<Arc<dyn ConfirmationStore>>,
    /// Where idempotency records live (default: in this process's memory).
    pub(crate) idempotency: Option<Arc<dyn agent_surface_policy::IdempotencyStore>>,
    /// The rate limiter (default: [`crate::policy::quote_limiter`] over `quote_refill`, in this
    /// process).
    pub(crate) rate_limiter: Option<Arc<dyn RateLimiter>>,
    /// How long `tickets-open` takes.
    pub(crate) ticket_delay: Duration,
    /// Whether the registry records metrics (`RegistryConfig::metrics`; the HTTP server does).
    pub(crate) metrics: bool,
    /// Where confirmation events and executions are recorded (the approval inbox shows the recent
    /// decisions from it); `None`: not recorded.
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    /// Capabilities whose calls need several distinct approvers (`ConfirmationConfig::quorums`).
    pub(crate) quorums: Vec<(String, u32)>,
    /// Where a confirmation's page in the approval inbox is (`ConfirmationConfig::approval_base_url`):
    /// `CONFIRMATION_REQUIRED` then carries `details.approvalUrl`.
    pub(crate) approval_base_url: Option<String>,
    /// Whether the conformance fixtures are defined after the shop (`conformance::define`, which
    /// `serve --conformance` calls): their type is then opened to everyone and declared in
    /// `RegistryConfig::late_types`.
    pub(crate) conformance: bool,
}

impl Default for ShopOptions {
    fn default() -> Self {
        ShopOptions {
            track_budget: Duration::from_millis(300),
            cold_lookup: Duration::from_secs(3),
            quote_refill: Duration::from_millis(800),
            confirmations: None,
            idempotency: None,
            rate_limiter: None,
            ticket_delay: Duration::ZERO,
            metrics: false,
            audit: None,
            quorums: Vec::new(),
            approval_base_url: None,
            conformance: false,
        }
    }
}

impl std::fmt::Debug for ShopOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShopOptions")
            .field("track_budget", &self.track_budget)
            .field("cold_lookup", &self.cold_lookup)
            .field("quote_refill", &self.quote_refill)
            .field("confirmations", &self.confirmations)
            .field("idempotency", &self.idempotency)
            .field("rate_limiter", &self.rate_limiter.as_ref().map(|_| "custom"))
            .field("ticket_delay", &self.ticket_delay)
            .field("audit", &self.audit)
            .field("quorums", &self.quorums)
            .field("approval_base_url", &self.approval_base_url)
            .field("conformance", &self.conformance)
            .finish()
    }
}

/// `tickets.open`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct OpenTicket {
    /// What the ticket is about.
    subject: String,
}

/// `approvals.approve`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Approve {
    /// The `confirmationId` of the pending confirmation (from the requester's `CONFIRMATION_REQUIRED`).
    confirmation_id: String,
}

/// An opened ticket.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Ticket {
    /// Fresh per execution, and distinct across server processes (`t-{pid}-{n}`).
    ticket_id: String,
    subject: String,
}

/// A ticket id no other execution, in this process or another, has had.
fn next_ticket_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!("t-{}-{}", std::process::id(), NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// The shop: its registry (capabilities defined, instances mounted) and the confirmation engine,
/// in which the MCP adapter records approvals given through elicitation (`EngineResolver`).
pub(crate) struct Demo {
    pub(crate) registry: Registry,
    pub(crate) confirmations: Arc<ConfirmationEngine>,
    /// The audit trail the shop records to ([`ShopOptions::audit`]).
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    /// The `orders`, `refunds`, … instances; dropping them would unmount the shop.
    _mounts: Vec<Mount>,
}

/// The most lines a cart holds.
const MAX_CART_ITEMS: usize = 50;

const UNKNOWN_ORDER: &str = "No order with that id exists. List the orders to find it.";
const NOT_CHANGEABLE: &str = "Only orders that have not shipped can be changed. Choose another order.";
const NOT_CANCELLABLE: &str = "Only orders that have not shipped can be cancelled.";

/// For preconditions: the order as last seen, or why the call cannot go on.
fn order_or_unmet(shop: &Shop, id: &OrderId) -> Result<Order, Unmet> {
    shop.data.seen(&id.0).ok_or_else(|| Unmet::new(UNKNOWN_ORDER).reason("unknown-order"))
}

/// `PRECONDITION_FAILED {reason: unknown-order}`.
fn unknown_order() -> AgentSurfaceError {
    let details = PreconditionDetails { reason: Some("unknown-order".to_string()), ..Default::default() };
    AgentSurfaceError::precondition_failed_with(UNKNOWN_ORDER, details)
}

/// For handlers: the order, or `PRECONDITION_FAILED {reason: unknown-order}`.
async fn order_or_error(shop: &Shop, id: &OrderId) -> Result<Order, AgentSurfaceError> {
    shop.data.order(&id.0).await?.ok_or_else(unknown_order)
}

/// A change refused by the data (the order is unknown, or no longer `placed`: another replica may
/// have changed it since this one's precondition looked), as the precondition would have said it.
fn refused(refused: Refused, not_placed: &'static str, reason: &str) -> AgentSurfaceError {
    match refused {
        Refused::Unknown => unknown_order(),
        Refused::NotPlaced(status) => {
            let mut details = PreconditionDetails { reason: Some(reason.to_string()), ..Default::default() };
            details.extra.insert("status".to_string(), serde_json::to_value(status).unwrap_or(Value::Null));
            AgentSurfaceError::precondition_failed_with(not_placed, details)
        }
    }
}

/// The shipping-quote budget ([`crate::policy::quote_budget`]) on Redis, shared by every replica:
/// a caller's quotes take from one budget whichever replica answers.
pub(crate) fn shared_quote_limiter(
    redis: &agent_surface_redis::RedisStores,
    refill: Duration,
) -> agent_surface_redis::RedisRateLimiter {
    redis.rate_limiter(crate::policy::quote_budget(refill))
}

/// Builds the shop, its data in this process's memory.
pub(crate) fn build(options: ShopOptions) -> Demo {
    build_with(options, Data::memory(seed_orders()))
}

/// Builds the shop over `data`.
pub(crate) fn build_with(options: ShopOptions, data: Data) -> Demo {
    // Two-phase by default; over MCP, a client that can elicit lets the person answer in place.
    let quorums = options.quorums.iter().map(|(c, n)| (Scope::capability(c.clone()), Quorum::of(*n))).collect();
    let mut engine = ConfirmationConfig {
        ttl: Duration::from_secs(300),
        audit: options.audit.clone(),
        quorums,
        approval_base_url: options.approval_base_url.clone(),
        ..Default::default()
    };
    if let Some(store) = options.confirmations.clone() {
        // A shared store serves replicas, each with registration ids of its own: the engine
        // binds the evidence to the instance (`TargetBinding::Auto` follows the store's reach).
        engine.store = store;
    }
    let confirmations = Arc::new(ConfirmationEngine::new(engine));
    let rate_limiter =
        options.rate_limiter.clone().unwrap_or_else(|| Arc::new(crate::policy::quote_limiter(options.quote_refill)));
    let mut config = RegistryConfig {
        authority: Some(Arc::new(crate::policy::authority(options.conformance))),
        rate_limiter: Some(rate_limiter),
        confirmation: Some(confirmations.clone()),
        metrics: options.metrics,
        audit: options.audit.clone().map(AuditConfig::new),
        late_types: options.conformance.then(|| crate::policy::CONFORMANCE.to_string()).into_iter().collect(),
        ..Default::default()
    };
    if let Some(store) = options.idempotency.clone() {
        config.idempotency = store;
    }
    let registry = Registry::new(config);
    let shop = Arc::new(Shop { data, carts: Mutex::default() });
    registry.provide(shop.clone());
    registry.provide(confirmations.clone());
    let options_audit = options.audit.clone();
    define(&registry, options).unwrap_or_else(|e| panic!("the demo surface is defined wrongly: {e}"));
    let mut mounts = Vec::new();
    for ty in ["orders", "refunds", "shipping", "reports", "loyalty", "admin", "tickets", "approvals"] {
        mounts.push(registry.mount(ty, "shop").unwrap_or_else(|e| panic!("cannot mount {ty}: {e}")));
    }
    for owner in ["alice", "bob"] {
        let cart = Cart { owner: owner.to_string(), items: Mutex::default() };
        let instance = Instance::new().state(cart).description(format!("{owner}'s cart"));
        let id = format!("cart-{owner}");
        let mount = registry.mount_with("cart", &id, instance).unwrap_or_else(|e| panic!("cannot mount {id}: {e}"));
        shop.carts.lock().unwrap_or_else(PoisonError::into_inner).insert(id, mount);
    }
    registry.disable("loyalty.redeem", "Loyalty points are being migrated. Offer a discount code instead.");
    Demo { registry, confirmations, audit: options_audit, _mounts: mounts }
}

fn define(registry: &Registry, options: ShopOptions) -> Result<(), agent_surface_core::DefinitionError> {
    registry.define("orders", |t| {
        t.capability("list", "List the shop's orders with their status and total.")
            .effect(Effect::Read)
            .idempotent()
            .handler(|ctx: Ctx, _: NoInput| async move {
                let shop = ctx.state::<Arc<Shop>>();
                let orders = shop
                    .data
                    .orders()
                    .await?
                    .into_iter()
                    .map(|o| OrderLine { order_id: o.order_id, status: o.status, total_cents: o.total_cents })
                    .collect();
                Ok::<_, AgentSurfaceError>(OrderList { orders })
            });
        t.capability("get", "Get one order by id (e.g. A-1001), with its address and status.")
            .effect(Effect::Read)
            .idempotent()
            .handler(|ctx: Ctx, i: GetOrder| async move {
                let shop = ctx.state::<Arc<Shop>>();
                order_or_error(shop, &i.order_id).await
            });
        t.capability("update_address", "Change the delivery address of an order that has not shipped yet.")
            .effect(Effect::Write)
            .precondition(|ctx: &Ctx, i: &UpdateAddress| {
                let order = order_or_unmet(ctx.state::<Arc<Shop>>(), &i.order_id)?;
                if order.status != Status::Placed {
                    return Err(Unmet::new(NOT_CHANGEABLE)
                        .reason("order-shipped")
                        .detail("status", serde_json::to_value(order.status).unwrap_or(Value::Null)));
                }
                Ok(())
            })
            .handler(|ctx: Ctx, i: UpdateAddress| async move {
                let shop = ctx.state::<Arc<Shop>>();
                let order = shop
                    .data
                    .update_address(&i.order_id.0, &i.address)
                    .await?
                    .map_err(|r| refused(r, NOT_CHANGEABLE, "order-shipped"))?;
                Ok::<_, AgentSurfaceError>(AddressUpdated { order_id: order.order_id, address: order.address })
            });
        t.capability(
            "cancel",
            "Cancel an order that has not shipped and refund it in full. Needs the user's approval.",
        )
        .effect(Effect::Destructive)
        // The order id passed the input schema's pattern before the summary is rendered.
        .confirm(|i: &GetOrder| format!("Cancel order {} and refund the customer in full.", i.order_id.0))
        .precondition(|ctx: &Ctx, i: &GetOrder| {
            let order = order_or_unmet(ctx.state::<Arc<Shop>>(), &i.order_id)?;
            if order.status != Status::Placed {
                return Err(Unmet::new(NOT_CANCELLABLE)
                    .reason("order-not-cancellable")
                    .detail("status", serde_json::to_value(order.status).unwrap_or(Value::Null)));
            }
            Ok(())
        })
        .handler(|ctx: Ctx, i: GetOrder| async move {
            let shop = ctx.state::<Arc<Shop>>();
            let order = shop
                .data
                .cancel(&i.order_id.0)
                .await?
                .map_err(|r| refused(r, NOT_CANCELLABLE, "order-not-cancellable"))?;
            Ok::<_, AgentSurfaceError>(Cancelled { order_id: order.order_id, refunded_cents: order.total_cents })
        });
    })?;
    registry.define("refunds", |t| {
        t.capability("issue", "Refund part of an order to the customer's card, once per order. For support agents.")
            .effect(Effect::External)
            // One refund per order, whoever asks and however: a repeat is answered with the
            // refund on record, another amount for the same order is a conflict.
            .idempotency_key(|i: &IssueRefund| i.order_id.0.clone())
            .precondition(|ctx: &Ctx, i: &IssueRefund| {
                let order = order_or_unmet(ctx.state::<Arc<Shop>>(), &i.order_id)?;
                if i.amount_cents > order.total_cents {
                    return Err(Unmet::new("A refund cannot exceed the order total.")
                        .reason("amount-too-large")
                        .detail("maxCents", order.total_cents));
                }
                Ok(())
            })
            .handler(|ctx: Ctx, i: IssueRefund| async move {
                // A fresh suffix per execution, so that a second execution would show.
                let execution = &agent_surface_core::id::random_id("")[..8];
                let refund = Refund {
                    refund_id: format!("R-{}-{execution}", &i.order_id.0[2..]),
                    order_id: i.order_id.0,
                    amount_cents: i.amount_cents,
                };
                // The effect: the refund is in the shop's ledger.
                ctx.state::<Arc<Shop>>().data.record(Ledger::Refunds, &refund).await?;
                Ok::<_, AgentSurfaceError>(refund)
            });
    })?;
    let cold = options.cold_lookup;
    registry.define("shipping", |t| {
        t.capability("quote", "Quote shipping to a postal code. Limited to a few quotes per second.")
            .effect(Effect::Read)
            .idempotent()
            .handler(|_ctx: Ctx, i: Quote| async move {
                let days = 2 + u32::from(i.zip.as_bytes()[0] - b'0') % 3;
                Ok::<_, AgentSurfaceError>(QuoteResult {
                    carrier: "Parcelwise".into(),
                    cents: 499 + 100 * u64::from(days),
                    days,
                })
            });
        t.capability("track", "Track an order's shipment. The first lookup of an order can be slow.")
            .effect(Effect::Read)
            .idempotent()
            .time_budget(options.track_budget)
            .handler(move |ctx: Ctx, i: GetOrder| async move {
                let shop = ctx.state::<Arc<Shop>>();
                let order = order_or_error(shop, &i.order_id).await?;
                if shop.data.warm_up(&order.order_id).await? {
                    tokio::time::sleep(cold).await;
                }
                let status = match order.status {
                    Status::Placed => "label created",
                    Status::Shipped => "in transit",
                    Status::Cancelled => "cancelled",
                };
                Ok::<_, AgentSurfaceError>(Tracking { order_id: order.order_id, status: status.to_string() })
            });
    })?;
    registry.define("cart", |t| {
        t.capability("view", "Show the items in a shopping cart.").effect(Effect::Read).idempotent().view().handler(
            |ctx: Ctx, _: NoInput| async move {
                let cart = ctx.instance::<Cart>();
                let items = cart.items.lock().unwrap_or_else(PoisonError::into_inner).clone();
                Ok::<_, AgentSurfaceError>(CartView { owner: cart.owner.clone(), items })
            },
        );
        t.capability("add_item", "Add an item to a shopping cart.").effect(Effect::Write).view().handler(
            |ctx: Ctx, i: AddItem| async move {
                let cart = ctx.instance::<Cart>();
                let mut items = cart.items.lock().unwrap_or_else(PoisonError::into_inner);
                if items.len() >= MAX_CART_ITEMS {
                    let details = PreconditionDetails {
                        reason: Some("cart-full".to_string()),
                        extra: [("maxItems".to_string(), Value::from(MAX_CART_ITEMS))].into_iter().collect(),
                    };
                    return Err(AgentSurfaceError::precondition_failed_with(
                        "The cart is full. Check it out or clear it first.",
                        details,
                    ));
                }
                items.push(Item { sku: i.sku, qty: i.qty });
                Ok::<_, AgentSurfaceError>(CartView { owner: cart.owner.clone(), items: items.clone() })
            },
        );
        t.capability("clear", "Remove every item from a shopping cart. Cannot be undone.")
            .effect(Effect::Destructive)
            .handler(|ctx: Ctx, _: NoInput| async move {
                let cart = ctx.instance::<Cart>();
                let removed = std::mem::take(&mut *cart.items.lock().unwrap_or_else(PoisonError::into_inner)).len();
                Ok::<_, AgentSurfaceError>(json!({"removed": removed, "owner": cart.owner}))
            });
        t.capability("checkout", "Check out a shopping cart; the cart closes afterwards.")
            .effect(Effect::Write)
            .view()
            .handler(|ctx: Ctx, _: NoInput| async move {
                let cart = ctx.instance::<Cart>();
                let items = std::mem::take(&mut *cart.items.lock().unwrap_or_else(PoisonError::into_inner));
                // The cart closes right after this call returns (its instance unmounts).
                let mount = ctx
                    .state::<Arc<Shop>>()
                    .carts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(ctx.instance_id());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    drop(mount);
                });
                Ok::<_, AgentSurfaceError>(json!({"checkedOut": items.len(), "owner": cart.owner}))
            });
    })?;
    registry.define("reports", |t| {
        t.capability("export", "Export the monthly sales report.").effect(Effect::Read).handler(
            |_ctx: Ctx, _: NoInput| async move {
                let rows: Vec<u64> = Vec::new();
                // A bug: the reporting backend returned no rows. The panic text stays in the
                // operator log; the agent gets a sanitized EXECUTION_FAILED.
                let first = rows.first().copied().unwrap_or_else(|| {
                    panic!("index out of range: report rows at postgres://reports.internal:5432/sales")
                });
                Ok::<_, AgentSurfaceError>(json!({"firstRow": first}))
            },
        );
    })?;
    let ticket_delay = options.ticket_delay;
    registry.define("tickets", |t| {
        t.capability("open", "Open a support ticket with a subject.").effect(Effect::Write).handler(
            move |ctx: Ctx, i: OpenTicket| async move {
                let ticket = Ticket { ticket_id: next_ticket_id(), subject: i.subject };
                // The slow part (a test catches the call in flight there), then the effect: the
                // ticket is in the shop's ledger.
                if !ticket_delay.is_zero() {
                    tokio::time::sleep(ticket_delay).await;
                }
                ctx.state::<Arc<Shop>>().data.record(Ledger::Tickets, &ticket).await?;
                Ok::<_, AgentSurfaceError>(ticket)
            },
        );
    })?;
    registry.define("loyalty", |t| {
        t.capability("redeem", "Redeem loyalty points for a discount.")
            .effect(Effect::Write)
            .handler(|_ctx: Ctx, _: NoInput| async move { Ok::<_, AgentSurfaceError>(json!({"redeemed": true})) });
    })?;
    registry.define("approvals", |t| {
        t.capability("approve", "Approve a pending confirmation that someone else requested. For approvers.")
            .effect(Effect::Write)
            .handler(|ctx: Ctx, i: Approve| async move {
                let engine = ctx.state::<Arc<ConfirmationEngine>>();
                // The authority policy admits only signed-in approvers.
                let Some(approver) = ctx.consumer().identity() else {
                    return Err(AgentSurfaceError::not_authenticated());
                };
                match engine.approve(&i.confirmation_id, approver).await {
                    Ok(()) => Ok(json!({"approved": i.confirmation_id})),
                    Err(e) => {
                        let reason = match e {
                            ApprovalError::Unknown => "unknown-confirmation",
                            ApprovalError::Expired => "expired",
                            ApprovalError::SelfApproval => "self-approval",
                            ApprovalError::AlreadyDecided(_) => "already-decided",
                            _ => return Err(AgentSurfaceError::execution_failed(ExecutionFailedReason::Transport)),
                        };
                        let details =
                            PreconditionDetails { reason: Some(reason.to_string()), extra: Default::default() };
                        Err(AgentSurfaceError::precondition_failed_with(
                            "This confirmation cannot be approved. Check its id and state.",
                            details,
                        ))
                    }
                }
            });
    })?;
    registry.define("admin", |t| {
        t.capability("purge_cache", "Purge the storefront cache. Administrators only.")
            .effect(Effect::Write)
            .handler(|_ctx: Ctx, _: NoInput| async move { Ok::<_, AgentSurfaceError>(json!({"purged": true})) });
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_surface_policy::{Consumer, Identity};
    use agent_surface_registry::{InvokeOptions, InvokeRequest, Target};

    /// The demo's wiring is consistent whatever it is given: one clock, one audit sink for the
    /// registry and the engine (`Registry::wiring_warnings` is empty).
    #[test]
    fn the_demo_wiring_has_nothing_to_report() {
        assert_eq!(build(ShopOptions::default()).registry.wiring_warnings(), []);
        let sink: Arc<dyn AuditSink> = Arc::new(agent_surface_policy::MemoryAuditSink::default());
        let audited = build(ShopOptions { audit: Some(sink), ..ShopOptions::default() });
        assert_eq!(audited.registry.wiring_warnings(), []);
    }

    /// The second channel: an approver approves alice's pending cancellation through
    /// `approvals.approve`, and alice's repeat with the confirmation id runs it; the tool is hidden
    /// from everyone but approvers, and an approver cannot approve their own request.
    #[tokio::test]
    async fn an_approver_approves_someone_elses_confirmation() {
        let demo = build(ShopOptions::default());
        let alice = || InvokeOptions::new(Consumer::authenticated("alice", Identity::new("alice")));
        let maria =
            || InvokeOptions::new(Consumer::authenticated("maria", Identity::new("maria").with_role("approver")));
        let cancel = InvokeRequest::new("orders.cancel", json!({"orderId": "A-1001"}));
        let pending = demo.registry.invoke(cancel.clone(), alice()).await;
        let id = pending
            .error_payload()
            .and_then(|p| p.detail("confirmationId"))
            .and_then(Value::as_str)
            .unwrap()
            .to_string();
        let approve = |id: &str| InvokeRequest::new("approvals.approve", json!({"confirmationId": id}));
        let hidden = demo.registry.invoke(approve(&id), alice()).await;
        assert_eq!(hidden.code(), Some(agent_surface_core::ErrorCode::CapabilityNotFound));
        let approved = demo.registry.invoke(approve(&id), maria()).await;
        assert!(approved.is_ok(), "{approved:?}");
        let again = demo.registry.invoke(approve(&id), maria()).await;
        assert_eq!(again.error_payload().and_then(|p| p.detail("reason")), Some(&json!("already-decided")));
        let done = demo.registry.invoke(cancel.with_confirmation(id), alice()).await;
        assert!(done.is_ok(), "{done:?}");
        let own =
            demo.registry.invoke(InvokeRequest::new("orders.cancel", json!({"orderId": "A-1003"})), maria()).await;
        let own =
            own.error_payload().and_then(|p| p.detail("confirmationId")).and_then(Value::as_str).unwrap().to_string();
        let refused = demo.registry.invoke(approve(&own), maria()).await;
        assert_eq!(refused.error_payload().and_then(|p| p.detail("reason")), Some(&json!("self-approval")));
    }

    /// A cart holds at most `MAX_CART_ITEMS` lines; past it, adding is `PRECONDITION_FAILED
    /// {reason: cart-full}` and the cart stays as it was.
    #[tokio::test]
    async fn a_cart_is_bounded() {
        let demo = build(ShopOptions::default());
        let add = || {
            InvokeRequest::new("cart.add_item", json!({"sku": "pen", "qty": 1}))
                .with_target(Target { instance_id: Some("cart-alice".to_string()), registration_id: None })
        };
        let alice = || InvokeOptions::new(Consumer::anonymous("alice"));
        for n in 0..MAX_CART_ITEMS {
            assert!(demo.registry.invoke(add(), alice()).await.is_ok(), "line {n}");
        }
        let full = demo.registry.invoke(add(), alice()).await;
        let p = full.error_payload().expect("refused");
        assert_eq!(p.detail("reason"), Some(&json!("cart-full")));
    }
}
