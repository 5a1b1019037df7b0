//! Criterion benchmarks of the delay queue at 10^3, 10^5 and 10^6 pending copies, and a
//! measurement of the memory each pending copy takes (payload excluded, since it is shared
//! with the delivered message).
//!
//! Run: `cargo bench -p ruststream-settlement --bench delay_queue`. Results: BENCHMARKS.md.

#![allow(
    missing_docs,
    clippy::disallowed_methods,
    clippy::unwrap_used,
    clippy::print_stdout
)]

use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ruststream_settlement::{DelayQueue, Headers, Message, PendingCopy, RetryCount};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A typical delivered message: two headers and a 512-byte payload.
fn delivered() -> Message {
    let mut headers = Headers::new();
    headers.append(
        Bytes::from_static(b"Content-Type"),
        Bytes::from_static(b"application/json"),
    );
    headers.append(
        Bytes::from_static(b"Trace-Id"),
        Bytes::from_static(b"4bf92f3577b34da6a3ce929d0e0e4736"),
    );
    Message {
        reply: None,
        headers,
        payload: Bytes::from(vec![b'x'; 512]),
    }
}

/// A small deterministic generator of deadline offsets (splitmix64), in 0..60_000 ms.
fn offsets() -> impl FnMut() -> Duration {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Duration::from_millis((z ^ (z >> 31)) % 60_000)
    }
}

/// A queue of `n` copies of `message` at pseudo-random deadlines after `base`.
fn filled(n: usize, base: Instant, message: &Message) -> DelayQueue {
    let mut next = offsets();
    let mut q = DelayQueue::with_capacity(n);
    for i in 0..n {
        q.handle_copy(
            PendingCopy::new(i % 4, message, RetryCount(1)),
            base + next(),
        );
    }
    q
}

/// Prints the heap bytes each pending copy holds, payload excluded (it is shared), at 10^6
/// pending copies, and the overhead beyond the delivered headers' own bytes (issue 13's
/// target: at most 128); then the process's peak resident memory.
fn memory_per_copy() {
    const N: usize = 1_000_000;
    let message = delivered();
    let own: usize = message.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
    let region = Region::new(GLOBAL);
    let q = filled(N, Instant::now(), &message);
    let stats = region.change();
    let net = stats.bytes_allocated as isize - stats.bytes_deallocated as isize;
    let per_copy = net as f64 / N as f64;
    println!(
        "delay_queue memory: {N} pending copies (2 headers, {own} B of names and values; 512 B payload shared) \
         hold {net} B of heap: {per_copy:.1} B per copy in {:.2} allocations, {:.1} B beyond the headers' own bytes; \
         the PendingCopy itself is {} B and its heap key 32 B",
        stats.allocations as f64 / N as f64,
        per_copy - own as f64,
        std::mem::size_of::<PendingCopy>(),
    );
    let peak = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .map(str::to_owned)
        });
    println!("delay_queue memory: peak resident memory of the process: {peak:?}");
    black_box(&q);
}

fn queue(c: &mut Criterion) {
    memory_per_copy();
    let mut g = c.benchmark_group("delay_queue");
    for n in [1_000usize, 100_000, 1_000_000] {
        let base = Instant::now();
        let far = base + Duration::from_secs(3_600);
        let mut q = filled(n, base, &delivered());
        let mut next = offsets();
        let mut clock = base;
        // One pop of the earliest copy and one insert at a random deadline: the queue stays at n.
        g.bench_function(BenchmarkId::new("pop_and_insert", n), |b| {
            b.iter(|| {
                let copy = q.handle_timeout(far).next().unwrap();
                clock += Duration::from_micros(1);
                q.handle_copy(black_box(copy), clock + next());
            })
        });
        g.bench_function(BenchmarkId::new("poll_timeout", n), |b| {
            b.iter(|| black_box(&q).poll_timeout())
        });
        drop(q);
    }
    g.finish();
}

criterion_group!(benches, queue);
criterion_main!(benches);
