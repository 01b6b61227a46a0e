// Copyright 2026 The tailcut Authors.
// SPDX-License-Identifier: Apache-2.0

//! The account's arithmetic: no host calls, so it is tested on the host.

use std::collections::HashMap;

/// An account's terms, from the hedged route's metadata
/// (envoyconf.HedgeAccount): the budget's share, the window, and how hedges
/// are handed out.
#[derive(Clone, Debug, PartialEq)]
pub struct Terms {
    /// Names the policy's account ("ns/name").
    pub account: String,
    /// The share of the window's requests that may be hedged.
    pub ratio: f64,
    /// The sliding window, in whole seconds.
    pub window: i64,
    /// The policy's maxHedges: the most a request is given.
    pub hedges: i64,
    /// A request that would leave fewer hedges than `late_below` in the
    /// window is hedged late, after `late_ms` instead of the delay, unless
    /// the band between the delay (`delay_ms`; 0: not known) and `late_ms`
    /// is quiet (Account::quiet_band).
    pub late_below: i64,
    pub late_ms: i64,
    pub delay_ms: i64,
    /// The route's num_retries; where it exceeds the hedges (a mesh's failure
    /// retries), a hedged request is capped at its hedges.
    pub retries: i64,
    /// The methods the route hedges, comma-separated ("GET,HEAD"); empty:
    /// every method. On Envoy Gateway the route serves every method of its
    /// HTTPRoute rule, so the account keeps the others unhedged; tailcut's
    /// own routes and Istio's split methods into routes and leave it empty.
    pub methods: String,
}

impl Terms {
    /// Whether a request with this method may be hedged.
    pub fn hedges_method(&self, method: &str) -> bool {
        self.methods.is_empty() || self.methods.split(',').any(|m| m == method)
    }
}

/// What the account gives a request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Grant {
    /// Hedges Envoy may send for it; 0: none (no per-try timeout).
    pub hedges: i64,
    /// The request leaves with x-envoy-max-retries: hedges, since Envoy
    /// counts hedges and failure retries alike.
    pub cap_retries: bool,
    /// The request is hedged after Terms::late_ms, not the delay.
    pub late: bool,
}

/// One slot (SLOT_MS) of an account's history: its requests, the hedges
/// committed to them, and of those that ended, how many and how many took
/// between the delay and the late delay. u32 counts keep a slot at 24 bytes
/// (a worker sees far fewer than 4 billion requests in a quarter second).
#[derive(Clone, Copy, Default)]
struct Slot {
    slot: i64,
    requests: u32,
    committed: u32,
    ended: u32,
    in_band: u32,
}

/// The length of a slot of an account's history, in milliseconds. The first
/// slot of every stretch is not credited with its requests (Account), so a
/// steady stream can be hedged at most window/(window + one slot) of the
/// budget: with whole seconds 30/31, 4.84% of a 5% budget; with quarter
/// seconds 120/121, 4.96%. Where the slow share equals the budget, every
/// hundredth of a point the account cannot give is a slow request left
/// unhedged. Shorter slots give a little more (100 ms: 4.98%) for 2.5 times
/// the memory and the work of each reckoning.
pub const SLOT_MS: i64 = 250;

/// The slots in a second.
const SLOTS_PER_SECOND: i64 = 1000 / SLOT_MS;

/// The seconds before the current slot whose ended requests say whether the
/// band is quiet.
const BAND_SECONDS: i64 = 10;

/// The band is quiet while fewer than this share of the budget's ratio of
/// the ended requests took between the delay and the late delay (0.5% of
/// them under a 5% budget): hedging such requests at the delay would spend at
/// most a tenth of the budget on requests that were about to answer.
const QUIET_BAND_SHARE: f64 = 0.1;

/// One policy's history on one worker (each Envoy worker runs its own VM, so
/// its own accounts). It keeps the last 2 x w + 1 slots, w the window's
/// slots (SLOT_MS).
///
/// A request may be hedged only while, for every stretch of the last k whole
/// slots with k from w+1 to 2 x w+1 (the current slot counted whole), the
/// hedges committed in the stretch, its own included, stay within ratio of
/// the requests of the stretch's newest k-1 slots. So any stretch of time
/// from window to 2 x window long, wherever it starts, holds no more hedges
/// than ratio of its requests: at its last hedge, the stretch of whole slots
/// from the one it starts in covers its hedges, and the requests that stretch
/// is credited with exclude that first, partial slot. Longer stretches are
/// made of such stretches. A check over the last window alone let a stretch
/// that starts before a cluster of slow requests spend what the time before
/// it left unused: 5.09% of a minute's requests under a 5% budget (#26). The
/// cost is the first slot: in a steady stream at most ratio x w/(w+1) is
/// hedged (4.96% of a 5% budget over 30 s of quarter seconds).
struct Account {
    /// The window, in slots.
    window: i64,
    generation: u64,
    /// The current slot: milliseconds / SLOT_MS.
    now: i64,
    slots: Vec<Slot>, // by slot mod len
    /// The least, over the stretches, of what the slots before the current
    /// one leave to hedge; stale when a hedge came back to one of them.
    earlier: f64,
    stale: bool,
}

