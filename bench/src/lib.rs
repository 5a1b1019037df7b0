//! Nothing here: the peer bench is `benches/peers.rs` (`cargo bench --manifest-path bench/Cargo.toml`).
