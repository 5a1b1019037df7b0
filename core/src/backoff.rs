//! Backoff (rule 18): the delay of a `retry` as a function of the attempt.
//!
//! A mount that declares a [`Backoff`] turns its handlers' `retry` into
//! `retry_after(backoff.delay(key, attempt))`; the rest of Part C applies unchanged. The delay
//! is a pure function of the policy, the delivery's key ([`Delivery::key`]) and the attempt:
//! the same delivery gets the same delay at the same attempt in every process, and many
//! deliveries failing together spread out instead of coming back at once.
//!
//! [`Delivery::key`]: crate::Delivery::key

use std::time::Duration;

/// How long a mount waits before a delivery's next attempt after a `retry` (rule 18).
///
/// - [`Backoff::exponential`]: `base × factor^(attempt - 1)`, each delay taken down by up to
///   `jitter` of itself, and never above `cap` (itself taken down by up to `jitter`, the same
///   fraction for every attempt of one delivery).
/// - [`Backoff::fixed`]: the same delay at every attempt.
///
/// Guarantees, property-tested in `core/tests/backoff.rs`: a delay is never above the cap;
/// never below the delay of the attempt before it (so the jitter an attempt may take is at
/// most `1 - 1/factor` of it); the same for the same key and attempt; spread across keys.
///
/// Factors and jitters are kept to thousandths. A policy is checked when its mount is
/// validated ([`MountDeclaration::backoff`](crate::MountDeclaration::backoff)); [`delay`]
/// on an unchecked one still returns a delay within its cap.
///
/// [`delay`]: Backoff::delay
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Backoff {
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Exponential {
        base: Duration,
        cap: Duration,
        /// The factor, in thousandths (2000 is ×2).
        factor_milli: u32,
        /// The jitter, in thousandths of a delay (200 is up to 20 % off).
        jitter_milli: u32,
    },
    Fixed(Duration),
}

/// The factor [`Backoff::exponential`] starts with: each delay twice the one before.
pub const DEFAULT_BACKOFF_FACTOR: f64 = 2.0;

/// The jitter [`Backoff::exponential`] starts with: each delay up to 20 % shorter.
pub const DEFAULT_BACKOFF_JITTER: f64 = 0.2;

/// Why a [`Backoff`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackoffError {
    /// The first delay (an exponential backoff's base, or a fixed backoff's delay) is zero:
    /// every delay would be zero, and a Core mount would copy without pause.
    #[error(
        "backoff delay is zero: every retry would come back at once (on Core, a copy loop without pause); use retry without a backoff, or a delay above zero"
    )]
    ZeroBase,
    /// The first delay is above the cap.
    #[error("backoff base {base:?} is above its cap {cap:?}")]
    BaseAboveCap {
        /// The first delay.
        base: Duration,
        /// The cap.
        cap: Duration,
    },
    /// The factor is below 1 (delays would shrink), in thousandths; a negative or
    /// not-a-number factor is kept as 0.
    #[error("backoff factor {}.{:03} must be a number of at least 1 (delays must not shrink; a negative or not-a-number factor counts as 0)", .0 / 1000, .0 % 1000)]
    Factor(u32),
    /// The jitter is 1 or more (a delay would vanish), in thousandths; a negative or
    /// not-a-number jitter is kept as 0.
    #[error("backoff jitter {}.{:03} must be below 1 (a fraction of each delay)", .0 / 1000, .0 % 1000)]
    Jitter(u32),
}

impl Backoff {
    /// Exponential from `base` (the delay after attempt 1) up to `cap`, by
    /// [`DEFAULT_BACKOFF_FACTOR`] with [`DEFAULT_BACKOFF_JITTER`]; change them with
    /// [`factor`](Self::factor) and [`jitter`](Self::jitter).
    pub fn exponential(base: Duration, cap: Duration) -> Self {
        Self {
            kind: Kind::Exponential {
                base,
                cap,
                factor_milli: milli(DEFAULT_BACKOFF_FACTOR),
                jitter_milli: milli(DEFAULT_BACKOFF_JITTER),
            },
        }
    }

    /// The same `delay` at every attempt, without jitter. A zero delay is refused by
    /// [`check`](Self::check).
    pub fn fixed(delay: Duration) -> Self {
        Self {
            kind: Kind::Fixed(delay),
        }
    }

