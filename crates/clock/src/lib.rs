//! Time as fdsync and its emulator see it.
//!
//! Production uses the system clock. Tests and the demo share one [`SimClock`]
//! between the emulator and the client, so a client that waits out a
//! rate-limit window moves simulated time forward instead of sleeping: hours of
//! upstream behaviour run in milliseconds while the pacing code runs for real.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// A source of "now" and a way to wait.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// Wall-clock time; waiting sleeps.
    #[default]
    System,
    /// Simulated time shared with an emulator; waiting advances it.
    Sim(Arc<SimClock>),
}

impl Clock {
    /// A simulated clock starting at `start`, running at `speed` times real time
    /// (0 freezes it; only [`SimClock::advance`] and waits move it then).
    pub fn simulated(start: DateTime<Utc>, speed: f64) -> Clock {
        Clock::Sim(Arc::new(SimClock::new(start, speed)))
    }

    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::System => Utc::now(),
            Clock::Sim(sim) => sim.now(),
        }
    }

    /// Waits `duration` of this clock's time.
    pub async fn sleep(&self, duration: Duration) {
        match self {
            Clock::System => tokio::time::sleep(duration).await,
            Clock::Sim(sim) => {
                sim.advance(duration);
                tokio::task::yield_now().await;
            }
        }
    }

    /// Waits until `deadline` of this clock's time (returns at once if it passed).
    pub async fn sleep_until(&self, deadline: DateTime<Utc>) {
        if let Ok(left) = (deadline - self.now()).to_std() {
            self.sleep(left).await;
        }
    }

    /// The simulated clock behind this one, for tests that move time.
    pub fn as_sim(&self) -> Option<&Arc<SimClock>> {
        match self {
            Clock::Sim(sim) => Some(sim),
            Clock::System => None,
        }
    }
}

#[derive(Debug)]
pub struct SimClock {
    state: Mutex<SimState>,
}

#[derive(Debug)]
struct SimState {
    base_real: Instant,
    base_sim: DateTime<Utc>,
    speed: f64,
}

impl SimClock {
    pub fn new(start: DateTime<Utc>, speed: f64) -> SimClock {
        SimClock {
            state: Mutex::new(SimState {
                base_real: Instant::now(),
                base_sim: start,
                speed: speed.max(0.0),
            }),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let real = state.base_real.elapsed().as_secs_f64() * state.speed;
        state.base_sim + chrono::Duration::microseconds((real * 1e6) as i64)
    }

    /// Moves simulated time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.base_sim += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::zero());
    }

    /// Moves simulated time forward to `to` (never backwards).
    pub fn advance_to(&self, to: DateTime<Utc>) {
        if let Ok(by) = (to - self.now()).to_std() {
            self.advance(by);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frozen_sim_clock_moves_only_when_waited_on() {
        let start = "2026-11-25T10:00:00Z".parse().unwrap();
        let clock = Clock::simulated(start, 0.0);
        assert_eq!(clock.now(), start);
        clock.sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), start + chrono::Duration::seconds(90));
        clock.sleep_until(start).await;
        assert_eq!(clock.now(), start + chrono::Duration::seconds(90));
    }
}
