//! The repeat detector: a loop of any short period, in constant memory and time per tool turn.
//!
//! A tool turn is reduced to one fingerprint (its calls, by name and canonical arguments, and
//! their results). The detector keeps the last [`MAX_LOOP_PERIOD`] fingerprints in a ring and, for
//! every period `k` up to the policy's `max_loop_period`, how many turns in a row equalled the turn
//! `k` before them. When that run reaches `k * (n - 1)`, the last `k` turns are a window that just
//! occurred `n` times in a row. A turn in which a call failed breaks every window: failures belong
//! to the failure counters, and only turns in which every call succeeded can make a loop here.
//! Nothing is allocated: the ring and the runs are fixed arrays.

use serde::{Deserialize, Serialize};

/// The longest loop period any policy may ask for (`max_loop_period`), in tool turns.
pub const MAX_LOOP_PERIOD: u32 = 16;

const N: usize = MAX_LOOP_PERIOD as usize;

/// What the detector sees after one tool turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Repetition {
    /// The period, in tool turns, of the window that repeats most (0 when nothing repeats).
    pub period: u32,
    /// How many times in a row that window has now occurred (1 when nothing repeats).
    pub times: u32,
}

impl Repetition {
    /// Nothing repeats.
    pub const NONE: Repetition = Repetition {
        period: 0,
        times: 1,
    };
}

/// The detector's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Loops {
    /// The last successful turns' fingerprints; the next one is written at `head`.
    ring: [u64; N],
    head: u8,
    /// How many slots of the ring hold turns since the last break (at most `N`).
    filled: u8,
    /// `runs[k - 1]`: turns in a row that equalled the turn `k` before them.
    runs: [u32; N],
}

impl Loops {
    /// The run of period `k` (1-based) after a turn with `fingerprint`.
    #[inline]
    fn next_run(&self, k: usize, fingerprint: u64) -> u32 {
        let (head, filled) = (usize::from(self.head), usize::from(self.filled));
        if filled >= k && self.ring[(head + N - k) % N] == fingerprint {
            self.runs[k - 1].saturating_add(1)
        } else {
            0
        }
    }

    /// Whether `fingerprint` may equal a turn of the ring: false means no period can repeat.
    /// (It compares all slots, stale ones included, in one pass the compiler vectorizes; a
    /// stale match only sends the caller to the exact check.)
    #[inline]
    pub(crate) fn may_repeat(&self, fingerprint: u64) -> bool {
        self.ring
            .iter()
            .fold(false, |any, &f| any | (f == fingerprint))
    }

    /// What [`Loops::push`] would return, without changing anything: the longest repetition of
    /// any period up to `max_period` that a successful turn with `fingerprint` would end (ties
    /// go to the shorter period).
    pub(crate) fn peek(&self, fingerprint: u64, max_period: u32) -> Repetition {
        if !self.may_repeat(fingerprint) {
            // The common case: a turn unlike any of the last ones.
            return Repetition::NONE;
        }
        let periods = usize::try_from(max_period).map_or(N, |p| p.min(N));
        let mut best = Repetition::NONE;
        for k in 1..=periods {
            // `k` is at most 16, so the casts are exact.
            let k32 = k as u32;
            let run = self.next_run(k, fingerprint);
            // `1 + run / k > best.times`, without a division per period.
            if u64::from(run) >= u64::from(best.times) * u64::from(k32) {
                best = Repetition {
                    period: k32,
                    times: 1 + run / k32,
                };
            }
        }
        best
    }

    /// Adds a turn in which every call succeeded (the repetition it makes is what
    /// [`Loops::peek`] said before).
    pub(crate) fn push(&mut self, fingerprint: u64, max_period: u32) {
        if self.may_repeat(fingerprint) {
            let periods = usize::try_from(max_period).map_or(N, |p| p.min(N));
            for k in 1..=periods {
                self.runs[k - 1] = self.next_run(k, fingerprint);
            }
        } else {
            // No slot matches, so every run is broken (those past `max_period` are 0 already).
            self.runs = [0; N];
        }
        self.write(fingerprint);
    }

