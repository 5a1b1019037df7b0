//! The Grafana dashboard (`docs/grafana/ruststream-dashboard.json`) kept true: every metric
//! its queries name exists in the metrics table of `ruststream_adapter::metrics` (as a
//! Prometheus exporter names it: `.` as `_`, a histogram's `_bucket`, `_sum` and `_count`),
//! and every metric of the table is on a panel.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;

const DASHBOARD: &str = include_str!("../../docs/grafana/ruststream-dashboard.json");
const METRICS: &str = include_str!("../../adapter/src/support/metrics.rs");

/// The table's metrics: (Prometheus name, whether it is a histogram).
fn table() -> Vec<(String, bool)> {
    METRICS
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `"))
        .filter_map(|rest| {
            let (name, rest) = rest.split_once('`')?;
            let kind = rest.split('|').nth(1)?.trim();
            Some((name.replace('.', "_"), kind.starts_with("histogram")))
        })
        .collect()
}

/// The names a query can use for the table's metrics.
fn known() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (name, histogram) in table() {
        if histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
        names.insert(name);
    }
    names
}

/// The metric names in a PromQL expression: identifiers under `ruststream_` or `messaging_`.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut word = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            if word.starts_with("ruststream_") || word.starts_with("messaging_") {
                names.push(std::mem::take(&mut word));
            }
            word.clear();
        }
    }
    names
}

fn queries() -> Vec<String> {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    if let Some(vars) = dashboard["templating"]["list"].as_array() {
        for v in vars {
            if let Some(q) = v["query"]["query"].as_str() {
                exprs.push(q.to_owned());
            }
        }
    }
    exprs
}

#[test]
fn the_metrics_table_reads() {
    let table = table();
    assert!(table.len() >= 10, "the table was not found: {table:?}");
    assert!(table.contains(&("messaging_process_duration".to_owned(), true)));
}

#[test]
fn every_metric_the_dashboard_queries_exists_in_the_metrics_table() {
    let known = known();
    for expr in queries() {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "a query names no metric: {expr}");
        for name in names {
            assert!(
                known.contains(&name),
                "`{name}` is not in the metrics table: {expr}"
            );
        }
    }
}

#[test]
fn every_metric_of_the_table_is_on_a_panel() {
    let used: BTreeSet<String> = queries().iter().flat_map(|q| metric_names(q)).collect();
    for (name, histogram) in table() {
        let shown = used.contains(&name)
            || (histogram
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| used.contains(&format!("{name}{s}"))));
        assert!(shown, "`{name}` is on no panel of the dashboard");
    }
}

#[test]
fn a_query_naming_an_unknown_metric_is_caught() {
    let known = known();
    let names = metric_names("sum(rate(ruststream_wire_action_total[5m]))");
    assert_eq!(names, ["ruststream_wire_action_total"]);
    assert!(!known.contains(&names[0]));
}

#[test]
fn panels_have_unique_ids_and_use_the_datasource_variable() {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("JSON");
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(panel["id"].as_u64().expect("id")),
            "duplicate id"
        );
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{}",
            panel["title"]
        );
    }
}