/// What a request took from its account: its hedges, committed in the slot
/// it arrived in (none when none fit). It is settled once, when the stream
/// ends, and the stream's duration is recorded against the band it had.
#[derive(Debug, Default)]
pub struct Commitment {
    account: String,
    generation: u64,
    slot: i64,
    hedges: i64,
    band: (i64, i64),
}

impl Commitment {
    /// Whether the request was given a hedge.
    pub fn hedged(&self) -> bool {
        self.hedges > 0
    }

    /// Whether the stream's duration is wanted at its end (Accounts::ended):
    /// its terms named the delay.
    pub fn has_band(&self) -> bool {
        self.band.0 > 0
    }
}

/// A worker's accounts, by name.
#[derive(Default)]
pub struct Accounts {
    by_name: HashMap<String, Account>,
    generation: u64,
    swept: i64,
}

impl Account {
    /// An account over window_s seconds.
    fn new(window_s: i64, generation: u64) -> Account {
        let window = window_s * SLOTS_PER_SECOND;
        let slot = Slot { slot: -1, ..Slot::default() };
        Account { window, generation, now: 0, slots: vec![slot; (2 * window + 1) as usize], earlier: 0.0, stale: true }
    }

    fn index(&self, s: i64) -> usize {
        (s % self.slots.len() as i64) as usize
    }

    /// Slot s, when it is in the history.
    fn at(&self, s: i64) -> Option<&Slot> {
        let sl = self.slots.get(self.index(s.max(0)))?;
        (s >= 0 && sl.slot == s).then_some(sl)
    }

    /// Moves the account to slot now, giving every slot since the last call
    /// an empty one, and returns the current slot's index. A clock that steps
    /// back keeps counting in the latest slot.
    fn advance(&mut self, now: i64, ratio: f64) -> usize {
        if now > self.now {
            for s in (self.now + 1).max(now - self.slots.len() as i64 + 1)..=now {
                let i = self.index(s);
                self.slots[i] = Slot { slot: s, ..Slot::default() };
            }
            self.now = now;
            self.stale = true;
        }
        if self.stale {
            self.earlier = self.credit(ratio);
            self.stale = false;
        }
        self.index(self.now)
    }

    /// The least, over the stretches of k slots (k from w+1 to 2 x w+1, the
    /// current slot the newest), of ratio x the requests of the stretch's
    /// slots before the current one but its first, less the hedges committed
    /// in them: what the earlier slots leave to hedge.
    fn credit(&self, ratio: f64) -> f64 {
        let (mut requests, mut committed) = (0i64, 0i64);
        let mut least = f64::INFINITY;
        for age in 1..=2 * self.window {
            // The stretch of age+1 slots starts at age: its hedges count,
            // its requests do not.
            let slot = self.at(self.now - age).copied();
            if let Some(sl) = slot {
                committed += sl.committed as i64;
            }
            if age >= self.window {
                least = least.min(ratio * requests as f64 - committed as f64);
            }
            if let Some(sl) = slot {
                requests += sl.requests as i64;
            }
        }
        least
    }

    /// Whether, over the last BAND_SECONDS of whole slots, enough requests
    /// ended (2 / the quiet share) and fewer than the quiet share of them took
    /// between the delay and the late delay. A fast mode that ends well
    /// before the delay leaves the band quiet, and a late hedge there would
    /// only make a slow request wait; a fast mode that reaches past the delay
    /// (a busy machine, a delay that has not caught up) fills it, and late
    /// hedges keep its stragglers from taking the slow requests' hedges.
    fn quiet_band(&self, ratio: f64) -> bool {
        let share = QUIET_BAND_SHARE * ratio;
        let (ended, in_band) = (1..=BAND_SECONDS * SLOTS_PER_SECOND)
            .filter_map(|age| self.at(self.now - age))
            .fold((0i64, 0i64), |(e, b), sl| (e + sl.ended as i64, b + sl.in_band as i64));
        ended as f64 >= 2.0 / share && (in_band as f64) < share * ended as f64
    }
}

impl Accounts {
    pub fn new() -> Accounts {
        Accounts::default()
    }

