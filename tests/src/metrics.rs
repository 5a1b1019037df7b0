//! A recording metrics recorder for the conformance suite: installed once per test binary,
//! before any app starts, it keeps every counter, gauge and histogram the runtime registers,
//! and reads them without resetting them (tests run in parallel, each on mounts of its own).

use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};

struct Recording(Registry<Key, AtomicStorage>);

impl Recorder for Recording {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

static RECORDER: OnceLock<&'static Recording> = OnceLock::new();

/// Installs the recorder as the global one (once per process); every app a test starts
/// afterwards reports into it.
///
/// # Panics
/// When another global recorder was installed first.
pub fn install_recorder() {
    RECORDER.get_or_init(|| {
        let recording: &'static Recording = Box::leak(Box::new(Recording(Registry::atomic())));
        metrics::set_global_recorder(recording).expect("no other global metrics recorder");
        recording
    });
}

fn recording() -> &'static Recording {
    install_recorder();
    RECORDER.get().expect("installed just above")
}

fn matches(key: &Key, name: &str, labels: &[(&str, &str)]) -> bool {
    key.name() == name
        && labels.iter().all(|(l, v)| {
            key.labels()
                .any(|label| label.key() == *l && label.value() == *v)
        })
}

/// The sum of the counters named `name` that carry every label of `labels` (0 when none is
/// registered).
pub fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    recording()
        .0
        .get_counter_handles()
        .iter()
        .filter(|(key, _)| matches(key, name, labels))
        .map(|(_, c)| c.load(Ordering::Acquire))
        .sum()
}

/// The value of the gauge named `name` with `labels`, if one is registered.
pub fn gauge(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    recording()
        .0
        .get_gauge_handles()
        .iter()
        .find(|(key, _)| matches(key, name, labels))
        .map(|(_, g)| f64::from_bits(g.load(Ordering::Acquire)))
}

/// The values recorded by the histogram named `name` with `labels`.
pub fn histogram(name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    recording()
        .0
        .get_histogram_handles()
        .iter()
        .filter(|(key, _)| matches(key, name, labels))
        .flat_map(|(_, h)| h.data())
        .collect()
}
