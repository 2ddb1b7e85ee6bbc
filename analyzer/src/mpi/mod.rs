//! MPI interference detection (Tabatabaee & Hollingsworth, paper 002).
//!
//! Data flow, one module per stage:
//!
//! * [`profile`]: a capture of `libmpich.so.12:MPI_*` uprobes (with
//!   arguments) becomes, per rank, the paper's 4-tuples (§2.1): MPI
//!   function, peer, computation time since the previous MPI call returned,
//!   communication time inside the call. No relink, unlike the paper's
//!   PMPI wrappers.
//! * [`export`]: profiles as JSON lines and Parquet (DuckDB, DataFusion, Spark).
//! * [`typical`]: Sequitur over one rank's (function, peer) sequence, rules
//!   longest first, matched by function on every rank: the typical
//!   sequences (§4.1).
//! * [`signals`]: S(p,l,t), AVG(l,t), STDEV(l,t) (eq. 1), thresholds
//!   (eq. 2), indicators (eq. 3) with the 0.5 ms filter, ILS(p,l,t).
//! * [`learn`]: K(p,l) from a clean and an interfered run (eq. 5), kept as a
//!   serde [`Model`] and applied to later runs.
//! * [`metric`]: the interference metric m(p) (eq. 4) per processor.
//! * [`report`]: text and SVG (ILS over t, as in the paper's figures).

pub mod args;
pub mod export;
pub mod learn;
pub mod metric;
pub mod profile;
pub mod report;
pub mod signals;
pub mod sites;
pub mod typical;
pub mod waitfor;

pub use args::{Partners, Peer};
pub use export::{ExportError, write_jsonl, write_parquet};
pub use learn::{LearnConfig, MODEL_VERSION, Model, ProcessorModel, learn};
pub use metric::{DETECTION_VERSION, Detection, ProcessorResult, detect};
pub use profile::{
    Call, OpenCall, PROFILE_VERSION, ProfileError, Profiles, RankProfile, RankSource, extract,
};
pub use signals::{Signals, Threshold};
pub use typical::{TypicalConfig, TypicalSequence, typical_sequences};