    /// How many accounts are held.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Counts a request that arrived at now_ms (milliseconds of a clock) on
    /// t's account and commits the hedges it may have: as many as fit (at
    /// most t.hedges) while every stretch keeps its hedges within t.ratio of
    /// its requests (Account).
    pub fn admit(&mut self, now_ms: i64, t: &Terms) -> (Grant, Commitment) {
        let a = self.account(t);
        let cur = a.advance(now_ms.div_euclid(SLOT_MS), t.ratio);
        let earlier = a.earlier;
        let slot = &mut a.slots[cur];
        slot.requests = slot.requests.saturating_add(1);
        let left = earlier + t.ratio * slot.requests as f64 - slot.committed as f64;
        let fit = t.hedges.min(left.floor() as i64).max(0);
        slot.committed = slot.committed.saturating_add(fit as u32);
        let band = if t.delay_ms > 0 && t.late_ms > t.delay_ms { (t.delay_ms, t.late_ms) } else { (0, 0) };
        let c = Commitment { account: t.account.clone(), generation: a.generation, slot: slot.slot, hedges: fit, band };
        if fit < 1 {
            return (Grant::default(), c);
        }
        let late = left - (fit as f64) < t.late_below as f64 && !(band.0 > 0 && a.quiet_band(t.ratio));
        (Grant { hedges: fit, cap_retries: fit < t.retries, late }, c)
    }

    /// t's account, new when its window changed: a new window cannot take
    /// back what the old one committed.
    fn account(&mut self, t: &Terms) -> &mut Account {
        let fresh = self.by_name.get(&t.account).is_none_or(|a| a.window != t.window * SLOTS_PER_SECOND);
        if fresh {
            self.generation += 1;
            self.by_name.insert(t.account.clone(), Account::new(t.window, self.generation));
        }
        self.by_name.get_mut(&t.account).expect("inserted above")
    }

    /// Drops, once a second, the accounts that saw no request for two
    /// windows, so that accounts of deleted policies do not pile up for as
    /// long as Envoy runs.
    pub fn sweep(&mut self, now_ms: i64) {
        let second = now_ms.div_euclid(1000);
        if second <= self.swept {
            return;
        }
        self.swept = second;
        let now = now_ms.div_euclid(SLOT_MS);
        self.by_name.retain(|_, a| a.now >= now - 2 * a.window);
    }

    /// Gives back the hedges Envoy did not send for a stream that ended after
    /// `attempts` upstream attempts (attempts-1 hedges were sent; 0 when the
    /// request never reached an upstream). It runs when the stream ends,
    /// answered or reset by its client: a cancelled request's unsent hedges
    /// come back as an answered one's do. Hedges go back to the slot they
    /// were committed in, while it is still in the account's history. It
    /// returns how many went back.
    pub fn settle(&mut self, c: &mut Commitment, attempts: i64) -> i64 {
        let hedges = std::mem::take(&mut c.hedges);
        let Some(a) = self.by_name.get_mut(&c.account) else { return 0 };
        if a.generation != c.generation {
            return 0;
        }
        let unused = hedges - hedges.min((attempts - 1).max(0));
        let i = a.index(c.slot.max(0));
        if unused <= 0 || c.slot < 0 || a.slots[i].slot != c.slot {
            return 0;
        }
        a.slots[i].committed -= unused as u32;
        if c.slot != a.now {
            a.stale = true;
        }
        unused
    }

    /// Records that a request ended after duration_ms, in the slot it
    /// arrived in, while that slot is in its account's history: whether it
    /// took between the delay and the late delay it was admitted with.
    pub fn ended(&mut self, c: &Commitment, duration_ms: i64) {
        let Some(a) = self.by_name.get_mut(&c.account) else { return };
        if a.generation != c.generation || c.slot < 0 || c.band.0 <= 0 {
            return;
        }
        let i = a.index(c.slot);
        let slot = &mut a.slots[i];
        if slot.slot != c.slot {
            return;
        }
        slot.ended = slot.ended.saturating_add(1);
        slot.in_band = slot.in_band.saturating_add((duration_ms > c.band.0 && duration_ms <= c.band.1) as u32);
    }

    /// The requests that ended of the slot at now_ms of an account, and
    /// those in its band, for tests.
    pub fn band(&self, name: &str, now_ms: i64) -> (i64, i64) {
        self.by_name
            .get(name)
            .and_then(|a| a.at(now_ms.div_euclid(SLOT_MS)))
            .map_or((0, 0), |sl| (sl.ended as i64, sl.in_band as i64))
    }

    /// The account's committed hedges and requests in its last window of
    /// slots, for tests.
    pub fn committed(&self, name: &str) -> (i64, i64) {
        let Some(a) = self.by_name.get(name) else { return (0, 0) };
        (0..a.window)
            .filter_map(|age| a.at(a.now - age))
            .fold((0, 0), |(c, r), sl| (c + sl.committed as i64, r + sl.requests as i64))
    }
}
