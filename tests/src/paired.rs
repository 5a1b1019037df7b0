//! Medians for the benches' interleaved rounds, shared by `adapter-tokio/benches/throughput.rs`
//! and the peer bench (`bench/benches/peers.rs`), which include this file with `#[path]`.

/// The median of the finite values of `v` (a lost round is NaN); NaN when there are none.
pub fn median(v: Vec<f64>) -> f64 {
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// The median of the per-round ratios `a[i] / b[i]` (rounds run back to back share the
/// machine's state, so pairing them cancels part of its drift), rounds that either side lost
/// (NaN) left out; NaN when a side did not run.
pub fn paired(a: &[f64], b: &[f64]) -> f64 {
    median(a.iter().zip(b).map(|(a, b)| a / b).collect())
}
