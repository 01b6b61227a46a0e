// Copyright 2026 The tailcut Authors.
// SPDX-License-Identifier: Apache-2.0

//! The account's arithmetic and the terms' decoding. Expected values are the
//! budget's arithmetic, worked by hand, not the account's.

use crate::account::{Accounts, Commitment, Grant, SLOT_MS, Terms};
use crate::terms::from_metadata;

/// A 5% budget over 30 s, one hedge, late below 5 hedges left.
fn terms() -> Terms {
    Terms { account: "shop/web".into(), ratio: 0.05, window: 30, hedges: 1, late_below: 5, late_ms: 30, delay_ms: 0, retries: 1, methods: String::new() }
}

/// The millisecond second s of a clock starts at.
fn ms(s: i64) -> i64 {
    s * 1000
}

/// Sends n requests at now (ms) that are answered unhedged.
fn answered(a: &mut Accounts, now: i64, t: &Terms, n: usize) {
    for _ in 0..n {
        let (_, mut c) = a.admit(now, t);
        a.settle(&mut c, 1);
    }
}

#[test]
fn admit_keeps_hedges_within_the_budget() {
    let (mut a, t) = (Accounts::new(), terms());
    // The first request of a window fits no hedge: 5% of 1 request.
    assert_eq!(a.admit(ms(100), &t).0.hedges, 0, "first request");
    answered(&mut a, ms(100), &t, 199);
    // 200 requests in, none hedged: 10 hedges fit; taking one leaves 9, not
    // fewer than 5, so at the delay.
    let (g, mut c) = a.admit(ms(100), &t);
    assert_eq!(g, Grant { hedges: 1, ..Grant::default() }, "after 200 answered requests");
    // Requests that keep their hedge (Envoy sent it) use the budget up: 201
    // requests allow 10.05 hedges.
    a.settle(&mut c, 2);
    let (mut granted, mut late) = (0, 0);
    for _ in 0..9 {
        let (g, mut c) = a.admit(ms(100), &t);
        granted += (g.hedges > 0) as i32;
        late += g.late as i32;
        a.settle(&mut c, 2);
    }
    assert_eq!(a.committed("shop/web"), (10, 210), "hedges and requests in the window");
    assert_eq!((granted, late), (9, 5), "9 more requests: hedged, late (the last 5: fewer than 5 left)");
    assert_eq!(a.admit(ms(100), &t).0.hedges, 0, "budget spent");
}

/// #23's defect 2: a request its client resets never answers. Its stream
/// still ends, and its unsent hedge goes back; a hedge Envoy sent before the
/// reset stays spent.
#[test]
fn cancelled_requests_give_their_hedges_back() {
    let (mut a, t) = (Accounts::new(), terms());
    answered(&mut a, ms(100), &t, 380); // with 20 more, 20 hedges fit
    let mut cancelled: Vec<Commitment> = Vec::new();
    for _ in 0..20 {
        let (g, c) = a.admit(ms(100), &t);
        assert_eq!(g.hedges, 1, "each of 20 requests gets a hedge");
        cancelled.push(c);
    }
    assert_eq!(a.admit(ms(100), &t).0.hedges, 0, "20 hedges committed to requests in flight");
    // 10 were reset before their hedge went (one attempt), 10 after it.
    for (i, c) in cancelled.iter_mut().enumerate() {
        a.settle(c, 1 + (i % 2) as i64);
    }
    assert_eq!(a.committed("shop/web").0, 10, "the window holds the 10 hedges that were sent");
    // A request that never reached an upstream gives back all it took.
    let (g, mut c) = a.admit(ms(100), &t);
    assert_eq!(g.hedges, 1);
    assert_eq!(a.settle(&mut c, 0), 1, "a stream with no upstream attempt");
    assert_eq!(a.settle(&mut c, 0), 0, "a second settle");
}

#[test]
fn the_window_slides() {
    let (mut a, t) = (Accounts::new(), terms());
    answered(&mut a, ms(100), &t, 380);
    for _ in 0..20 {
        let (_, mut c) = a.admit(ms(100), &t);
        a.settle(&mut c, 2);
    }
    assert_eq!(a.admit(ms(110), &t).0.hedges, 0, "10 s later the 20 hedges of second 100 still count");
    // At 130 second 100 has left the 30 s window, its requests and hedges
    // with it: only the one request of 110 and this one are left.
    assert_eq!(a.admit(ms(130), &t).0.hedges, 0, "at 130, 2 requests in the window");
    assert_eq!(a.committed("shop/web"), (0, 2));
    // A hedge given back after its second left the account's history
    // (2 x 30 + 1 seconds) changes nothing.
    let mut b = Accounts::new();
    answered(&mut b, ms(100), &t, 40);
    let (_, mut c) = b.admit(ms(100), &t);
    answered(&mut b, ms(161), &t, 40);
    assert_eq!(b.settle(&mut c, 1), 0, "a commitment whose second left the history");
}

