//! MPI ranks: profiles, interference detection (Tabatabaee &
//! Hollingsworth, paper 002) and hangs.
//!
//! Data flow, one module per stage:
//!
//! * [`profile`]: a capture of the MPI library's `MPI_*` uprobes (with
//!   arguments, `tracer record --mpi`) becomes, per rank, the paper's
//!   4-tuples (§2.1): MPI function, peer, computation time since the
//!   previous MPI call returned, communication time inside the call; with
//!   the program's call site (through language bindings) and the call each
//!   rank was inside when the capture ended. No relink, unlike the paper's
//!   PMPI wrappers. [`args`] reads peers and partners from the arguments.
//! * [`export`]: profiles as JSON lines and Parquet (DuckDB, DataFusion, Spark).
//! * [`typical`]: Sequitur over a rank's (function, peer) sequence, rules
//!   longest first: the typical sequences (§4.1), per rank.
//! * [`baseline`]: computation times over each rank's own clean baseline
//!   and over the other ranks at the same time (shared with paper 004's
//!   verdict).
//! * [`cpu`]: the CPU each rank received against the same two references
//!   (a kernel signal the paper lacked: busy-polling ranks lose CPU to a
//!   hog while they poll).
//! * [`signals`]: S(p,l,t), the per-sample threshold, indicators (eq. 3)
//!   with the 0.5 ms filter, ILS(p,l,t).
//! * [`learn`]: from any number of clean and interfered runs: K (eq. 5),
//!   the spreads, a verdict threshold per processor; a serde [`Model`].
//! * [`metric`]: the interference metric m(p) (eq. 4) and the verdict per
//!   processor.
//! * [`waitfor`]: the wait-for graph of a hung run and its culprits.
//! * [`verdict`]: the versioned verdict every MPI analysis gives.
//! * [`sites`]: call sites as `function (file:line)`.
//! * [`report`]: text and SVG (ILS over t, as in the paper's figures).

pub mod args;
pub mod baseline;
pub mod binding;
pub mod bound;
pub mod cpu;
pub mod export;
pub mod learn;
pub mod metric;
pub mod profile;
pub mod report;
pub mod signals;
pub mod sites;
pub mod typical;
pub mod verdict;
pub mod waitfor;

pub use args::{Partners, Peer};
pub use export::{ExportError, write_jsonl, write_parquet};
pub use learn::{LearnConfig, MODEL_VERSION, Model, ProcessorModel, learn};
pub use metric::{DETECTION_VERSION, Detection, ProcessorResult, detect};
pub use profile::{
    Call, CpuReading, Detached, OpenCall, PROFILE_VERSION, ProfileError, Profiles, RankProfile,
    RankSource, extract,
};
pub use typical::{TypicalConfig, TypicalSequence, rank_sequences, typical_sequences};
pub use verdict::{Outcome, VERDICT_VERSION, Verdict};
