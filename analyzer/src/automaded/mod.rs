//! AutomaDeD at scale (Laguna et al., SC11, paper 004): per-task
//! semi-Markov models of MPI ranks, their dissimilarity, graph compression,
//! abnormal tasks and abnormal edges.
//!
//! Data flow, one module per stage:
//!
//! * [`smm`]: MPI profiles ([`crate::mpi::extract`], with call sites) become
//!   one semi-Markov model per task: states are call contexts (function +
//!   call site) and the computation regions between them; edges carry a
//!   transition probability and normal fits of communication and
//!   computation time; whole run or one phase.
//! * [`overlap`]: the L1 norm of two normals from a precomputed 500 × 500
//!   table (§3.1).
//! * [`dissim`]: dissimilarity of two models and per-edge contributions.
//! * [`compress`]: support reduction and chain compression (§3.2) with
//!   drill-down back to the original edges.
//! * [`outliers`]: k-medoids with BIC or sampled nearest neighbour (§3.3),
//!   edge isolation.
//! * [`hang`]: tasks with no transition for longer than a threshold.
//! * [`verdict`]: which rank is abnormal, or that none stands out,
//!   comparing each rank with itself (clean runs, phases).
//! * [`report`]: text and SVG.

pub mod compress;
pub mod dissim;
pub mod hang;
pub mod kmedoids;
pub mod outliers;
pub mod overlap;
pub mod report;
pub mod smm;
pub mod verdict;

pub use dissim::{DissimConfig, dissimilarity};
pub use outliers::{
    ANALYSIS_VERSION, AbnormalEdge, AbnormalTask, Analysis, Method, OutlierConfig, OutlierError,
    TaskScore, analyze,
};
pub use overlap::OverlapTable;
pub use smm::{Models, Phase, SMM_VERSION, State, StateTable, TaskModel, build};
