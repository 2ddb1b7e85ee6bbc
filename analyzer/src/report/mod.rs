//! Reports for people: SVG plots of scores over time (the papers' figures),
//! and the short lists the text reports name things with.

mod svg;

pub(crate) use svg::{COLORS, escape};
pub use svg::{Series, scatter_svg};

/// The first `shown` of `items`, comma-separated, then "and N more" for
/// the rest: a list a sentence can carry.
pub(crate) fn first_and_more<T: std::fmt::Display>(items: &[T], shown: usize) -> String {
    let mut s = items
        .iter()
        .take(shown)
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > shown {
        s.push_str(&format!(" and {} more", items.len() - shown));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::first_and_more;

    #[test]
    fn a_long_list_names_the_first_and_counts_the_rest() {
        assert_eq!(first_and_more::<u32>(&[], 3), "");
        assert_eq!(first_and_more(&[0, 1, 2], 3), "0, 1, 2");
        assert_eq!(
            first_and_more(&["a", "b", "c", "d", "e"], 3),
            "a, b, c and 2 more"
        );
    }
}
