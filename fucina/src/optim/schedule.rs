//! Learning-rate schedules: constant, linear warmup, cosine, warmup-stable-decay.

/// A learning rate as a function of the step (0-based).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LrSchedule {
    /// Always `lr`.
    Constant {
        /// The peak learning rate.
        lr: f32,
    },
    /// From 0 up to `lr` over `warmup` steps, then `lr`.
    LinearWarmup {
        /// The peak learning rate.
        lr: f32,
        /// Steps of linear warmup from 0.
        warmup: u64,
    },
    /// Linear warmup, then cosine decay from `lr` to `min_lr` at step `total`.
    Cosine {
        /// The peak learning rate.
        lr: f32,
        /// The learning rate at the end.
        min_lr: f32,
        /// Steps of linear warmup from 0.
        warmup: u64,
        /// The step at which the schedule ends.
        total: u64,
    },
    /// Warmup, a constant plateau, then linear decay to `min_lr` over the last `decay` steps.
    WarmupStableDecay {
        /// The peak learning rate.
        lr: f32,
        /// The learning rate at the end.
        min_lr: f32,
        /// Steps of linear warmup from 0.
        warmup: u64,
        /// Steps of linear decay at the end.
        decay: u64,
        /// The step at which the schedule ends.
        total: u64,
    },
}

impl LrSchedule {
    /// The learning rate at `step`.
    pub fn at(&self, step: u64) -> f32 {
        let warm = |lr: f32, warmup: u64| {
            if warmup > 0 && step < warmup {
                Some(lr * (step + 1) as f32 / warmup as f32)
            } else {
                None
            }
        };
        match *self {
            LrSchedule::Constant { lr } => lr,
            LrSchedule::LinearWarmup { lr, warmup } => warm(lr, warmup).unwrap_or(lr),
            LrSchedule::Cosine { lr, min_lr, warmup, total } => warm(lr, warmup).unwrap_or_else(|| {
                let span = total.saturating_sub(warmup).max(1) as f64;
                let t = ((step.saturating_sub(warmup)) as f64 / span).min(1.0);
                (min_lr as f64 + 0.5 * (lr - min_lr) as f64 * (1.0 + (std::f64::consts::PI * t).cos())) as f32
            }),
            LrSchedule::WarmupStableDecay { lr, min_lr, warmup, decay, total } => {
                warm(lr, warmup).unwrap_or_else(|| {
                    let start = total.saturating_sub(decay);
                    if step < start || decay == 0 {
                        lr
                    } else {
                        let t = ((step - start) as f32 / decay as f32).min(1.0);
                        lr + (min_lr - lr) * t
                    }
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_of_the_schedules() {
        let c = LrSchedule::Cosine { lr: 1.0, min_lr: 0.1, warmup: 10, total: 110 };
        assert!((c.at(0) - 0.1).abs() < 1e-6 && (c.at(9) - 1.0).abs() < 1e-6);
        assert!((c.at(60) - 0.55).abs() < 1e-6);
        assert!((c.at(110) - 0.1).abs() < 1e-6 && (c.at(500) - 0.1).abs() < 1e-6);
        let w = LrSchedule::WarmupStableDecay { lr: 2.0, min_lr: 0.0, warmup: 4, decay: 10, total: 100 };
        assert_eq!(w.at(50), 2.0);
        assert!((w.at(95) - 1.0).abs() < 1e-6);
        assert_eq!(w.at(100), 0.0);
        assert_eq!(LrSchedule::LinearWarmup { lr: 1.0, warmup: 4 }.at(1), 0.5);
        assert_eq!(LrSchedule::Constant { lr: 0.3 }.at(7), 0.3);
    }
}