    /// [`Loops::push`] of a fingerprint that [`Loops::may_repeat`] said no slot holds: every run
    /// is broken.
    #[inline]
    pub(crate) fn push_new(&mut self, fingerprint: u64) {
        self.runs = [0; N];
        self.write(fingerprint);
    }

    /// Writes a turn into the ring.
    #[inline]
    fn write(&mut self, fingerprint: u64) {
        let head = usize::from(self.head);
        self.ring[head] = fingerprint;
        self.head = ((head + 1) % N) as u8;
        self.filled = (usize::from(self.filled) + 1).min(N) as u8;
    }

    /// A turn with a failed call: no window spans it.
    pub(crate) fn break_window(&mut self) {
        self.filled = 0;
        self.runs = [0; N];
    }

    /// Whether the saved state is one [`Loops::push`] and [`Loops::break_window`] can produce
    /// under `max_period`, beside a repeat streak of `streak`: no run of a period the policy
    /// does not watch, and none longer than the streak says (the next turn can then repeat at
    /// most once more than the streak, so the repeat limit still stops it in time).
    pub(crate) fn is_consistent(&self, streak: u32, max_period: u32) -> bool {
        let periods = usize::try_from(max_period).map_or(N, |p| p.min(N));
        usize::from(self.head) < N
            && usize::from(self.filled) <= N
            && self.runs.iter().enumerate().all(|(i, &run)| {
                // `i + 1` is at most 16, so the cast is exact.
                let k = i as u32 + 1;
                if i < periods {
                    run / k < streak.max(1)
                } else {
                    run == 0
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(turns: &[u64], max_period: u32) -> Vec<Repetition> {
        let mut loops = Loops::default();
        turns
            .iter()
            .map(|&t| {
                let seen = loops.peek(t, max_period);
                loops.push(t, max_period);
                seen
            })
            .collect()
    }

    #[test]
    fn period_one_counts_identical_turns() {
        let times: Vec<u32> = feed(&[7, 7, 7, 8, 8], 8).iter().map(|r| r.times).collect();
        assert_eq!(times, [1, 2, 3, 1, 2]);
    }

    #[test]
    fn a_three_turn_window_is_seen_once_per_repetition() {
        let seen = feed(&[1, 2, 3, 1, 2, 3, 1, 2, 3], 8);
        let times: Vec<u32> = seen.iter().map(|r| r.times).collect();
        assert_eq!(times, [1, 1, 1, 1, 1, 2, 2, 2, 3]);
        assert_eq!(seen[8].period, 3);
    }

    #[test]
    fn a_period_longer_than_the_bound_is_not_seen() {
        let turns: Vec<u64> = (0..30).map(|i| i % 5).collect();
        assert!(feed(&turns, 4).iter().all(|r| r.times == 1));
        assert!(feed(&turns, 5).iter().any(|r| r.times >= 3));
    }

    #[test]
    fn a_failed_turn_breaks_every_window() {
        let mut loops = Loops::default();
        for t in [1, 2, 1] {
            loops.push(t, 8);
        }
        loops.break_window();
        // Before the break, 1 2 1 | 2 would complete the window (1 2) twice; after it, only the
        // turns since the break count.
        let mut step = |t| {
            let seen = loops.peek(t, 8);
            loops.push(t, 8);
            seen
        };
        assert_eq!(step(2), Repetition::NONE);
        assert_eq!(step(1), Repetition::NONE);
        assert_eq!(step(2), Repetition::NONE);
        assert_eq!(step(1).times, 2);
    }

    #[test]
    fn the_ring_wraps_without_losing_periods() {
        let turns: Vec<u64> = (0..100).map(|i| 100 + i % 16).collect();
        let last = feed(&turns, 16)[99];
        assert_eq!(last.period, 16);
        assert_eq!(last.times, 1 + 84 / 16);
    }
}
