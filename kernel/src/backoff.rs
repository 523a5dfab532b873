//! Exponential backoff with deterministic jitter (the seed comes from the policy).

/// The delay before retry `attempt` (1-based): `base * 2^(attempt-1)`, capped at `max`, with
/// "equal jitter" (half fixed, half drawn from a SplitMix64 stream keyed by `seed` and `attempt`),
/// and never shorter than the provider's `retry_after_ms`.
pub fn backoff_ms(
    base: u64,
    max: u64,
    seed: u64,
    attempt: u32,
    retry_after_ms: Option<u64>,
) -> u64 {
    let shift = attempt.saturating_sub(1).min(32);
    let exp = base.saturating_mul(1u64 << shift).min(max);
    let half = exp / 2;
    let jitter = if half == 0 {
        0
    } else {
        splitmix64(seed ^ u64::from(attempt)) % (half + 1)
    };
    (half + jitter).max(retry_after_ms.unwrap_or(0))
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_is_capped_and_replays() {
        let d: Vec<u64> = (1..=8).map(|a| backoff_ms(100, 1000, 7, a, None)).collect();
        for (i, v) in d.iter().enumerate() {
            let exp = (100u64 << i).min(1000);
            assert!(
                *v >= exp / 2 && *v <= exp,
                "attempt {} gave {v}, expected within [{}, {exp}]",
                i + 1,
                exp / 2
            );
        }
        let again: Vec<u64> = (1..=8).map(|a| backoff_ms(100, 1000, 7, a, None)).collect();
        assert_eq!(d, again);
        assert_ne!(
            d,
            (1..=8)
                .map(|a| backoff_ms(100, 1000, 8, a, None))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn honours_retry_after() {
        assert_eq!(backoff_ms(100, 1000, 0, 1, Some(5000)), 5000);
        assert_eq!(backoff_ms(0, 0, 0, u32::MAX, None), 0);
    }
}