#[test]
fn mesh_retries_cap_the_hedged_request() {
    let mesh = Terms { retries: 2, ..terms() };
    let mut a = Accounts::new();
    answered(&mut a, ms(100), &mesh, 400);
    assert_eq!(a.admit(ms(100), &mesh).0, Grant { hedges: 1, cap_retries: true, late: false }, "2 failure retries beside 1 hedge");
}

#[test]
fn a_new_window_starts_a_new_account() {
    let (mut a, t) = (Accounts::new(), terms());
    answered(&mut a, ms(100), &t, 400);
    let (_, mut c) = a.admit(ms(100), &t);
    a.admit(ms(100), &Terms { window: 60, ..terms() });
    assert_eq!(a.settle(&mut c, 1), 0, "a commitment to the old window gave back to the new one");
    assert_eq!(a.committed("shop/web"), (0, 1), "the new account");
}

#[test]
fn idle_accounts_are_dropped() {
    let (mut a, t) = (Accounts::new(), terms());
    for i in 0..50 {
        answered(&mut a, ms(100), &Terms { account: format!("shop/policy-{i}"), ..terms() }, 40);
    }
    let (_, mut c) = a.admit(ms(100), &t);
    a.sweep(ms(130));
    assert_eq!(a.len(), 51, "one window on, all are kept");
    a.admit(ms(150), &t);
    a.sweep(ms(161));
    assert_eq!(a.len(), 1, "two windows after their last request only the one in use is kept");
    a.sweep(ms(300));
    assert!(a.is_empty(), "all idle");
    assert_eq!(a.settle(&mut c, 1), 0, "a commitment to a dropped account");
}

