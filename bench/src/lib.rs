//! What the peer bench (`benches/peers.rs`) and the scale bench (`benches/scale.rs`) share:
//! the order every handler decodes (`cargo bench --manifest-path bench/Cargo.toml`).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// What every handler decodes: an order, as a service would receive one.
#[derive(Debug, Serialize, Deserialize)]
pub struct Order {
    /// Its number (in the latency scenarios, its publish time).
    pub id: u64,
    /// Who placed it.
    pub customer: String,
    /// What.
    pub sku: String,
    /// How many.
    pub quantity: u32,
    /// At what price each, in cents.
    pub price_cents: u64,
    /// In what currency.
    pub currency: String,
    /// Padding, so that the JSON is exactly the size asked for.
    pub note: String,
}

/// The JSON of order `id`, padded (its `note`) to exactly `size` bytes.
///
/// # Panics
/// When `size` is below the JSON of an order with an empty note (about 130 bytes).
pub fn order_payload(id: u64, size: usize) -> Bytes {
    let mut order = Order {
        id,
        customer: format!("customer-{:06}", id % 1_000_000),
        sku: "SKU-4711-BLUE-XL".to_owned(),
        quantity: 3,
        price_cents: 129_900,
        currency: "EUR".to_owned(),
        note: String::new(),
    };
    let bare = serde_json::to_vec(&order).expect("an order encodes").len();
    order.note = "n".repeat(size - bare);
    let json = serde_json::to_vec(&order).expect("an order encodes");
    assert_eq!(json.len(), size);
    Bytes::from(json)
}
