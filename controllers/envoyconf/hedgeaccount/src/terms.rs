// Copyright 2026 The tailcut Authors.
// SPDX-License-Identifier: Apache-2.0

//! The account's terms, read from the route's metadata as the host serializes
//! it.

use crate::account::Terms;

/// The route metadata filter name the account's terms sit under
/// (envoyconf.HedgeBudgetFilter).
pub const METADATA_KEY: &str = "tailcut.hedge_budget";

/// Reads a route's metadata entry for METADATA_KEY, as Envoy's
/// proxy_get_property serializes a map: a little-endian u32 count, then per
/// pair the u32 sizes of key and value, then each key and value followed by a
/// NUL byte. A string value is its bytes, a number an 8-byte little-endian
/// f64. None when the entry is not an account's complete terms (a route
/// tailcut renders without an account, or an older operator's route during an
/// upgrade): such requests pass unchanged.
pub fn from_metadata(b: &[u8]) -> Option<Terms> {
    let u32_at = |i: usize| -> Option<usize> { Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?) as usize) };
    let n = u32_at(0)?;
    if n > b.len() / 8 || 4 + 8 * n > b.len() {
        return None;
    }
    let mut t = Terms { account: String::new(), ratio: 0.0, window: 0, hedges: 0, late_below: 0, late_ms: 0, delay_ms: 0, retries: -1, methods: String::new() };
    let mut have = 0u8;
    let mut off = 4 + 8 * n;
    for i in 0..n {
        let (kl, vl) = (u32_at(4 + 8 * i)?, u32_at(8 + 8 * i)?);
        if off + kl + 1 + vl + 1 > b.len() {
            return None;
        }
        let (k, v) = (&b[off..off + kl], &b[off + kl + 1..off + kl + 1 + vl]);
        off += kl + 1 + vl + 1;
        if k == b"account" {
            t.account = String::from_utf8(v.to_vec()).ok()?;
            have |= 1;
            continue;
        }
        if k == b"methods" {
            t.methods = String::from_utf8(v.to_vec()).ok()?;
            continue;
        }
        let Some(f) = number(v) else { continue };
        match k {
            b"ratio" => (t.ratio, have) = (f, have | 2),
            b"window" => (t.window, have) = (f as i64, have | 4),
            b"hedges" => (t.hedges, have) = (f as i64, have | 8),
            b"late_below" => (t.late_below, have) = (f as i64, have | 16),
            b"late_ms" => (t.late_ms, have) = (f as i64, have | 32),
            b"retries" => t.retries = f as i64,
            b"delay_ms" => t.delay_ms = f as i64,
            _ => {}
        }
    }
    if have != 63 || t.account.is_empty() || !(1..=3600).contains(&t.window) || t.hedges < 1 {
        return None;
    }
    if t.retries < 0 {
        t.retries = t.hedges;
    }
    Some(t)
}

/// A metadata number: 8 bytes of a little-endian f64 (a Struct
/// number_value). Envoy's YAML loader keeps a non-integral number in a static
/// config (ratio: 0.05) as the string "0.05": take that too.
fn number(b: &[u8]) -> Option<f64> {
    if let Ok(bytes) = <[u8; 8]>::try_from(b) {
        return Some(f64::from_le_bytes(bytes));
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}
