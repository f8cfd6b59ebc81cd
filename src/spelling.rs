//! "Did you mean …?": the known name closest to a misspelt one.

/// The candidate closest to `word`, if close enough to be a likely typo.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(&word.to_ascii_lowercase(), &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}
