//! Small fixture surfaces: a shop with a catalog, a cart and orders.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use agent_surface_core::{AgentSurfaceError, DefinitionError, Effect};
use agent_surface_registry::{Ctx, Instance, Mount, Registry, RegistryConfig, Unmet};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The products the shop's catalog knows: `(sku, name, price in cents)`.
pub const PRODUCTS: [(&str, &str, u64); 3] =
    [("tea", "Green tea, 100 g", 450), ("mug", "Stoneware mug", 1200), ("pot", "Cast-iron teapot", 4200)];

/// `catalog.search` input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchInput {
    /// Words to look for in product names.
    pub query: String,
}

/// One product.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Product {
    /// The stock-keeping unit.
    pub sku: String,
    /// The display name.
    pub name: String,
    /// The unit price in cents.
    pub price_cents: u64,
}

/// `catalog.search` output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchOutput {
    /// The matching products.
    pub items: Vec<Product>,
}

/// `cart.add` input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddToCart {
    /// The product's SKU.
    pub sku: String,
    /// How many to add (at least 1).
    #[schemars(range(min = 1, max = 99))]
    pub quantity: u32,
}

/// `cart.view` input (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoInput {}

/// The cart's content.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CartView {
    /// Quantity per SKU.
    pub lines: BTreeMap<String, u32>,
}

/// `orders.cancel` input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelOrder {
    /// The order to cancel. Orders whose id starts with `shipped-` have shipped.
    pub order_id: String,
}

/// `orders.cancel` output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Cancelled {
    /// The cancelled order.
    pub order_id: String,
    /// What was refunded, in cents.
    pub refunded_cents: u64,
}

/// The state of a mounted cart instance.
#[derive(Debug, Default)]
pub struct Cart {
    lines: Mutex<BTreeMap<String, u32>>,
}

impl Cart {
    /// Quantity per SKU.
    pub fn lines(&self) -> BTreeMap<String, u32> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// A shop registry: `catalog.search` (read, idempotent), `cart.add` (write), `cart.view` (read,
/// idempotent) and `orders.cancel` (destructive). Each type has one instance, `main`.
///
/// ```
/// use agent_surface_core::ErrorCode;
/// use agent_surface_registry::RegistryConfig;
/// use agent_surface_testing::{ScriptedConsumer, Shop, expect_error};
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let mut shop = Shop::new(RegistryConfig::default());
/// shop.unmount("orders");
/// let results = ScriptedConsumer::new("c").call("orders.cancel", json!({"order_id": "A-1"})).run(shop.registry()).await;
/// expect_error(&results[0], ErrorCode::ComponentUnmounted);
/// # });
/// ```
#[derive(Debug)]
pub struct Shop {
    registry: Registry,
    mounts: BTreeMap<String, Mount>,
}

/// The shop's capability types.
pub const SHOP_TYPES: [&str; 3] = ["catalog", "cart", "orders"];

impl Shop {
    /// The shop with every type defined and mounted.
    ///
    /// # Panics
    ///
    /// Never for a sound `config` (the definitions are static); a definition defect would be a bug
    /// in this fixture.
    pub fn new(config: RegistryConfig) -> Shop {
        let mut shop = Shop::unmounted(config);
        for t in SHOP_TYPES {
            shop.mount(t);
        }
        shop
    }

    /// The shop with every type defined and nothing mounted (an empty surface).
    ///
    /// # Panics
    ///
    /// As [`Shop::new`].
    pub fn unmounted(config: RegistryConfig) -> Shop {
        let registry = Registry::new(config);
        define_shop(&registry).unwrap_or_else(|e| panic!("the shop fixture is defective: {e}"));
        Shop { registry, mounts: BTreeMap::new() }
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Mounts instance `main` of `type_id` (one of [`SHOP_TYPES`]); a cart gets an empty [`Cart`].
    /// Returns the registration id.
    ///
    /// # Panics
    ///
    /// For a type the shop does not define.
    pub fn mount(&mut self, type_id: &str) -> String {
        let instance = match type_id {
            "cart" => Instance::new().state(Cart::default()).description("The shopper's cart"),
            _ => Instance::new(),
        };
        let mount = self
            .registry
            .mount_with(type_id, "main", instance)
            .unwrap_or_else(|e| panic!("cannot mount {type_id}: {e}"));
        let id = mount.registration_id().unwrap_or_default().to_string();
        self.mounts.insert(type_id.to_string(), mount);
        id
    }

    /// Unmounts instance `main` of `type_id` (it leaves a tombstone). Unknown types are ignored.
    pub fn unmount(&mut self, type_id: &str) {
        self.mounts.remove(type_id);
    }

    /// The registration id of the mounted `main` instance of `type_id`.
    pub fn registration_id(&self, type_id: &str) -> Option<&str> {
        self.mounts.get(type_id).and_then(Mount::registration_id)
    }
}

fn define_shop(registry: &Registry) -> Result<(), DefinitionError> {
    registry.define("catalog", |t| {
        t.capability("search", "Search the catalog by product name.").effect(Effect::Read).idempotent().handler(
            |_ctx: Ctx, i: SearchInput| async move {
                let query = i.query.to_lowercase();
                let items = PRODUCTS
                    .iter()
                    .filter(|(sku, name, _)| name.to_lowercase().contains(&query) || *sku == query)
                    .map(|(sku, name, price)| Product {
                        sku: sku.to_string(),
                        name: name.to_string(),
                        price_cents: *price,
                    })
                    .collect();
                Ok::<_, AgentSurfaceError>(SearchOutput { items })
            },
        )
    })?;
    registry.define("cart", |t| {
        t.capability("add", "Add a product to the cart.")
            .effect(Effect::Write)
            .view()
            .precondition(|_ctx: &Ctx, i: &AddToCart| {
                if PRODUCTS.iter().any(|(sku, _, _)| *sku == i.sku) {
                    Ok(())
                } else {
                    Err(Unmet::new("There is no product with this SKU; search the catalog first.")
                        .reason("unknown-sku"))
                }
            })
            .handler(|ctx: Ctx, i: AddToCart| async move {
                let cart = ctx.instance::<Cart>();
                let mut lines = cart.lines.lock().unwrap_or_else(PoisonError::into_inner);
                *lines.entry(i.sku).or_default() += i.quantity;
                Ok::<_, AgentSurfaceError>(CartView { lines: lines.clone() })
            });
        t.capability("view", "Show the cart's content.").effect(Effect::Read).idempotent().view().handler(
            |ctx: Ctx, _i: NoInput| async move {
                Ok::<_, AgentSurfaceError>(CartView { lines: ctx.instance::<Cart>().lines() })
            },
        );
    })?;
    registry.define("orders", |t| {
        t.capability("cancel", "Cancel an order that has not shipped yet.")
            .effect(Effect::Destructive)
            .precondition(|_ctx: &Ctx, i: &CancelOrder| {
                if i.order_id.starts_with("shipped-") {
                    Err(Unmet::new("Shipped orders cannot be cancelled.").reason("order-shipped"))
                } else {
                    Ok(())
                }
            })
            .handler(|_ctx: Ctx, i: CancelOrder| async move {
                Ok::<_, AgentSurfaceError>(Cancelled { order_id: i.order_id, refunded_cents: 4200 })
            })
    })?;
    Ok(())
}

/// A shared counter, handy in handlers of test registries (`Arc` inside, cheap to clone).
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<std::sync::atomic::AtomicUsize>);

impl Counter {
    /// Adds one and returns the new value.
    pub fn bump(&self) -> usize {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
    }

    /// The current value.
    pub fn get(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}
