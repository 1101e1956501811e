//! Workers as the server sees them: the state a worker reports, the directive the server gives
//! it, and how the two combine into what the worker must do.
//!
//! Two views, kept apart on purpose:
//! - [`required_state`] is what a heartbeat or registration answers (`running`, `quiet` or
//!   `terminate`): the more severe of the directive and the report, `drain` counting as
//!   `terminate`.
//! - [`EffectiveState`] is what listings show, computed by the SQL function
//!   `ojs_worker_effective_state` for the views operators read: it also tells `drain` and
//!   `stale` apart.

use std::str::FromStr;

use crate::wire::names;

/// What a worker says it is doing (the heartbeat's `state`; `shutdown: true` means `drain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkerState {
    #[default]
    Running,
    /// Not fetching; finishing what it holds.
    Quiet,
    /// Stopping: finishing or returning what it holds.
    Terminate,
    /// Shutting down by itself.
    Drain,
}

/// What the server tells a worker to do; directives only escalate (none < quiet < terminate).
/// Stored as `''`, `quiet`, `terminate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum WorkerDirective {
    #[default]
    None,
    /// Stop fetching, finish what you hold.
    Quiet,
    /// Stop fetching, finish or return what you hold, deregister, exit.
    Terminate,
}

/// A worker's state as listings show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EffectiveState {
    #[default]
    Running,
    Quiet,
    Terminate,
    Drain,
    /// No heartbeat for the heartbeat timeout.
    Stale,
}

/// What a heartbeat or registration tells the worker to do: the more severe of `directive`
/// and `reported` (`drain` ranks as `terminate`).
pub fn required_state(directive: WorkerDirective, reported: WorkerState) -> WorkerState {
    let reported = match reported {
        WorkerState::Running => WorkerDirective::None,
        WorkerState::Quiet => WorkerDirective::Quiet,
        WorkerState::Terminate | WorkerState::Drain => WorkerDirective::Terminate,
    };
    match directive.max(reported) {
        WorkerDirective::None => WorkerState::Running,
        WorkerDirective::Quiet => WorkerState::Quiet,
        WorkerDirective::Terminate => WorkerState::Terminate,
    }
}

/// A name that is not one of the enum's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName(pub String);

macro_rules! from_str {
    ($($ty:ident),+) => {$(
        impl FromStr for $ty {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $ty::from_name(s).ok_or_else(|| UnknownName(s.to_owned()))
            }
        }
    )+};
}

from_str!(WorkerState, WorkerDirective, EffectiveState);

names!(WorkerState {
    Running => "running",
    Quiet => "quiet",
    Terminate => "terminate",
    Drain => "drain",
});

names!(WorkerDirective {
    None => "",
    Quiet => "quiet",
    Terminate => "terminate",
});

names!(EffectiveState {
    Running => "running",
    Quiet => "quiet",
    Terminate => "terminate",
    Drain => "drain",
    Stale => "stale",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_more_severe_of_directive_and_report_wins() {
        use WorkerDirective as D;
        use WorkerState as S;
        assert_eq!(required_state(D::None, S::Running), S::Running);
        assert_eq!(required_state(D::Quiet, S::Running), S::Quiet);
        assert_eq!(required_state(D::None, S::Quiet), S::Quiet);
        assert_eq!(required_state(D::Quiet, S::Terminate), S::Terminate);
        assert_eq!(required_state(D::Terminate, S::Quiet), S::Terminate);
        assert_eq!(required_state(D::None, S::Drain), S::Terminate);
    }

    #[test]
    fn names_round_trip() {
        for d in [
            WorkerDirective::None,
            WorkerDirective::Quiet,
            WorkerDirective::Terminate,
        ] {
            assert_eq!(d.as_str().parse(), Ok(d));
        }
        for s in [
            WorkerState::Running,
            WorkerState::Quiet,
            WorkerState::Terminate,
            WorkerState::Drain,
        ] {
            assert_eq!(s.as_str().parse(), Ok(s));
        }
        assert_eq!("stale".parse(), Ok(EffectiveState::Stale));
        assert!("paused".parse::<WorkerState>().is_err());
        assert_eq!(
            serde_json::to_string(&WorkerDirective::None).unwrap(),
            r#""""#
        );
    }
}
