//! What the live peer comparison reports (JSON for the agent's alerts).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::peers::{Cell, Metric, RootCause};

/// Version of [`LivePeersReport`] and [`WindowFeatures`] (2: the
/// persistence rule; windows say who deviated briefly; 3: the load-shift
/// rule, windows say who took over load).
pub const LIVE_REPORT_VERSION: u32 = 3;

/// Peer comparison of the windows that completed since the last evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LivePeersReport {
    /// [`LIVE_REPORT_VERSION`].
    pub version: u32,
    /// Server labels found in the capture, in the order of the vectors.
    pub servers: Vec<String>,
    /// `false` when there is no verdict (fewer than 3 servers, too little
    /// data): see `notes`.
    pub compared: bool,
    /// The new windows, oldest first.
    pub windows: Vec<LiveWindow>,
    /// Servers faulty as of the last window (k of the last 2k−1, and
    /// persistent: see [`LiveWindow::brief`]).
    pub faulty: Vec<String>,
    /// Things worth knowing (no verdict and why, untrained servers).
    pub notes: Vec<String>,
}

/// One window and its verdicts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LiveWindow {
    /// Start, wall clock, ns since the epoch.
    pub start_ns: u64,
    /// End (start + WinSize), wall clock, ns since the epoch.
    pub end_ns: u64,
    /// Per server: distance, threshold, anomalous and faulty per metric.
    pub servers: Vec<LiveServerWindow>,
    /// Servers faulty at this window: k of the last 2k−1 windows anomalous
    /// in some metric, and faulty in at least the persistence share of the
    /// windows of the most persistent server since the episode began.
    pub faulty: Vec<String>,
    /// Servers faulty by k of 2k−1 at this window but not persistent: they
    /// deviated briefly beside a server faulty for longer (a knock-on
    /// effect or a passing disturbance), so they are not called faulty.
    #[serde(default)]
    pub brief: Vec<String>,
    /// Servers faulty (and persistent) at this window only by the work
    /// they carry, more than the median server, beside a server faulty in
    /// its own resources: they took over load the faulty server shed, so
    /// they are not called faulty (`PeersConfig::load_shift`).
    #[serde(default)]
    pub load_shift: Vec<String>,
    /// For each faulty (server, metric): the components that differ most
    /// from the median server over its anomalous windows of the history.
    pub root_causes: Vec<RootCause>,
    /// The feature vectors the distances come from.
    pub features: WindowFeatures,
}

/// One server in one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LiveServerWindow {
    /// Label.
    pub server: String,
    /// Per metric with a trained threshold.
    pub metrics: BTreeMap<Metric, Cell>,
    /// Called faulty: faulty in some metric (k of 2k−1) and persistent.
    pub faulty: bool,
}

/// The feature vectors of one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowFeatures {
    /// [`LIVE_REPORT_VERSION`].
    pub version: u32,
    /// Start, wall clock, ns since the epoch.
    pub start_ns: u64,
    /// WinSize, ns.
    pub window_ns: u64,
    /// Server labels, in vector order.
    pub servers: Vec<String>,
    /// Per metric: component names and one vector per server.
    pub metrics: Vec<MetricFeatures>,
}

/// One metric's vectors in one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricFeatures {
    /// The metric.
    pub metric: Metric,
    /// Component names (after dimensionality reduction).
    pub components: Vec<String>,
    /// `vectors[server][component]`.
    pub vectors: Vec<Vec<f64>>,
}