    /// Each delay is `factor` times the one before: at least 1, kept to thousandths and
    /// saturating at 4,294,967.295; a negative or not-a-number factor counts as 0, which
    /// [`check`](Self::check) refuses. No effect on a fixed backoff.
    #[must_use]
    pub fn factor(mut self, factor: f64) -> Self {
        if let Kind::Exponential { factor_milli, .. } = &mut self.kind {
            *factor_milli = milli(factor);
        }
        self
    }

    /// Each delay is taken down by up to `fraction` of itself (below 1, kept to thousandths; a
    /// negative or not-a-number fraction counts as 0, no jitter), by an amount fixed by the
    /// delivery's key and attempt. No effect on a fixed backoff.
    #[must_use]
    pub fn jitter(mut self, fraction: f64) -> Self {
        if let Kind::Exponential { jitter_milli, .. } = &mut self.kind {
            *jitter_milli = milli(fraction);
        }
        self
    }

    /// The longest delay this policy gives.
    pub fn cap(&self) -> Duration {
        match self.kind {
            Kind::Exponential { cap, .. } => cap,
            Kind::Fixed(delay) => delay,
        }
    }

    /// Checks the policy.
    ///
    /// # Errors
    /// [`BackoffError::ZeroBase`] for a backoff whose first delay is zero,
    /// [`BackoffError::BaseAboveCap`], [`BackoffError::Factor`] below 1 or not a number,
    /// [`BackoffError::Jitter`] of 1 or more.
    pub fn check(&self) -> Result<(), BackoffError> {
        match self.kind {
            Kind::Fixed(delay) if delay.is_zero() => Err(BackoffError::ZeroBase),
            Kind::Fixed(_) => Ok(()),
            Kind::Exponential {
                base,
                cap,
                factor_milli,
                jitter_milli,
            } => {
                if base.is_zero() {
                    Err(BackoffError::ZeroBase)
                } else if base > cap {
                    Err(BackoffError::BaseAboveCap { base, cap })
                } else if factor_milli < 1000 {
                    Err(BackoffError::Factor(factor_milli))
                } else if jitter_milli >= 1000 {
                    Err(BackoffError::Jitter(jitter_milli))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// The delay before the attempt after `attempt`, for the delivery whose key is `key`.
    pub fn delay(&self, key: u64, attempt: crate::Attempt) -> Duration {
        let (base, cap, factor_milli, jitter_milli) = match self.kind {
            Kind::Fixed(delay) => return delay,
            Kind::Exponential {
                base,
                cap,
                factor_milli,
                jitter_milli,
            } => (base, cap, factor_milli, jitter_milli),
        };
        let factor = (f64::from(factor_milli) / 1000.0).max(1.0);
        let jitter = (f64::from(jitter_milli) / 1000.0).clamp(0.0, 0.999);
        // The growing delay may lose at most this much, so that it never falls below the
        // delay before it: factor × (1 - lost) ≥ 1, with a margin for rounding.
        let lost = jitter.min((1.0 - 1.0 / factor) * 0.999);
        let steps = i32::try_from(attempt.get() - 1).unwrap_or(i32::MAX);
        let growing =
            base.as_secs_f64() * factor.powi(steps) * (1.0 - lost * unit(key, attempt.get()));
        // One fraction per delivery (attempt 0 is never an attempt), so that the capped delays
        // of one delivery stay equal and those of many spread.
        let ceiling = cap.as_secs_f64() * (1.0 - jitter * unit(key, 0));
        // `growing` is infinite for large attempts; `min` then gives the ceiling.
        Duration::try_from_secs_f64(growing.min(ceiling).max(0.0))
            .unwrap_or(cap)
            .min(cap)
    }
}

/// `x` in thousandths, saturating; 0 for what is not a number.
fn milli(x: f64) -> u32 {
    // `as` saturates and maps NaN to 0.
    (x * 1000.0).round() as u32
}

/// A number in `[0, 1)` fixed by `key` and `attempt` (SplitMix64's finalizer).
fn unit(key: u64, attempt: u64) -> f64 {
    let mut z = key ^ attempt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // The top 53 bits, as a fraction.
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A 64-bit FNV-1a hash of `bytes`, continuing from `hash` (start with [`KEY_SEED`]): how
/// [`Delivery::key`](crate::Delivery::key) and adapters derive a delivery's key from its
/// identifying bytes. Stable across processes and versions of this crate.
pub fn key_of(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// Where [`key_of`] starts (FNV-1a's offset basis).
pub const KEY_SEED: u64 = 0xCBF2_9CE4_8422_2325;
