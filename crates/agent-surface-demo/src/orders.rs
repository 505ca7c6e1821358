//! The shop's orders: the model the shop's capabilities read and write and the data store
//! (`data.rs`: memory or Redis) keeps — below both, so that neither imports the other.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Status {
    Placed,
    Shipped,
    Cancelled,
}

/// A postal address.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Address {
    street: String,
    city: String,
    /// Five digits.
    #[schemars(regex(pattern = r"^[0-9]{5}$"))]
    zip: String,
}

/// An order.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Order {
    pub(crate) order_id: String,
    customer: String,
    pub(crate) status: Status,
    pub(crate) total_cents: u64,
    pub(crate) address: Address,
}

/// The orders a new shop opens with.
pub(crate) fn seed_orders() -> Vec<Order> {
    let address = |street: &str, city: &str, zip: &str| Address {
        street: street.to_string(),
        city: city.to_string(),
        zip: zip.to_string(),
    };
    [
        ("A-1001", "alice", Status::Placed, 4200, address("1 Elm St", "Springfield", "12345")),
        ("A-1002", "bob", Status::Shipped, 1599, address("2 Oak Ave", "Shelbyville", "23456")),
        ("A-1003", "carol", Status::Placed, 9900, address("3 Pine Rd", "Ogdenville", "34567")),
    ]
    .into_iter()
    .map(|(id, customer, status, total_cents, address)| Order {
        order_id: id.to_string(),
        customer: customer.to_string(),
        status,
        total_cents,
        address,
    })
    .collect()
}
