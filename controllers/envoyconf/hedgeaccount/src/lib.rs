// Copyright 2026 The tailcut Authors.
// SPDX-License-Identifier: Apache-2.0

//! tailcut's hedge account: a Proxy-Wasm module that keeps each policy's
//! hedges within its budget over every stretch of a window or more, in the
//! data path, on tailcut's own Envoy and on an Istio mesh's sidecars alike.
//!
//! Envoy's retry_budget does not bound hedges: a retry holds its place in the
//! budget only while it waits out its back-off (1 ms on a hedged route), not
//! while it runs. The account (account.rs) counts, per policy and Envoy
//! worker, the requests of the last two windows and a quarter second, by
//! quarter second, and the hedges committed to them. Hedges are committed when the request arrives, since
//! Envoy sends them later, and the ones Envoy did not send are given back
//! when the stream ends: proxy_on_log runs for every stream, answered or
//! reset by its client, and the stream's upstream attempt count says how
//! many were sent (#23: a Lua filter sees only answered requests, so a
//! cancelled request kept its commitment and starved the account).
//!
//! The module is built small (opt-level "z", no formatting on the request
//! path) so that the Istio publisher can inline it in an EnvoyFilter: the
//! sidecars get it from istiod, with no fetch from anywhere.

pub mod account;
pub mod terms;

#[cfg(test)]
mod tests;

#[cfg(target_arch = "wasm32")]
mod filter {
    use crate::account::{Accounts, Commitment};
    use crate::terms::{from_metadata, METADATA_KEY};
    use proxy_wasm::hostcalls;
    use proxy_wasm::traits::{Context, HttpContext};
    use proxy_wasm::types::{Action, LogLevel, MetricType};
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::time::UNIX_EPOCH;

    thread_local! {
        // A worker's VM runs one callback at a time.
        static ACCOUNTS: RefCell<Accounts> = RefCell::new(Accounts::new());
        static COUNTERS: RefCell<HashMap<String, [u32; 2]>> = RefCell::new(HashMap::new());
    }

    /// The account's counters, per policy, for the requests it did not hedge
    /// at the delay: hedged late (Grant::late), and turned away with no
    /// hedge. Envoy names them wasmcustom.tailcut_account.<ns/name>.<counter>;
    /// the bootstrap's stats_tags (envoyconf.AccountStatsTag) moves the policy
    /// into a tag. A request hedged at the delay, the common case, makes no
    /// host call for them.
    const HEDGED_LATE: usize = 0;
    const TURNED_AWAY: usize = 1;
    const COUNTER_NAMES: [&str; 2] = ["hedged_late", "turned_away"];

    fn count(account: &str, which: usize) {
        let id = COUNTERS.with_borrow_mut(|m| {
            if let Some(ids) = m.get(account) {
                return Some(ids[which]);
            }
            let mut ids = [0u32; 2];
            for (i, name) in COUNTER_NAMES.iter().enumerate() {
                // Built without format!, which would pull formatting into the module.
                let mut stat = String::with_capacity(16 + account.len() + name.len());
                stat.push_str("tailcut_account.");
                stat.push_str(account);
                stat.push('.');
                stat.push_str(name);
                ids[i] = hostcalls::define_metric(MetricType::Counter, &stat).ok()?;
            }
            m.insert(account.to_string(), ids);
            Some(ids[which])
        });
        if let Some(id) = id {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }

    /// The request headers by which a client changes Envoy's retries; on an
    /// accounted route only the account sets them (an edge that trusts its
    /// peer would pass a client's on).
    const CLIENT_HEADERS: [&str; 5] = [
        "x-envoy-max-retries",
        "x-envoy-upstream-rq-per-try-timeout-ms",
        "x-envoy-retry-on",
        "x-envoy-retry-grpc-on",
        "x-envoy-hedge-on-per-try-timeout",
    ];

    /// One stream: its commitment and when it started (ms), from its request
    /// headers to its end.
    struct Stream {
        commitment: Option<Commitment>,
        started_ms: i64,
    }

    fn property(path: Vec<&str>) -> Option<Vec<u8>> {
        hostcalls::get_property(path).ok().flatten()
    }

    fn now_ms() -> i64 {
        hostcalls::get_current_time().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis() as i64)
    }

    impl Context for Stream {}

    impl HttpContext for Stream {
        fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
            self.started_ms = now_ms();
            let now = self.started_ms;
            ACCOUNTS.with_borrow_mut(|a| a.sweep(now));
            let Some(md) = property(vec!["xds", "route_metadata", "filter_metadata", METADATA_KEY]) else {
                return Action::Continue;
            };
            let Some(terms) = from_metadata(&md) else { return Action::Continue };
            for h in CLIENT_HEADERS {
                self.set_http_request_header(h, None);
            }
            let method = self.get_http_request_header(":method").unwrap_or_default();
            if !terms.hedges_method(&method) {
                // A method the policy does not hedge, on a route that serves
                // every method (Envoy Gateway): never hedged, never retried,
                // so a POST runs once.
                self.set_http_request_header("x-envoy-upstream-rq-per-try-timeout-ms", Some("0"));
                self.set_http_request_header("x-envoy-max-retries", Some("0"));
                return Action::Continue;
            }
            let (grant, c) = ACCOUNTS.with_borrow_mut(|a| a.admit(now, &terms));
            self.commitment = Some(c);
            if grant.hedges == 0 {
                // No per-try timeout, so no hedge; the route's failure
                // retries stay.
                self.set_http_request_header("x-envoy-upstream-rq-per-try-timeout-ms", Some("0"));
                count(&terms.account, TURNED_AWAY);
                return Action::Continue;
            }
            if grant.late {
                count(&terms.account, HEDGED_LATE);
                self.set_http_request_header("x-envoy-upstream-rq-per-try-timeout-ms", Some(&terms.late_ms.to_string()));
            }
            if grant.cap_retries {
                self.set_http_request_header("x-envoy-max-retries", Some(&grant.hedges.to_string()));
            }
            Action::Continue
        }

        fn on_log(&mut self) {
            let Some(mut c) = self.commitment.take() else { return };
            if c.hedged() {
                let attempts = property(vec!["upstream", "request_attempt_count"])
                    .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
                    .map_or(0, |b| u64::from_le_bytes(b) as i64);
                ACCOUNTS.with_borrow_mut(|a| a.settle(&mut c, attempts));
            }
            if c.has_band() {
                let took = now_ms() - self.started_ms;
                ACCOUNTS.with_borrow_mut(|a| a.ended(&c, took));
            }
        }
    }

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Info);
        proxy_wasm::set_http_context(|_, _| -> Box<dyn HttpContext> { Box::new(Stream { commitment: None, started_ms: 0 }) });
        let _ = hostcalls::log(LogLevel::Info, "tailcut hedge account: started");
    }}
}
