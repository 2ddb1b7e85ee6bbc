//! Reports for people: SVG plots of scores over time (the papers' figures).

mod svg;

pub(crate) use svg::{COLORS, escape};
pub use svg::{Series, scatter_svg};
