//! Online evaluation of flight-recorder captures (issue 8): the analysis
//! half of `tracer agent`.
//!
//! The agent hands over, every interval, a capture of a traced daemon's
//! first records (the preamble: exec, initializer, process signature), a gap
//! lost to rotation, and the recent window up to the last drain. The same
//! window is handed over again as it slides, so each unit and each window is
//! reported once. Both halves run the replay code on the capture as given,
//! after one fix-up ([`anchor`]): call stacks are unwound at the gap so that
//! the window's calls sit on the call paths they have in a replay of the
//! whole run.
//!
//! - [`LiveModel`]: model-based suspect scores (papers 000/001) of the units
//!   that became complete;
//! - [`LivePeers`]: peer comparison (paper 003) of the windows that became
//!   complete, k of the last 2k−1 over every window seen;
//! - [`serve`]: `analyzer live`, the unprivileged process the agent hands
//!   its windows to.

mod anchor;
mod model;
mod peers;
pub mod serve;
mod types;

pub use model::LiveModel;
pub use peers::LivePeers;
pub use types::{
    LIVE_REPORT_VERSION, LivePeersReport, LiveServerWindow, LiveWindow, MetricFeatures,
    WindowFeatures,
};

#[cfg(test)]
mod tests;