/// Serializes a map as Envoy's proxy_get_property does.
fn encode_pairs(pairs: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut b = (pairs.len() as u32).to_le_bytes().to_vec();
    for (k, v) in pairs {
        b.extend((k.len() as u32).to_le_bytes());
        b.extend((v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        b.extend(k.as_bytes());
        b.push(0);
        b.extend(v);
        b.push(0);
    }
    b
}

fn num(f: f64) -> Vec<u8> {
    f.to_le_bytes().to_vec()
}

#[test]
fn terms_from_metadata() {
    let full: Vec<(&str, Vec<u8>)> = vec![
        ("account", b"shop/web".to_vec()),
        ("ratio", num(0.05)),
        ("window", num(30.0)),
        ("hedges", num(1.0)),
        ("late_below", num(5.0)),
        ("late_ms", num(30.0)),
    ];
    assert_eq!(from_metadata(&encode_pairs(&full)), Some(terms()));
    let mut with_retries = full.clone();
    with_retries.push(("retries", num(2.0)));
    assert_eq!(from_metadata(&encode_pairs(&with_retries)).map(|t| t.retries), Some(2));
    // A static YAML config keeps a fraction as a string.
    let mut yaml_ratio = full.clone();
    yaml_ratio[1].1 = b"0.05".to_vec();
    assert_eq!(from_metadata(&encode_pairs(&yaml_ratio)).map(|t| t.ratio), Some(0.05));
    let mut with_methods = full.clone();
    with_methods.push(("methods", b"GET,HEAD".to_vec()));
    let gateway = from_metadata(&encode_pairs(&with_methods)).expect("terms with methods");
    assert_eq!(gateway.methods, "GET,HEAD");
    for (method, hedged) in [("GET", true), ("HEAD", true), ("POST", false), ("GE", false), ("get", false), ("", false)] {
        assert_eq!(gateway.hedges_method(method), hedged, "{method} with methods GET,HEAD");
    }
    assert!(terms().hedges_method("POST"), "no methods term: every method, as on split routes");
    let mut zero_window = full.clone();
    zero_window[2].1 = num(0.0);
    let count_too_big = (1u32 << 30).to_le_bytes().to_vec();
    for (name, b) in [
        ("owned route", encode_pairs(&[("owned", vec![1])])),
        ("no late_ms", encode_pairs(&full[..5])),
        ("empty", vec![]),
        ("truncated", encode_pairs(&full)[..40].to_vec()),
        ("count too big", count_too_big),
        ("zero window", encode_pairs(&zero_window)),
    ] {
        assert_eq!(from_metadata(&b), None, "{name}");
    }
}

/// #26's overshoot: with the window's hedges checked against the window's
/// requests only, a stretch that starts before a cluster of slow requests
/// spent what the quiet seconds before it left unused, and a minute of the
/// A/B measured 5.09% under a 5% budget. Here 200 requests a second arrive,
/// one every 5 ms, for 240 s: for 60 s none is slow, then every request that
/// gets a hedge keeps it (Envoy sent it), then one in ten. Every stretch of
/// whole slots s..e from 30 s and a slot to 60 s and a slot long must hold
/// at most 5% of the requests of s+1..e in hedges: the proof that any stretch
/// of 30 s or more, wherever it starts in a slot, holds at most 5% of its
/// own.
#[test]
fn no_stretch_goes_over_the_budget() {
    const SECONDS: usize = 240;
    const RATE: usize = 200;
    const SLOTS: usize = SECONDS * 1000 / SLOT_MS as usize;
    const WINDOW: usize = 30 * 1000 / SLOT_MS as usize;
    const CLOCK: i64 = 1_000_000_000; // a clock's milliseconds, on a slot's start
    let (mut a, t) = (Accounts::new(), terms());
    let (mut requests, mut hedges) = (vec![0i64; SLOTS], vec![0i64; SLOTS]);
    for sec in 0..SECONDS {
        for i in 0..RATE {
            let at = sec as i64 * 1000 + i as i64 * 5;
            let slot = (at / SLOT_MS) as usize;
            let (g, mut c) = a.admit(CLOCK + at, &t);
            requests[slot] += 1;
            let slow = (60..150).contains(&sec) || sec >= 150 && i % 10 == 0;
            if g.hedges > 0 && slow {
                hedges[slot] += g.hedges;
                a.settle(&mut c, 1 + g.hedges);
            } else {
                a.settle(&mut c, 1);
            }
        }
    }
    let mut worst = 0.0f64;
    for s in 0..SLOTS {
        let (mut r, mut h) = (0i64, 0i64);
        for e in s..SLOTS.min(s + 2 * WINDOW + 1) {
            h += hedges[e];
            if e > s {
                r += requests[e];
            }
            if e - s < WINDOW {
                continue;
            }
            let share = h as f64 / r as f64;
            assert!(h as f64 <= 0.05 * r as f64 + 1e-9, "slots {s}..{e}: {h} hedges for {r} requests after the first slot ({:.2}%)", 100.0 * share);
            worst = worst.max(share);
        }
    }
    // While every request is slow the account hedges what the budget leaves
    // in a steady stream: 120/121 of 5% of 90 s of 200 requests, 892.6 (with
    // whole seconds it was 30/31 of it, 871). Each stretch of a window may
    // fall short of that pace by a hedge that rounds down.
    let total: i64 = hedges[60 * 4..150 * 4].iter().sum();
    assert!(total >= 889, "every request slow for 90 s: {total} hedges, want at least 889 (120/121 of the budget's 900, less 3 of rounding)");
    println!("worst stretch: {:.3}% hedged; {total} hedges while every request was slow", 100.0 * worst);
}

/// Seconds 90 to 99 each see 100 requests answered unhedged, `in_band` of
/// them in all after 25 ms (between a 20 ms delay and a 30 ms late delay),
/// the others after 16 ms; at second 100 requests are hedged (Envoy sends
/// each hedge) until the account's end. Returns how many grants were late.
fn late_grants_after(history: i64, in_band: i64) -> (i64, i64) {
    let (mut a, t) = (Accounts::new(), Terms { delay_ms: 20, ..terms() });
    let mut band_left = in_band;
    for i in 0..history {
        let (_, mut c) = a.admit(ms(90 + i % 10), &t);
        a.settle(&mut c, 1);
        let took = if band_left > 0 { band_left -= 1; 25 } else { 16 };
        a.ended(&c, took);
    }
    let (mut granted, mut late) = (0, 0);
    loop {
        let (g, mut c) = a.admit(ms(100), &t);
        if g.hedges == 0 {
            return (granted, late);
        }
        granted += 1;
        late += g.late as i64;
        a.settle(&mut c, 2);
        a.ended(&c, 35);
    }
}

/// #26: late hedges wait only while the band between the delay and the late
/// delay holds the budget's tenth share of requests (0.5% under 5%). The
/// history leaves 50 hedges (5% of 1,000 requests) and each hedged request
/// adds 0.05: after the n-th, 50 + 0.05n - n are left, under 5 from n = 48
/// (45/0.95 = 47.4) and under 0 past n = 52 (50/0.95 = 52.6): the last 5
/// of 52 grants would be late.
#[test]
fn late_hedges_wait_only_while_the_band_is_busy() {
    assert_eq!(late_grants_after(1000, 0), (52, 0), "quiet band: every hedge at the delay");
    assert_eq!(late_grants_after(1000, 4), (52, 0), "0.4% in the band: quiet");
    assert_eq!(late_grants_after(1000, 6), (52, 5), "0.6% in the band: late");
    // Fewer than 2 / 0.5% = 400 ended requests say nothing: late. 300 requests
    // leave 15 hedges; 15 + 0.05n - n < 5 from n = 11 (10/0.95 = 10.5), of
    // 15 grants (15/0.95 = 15.8).
    assert_eq!(late_grants_after(300, 0), (15, 5), "too few ended requests");
}

#[test]
fn the_band_is_past_the_delay_up_to_the_late_delay() {
    let (mut a, t) = (Accounts::new(), Terms { delay_ms: 20, ..terms() });
    for took in [20, 21, 30, 31] {
        let (_, c) = a.admit(ms(100), &t);
        a.ended(&c, took);
    }
    assert_eq!(a.band("shop/web", ms(100)), (4, 2), "21 and 30 ms are in the band, 20 and 31 are not");
    // Without the delay in the terms (an older operator's route), nothing is
    // recorded and late hedges wait as before.
    let (_, c) = a.admit(ms(100), &terms());
    a.ended(&c, 25);
    assert_eq!(a.band("shop/web", ms(100)), (4, 2));
}
