//! Text from outside (recipe names, file names, values) on its way to a
//! terminal: control characters escaped, so a name cannot move the cursor,
//! recolour the screen or rewrite what was printed; long text shortened
//! around the part that matters.

use std::borrow::Cow;

/// `text` with every control character but newline and tab escaped
/// (`\u{1b}` for ESC): what a terminal shows is what the text holds.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn is_unsafe(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || is_bidi_control(c)
}

/// Unicode's bidirectional controls, which reorder what a terminal shows
/// (a name could read as another).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Characters of a name shown at most; a longer one keeps its start and end.
pub const NAME_SHOWN: usize = 120;

/// `text` for one line of a terminal: every control character escaped,
/// newlines and tabs too, so it cannot start a line of its own.
pub fn one_line(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || is_bidi_control(c);
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match unsafe_char(c) {
            true => escaped.extend(c.escape_default()),
            false => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

/// A name from a file (a tensor's, a metadata key) for one line of a
/// terminal: [`one_line`], and at most [`NAME_SHOWN`] characters.
pub fn name(text: &str) -> Cow<'_, str> {
    match one_line(text) {
        Cow::Borrowed(plain) => shorten(plain, NAME_SHOWN),
        // Bounded as shown: an escape counts as the characters it takes.
        Cow::Owned(escaped) => Cow::Owned(shorten(&escaped, NAME_SHOWN).into_owned()),
    }
}

/// How many characters [`name`] shows of `text`: the width of its column.
pub fn name_width(text: &str) -> usize {
    name(text).chars().count()
}

/// [`name`] as a `Display`, for messages (`format!("tensor `{}`", Name(n))`)
/// and table columns (`{:width$}` pads what is shown).
pub struct Name<'a>(pub &'a str);

impl std::fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(&name(self.0))
    }
}

/// At most `max` characters of `text`, the middle replaced by `…` when it is
/// longer.
pub fn shorten(text: &str, max: usize) -> Cow<'_, str> {
    let count = text.chars().count();
    if count <= max {
        return Cow::Borrowed(text);
    }
    let keep = max.saturating_sub(1);
    let head: String = text.chars().take(keep - keep / 2).collect();
    let tail: String = text.chars().skip(count - keep / 2).collect();
    Cow::Owned(format!("{head}…{tail}"))
}

/// A window of at most `width` characters of `line` around character
/// `column` (0-based), and the column's place in it.
pub fn window(line: &str, column: usize, width: usize) -> (String, usize) {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= width {
        return (line.to_owned(), column);
    }
    let start = column.saturating_sub(width / 3).min(chars.len().saturating_sub(width));
    let end = (start + width).min(chars.len());
    let mut out = String::new();
    let mut at = column - start;
    if start > 0 {
        out.push('…');
        at += 1;
    }
    out.extend(&chars[start..end]);
    if end < chars.len() {
        out.push('…');
    }
    (out, at)
}

/// `n` of `thing`, in the plural unless one: `1 tensor`, `2 tensors`.
pub fn count(n: impl Into<u64>, thing: &str) -> String {
    match n.into() {
        1 => format!("1 {thing}"),
        n => format!("{n} {thing}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(
            (count(1u64, "tensor"), count(0u64, "tensor"), count(26u64, "node")),
            ("1 tensor".to_owned(), "0 tensors".to_owned(), "26 nodes".to_owned())
        );
    }

    #[test]
    fn escapes_control_characters_only() {
        assert_eq!(for_terminal("plain\tname\n"), "plain\tname\n");
        assert_eq!(for_terminal("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(for_terminal("bell\u{7}"), "bell\\u{7}");
    }

    #[test]
    fn names_stay_on_one_line_and_in_bounds() {
        assert_eq!(name("blk.0.attn_q.weight"), "blk.0.attn_q.weight");
        assert_eq!(name("a\nb\tc\u{1b}[31m\u{7}"), "a\\nb\\tc\\u{1b}[31m\\u{7}");
        assert_eq!(name("evil\u{202e}gguf.exe"), "evil\\u{202e}gguf.exe");
        assert_eq!(for_terminal("x\u{2066}y"), "x\\u{2066}y");
        let huge = "n".repeat(1 << 20);
        let long = name(&huge);
        assert_eq!(long.chars().count(), NAME_SHOWN);
        assert!(long.contains('…'));
        assert_eq!(Name("a\nb").to_string(), "a\\nb");
        assert_eq!(format!("{:6}|", Name("a\nb")), "a\\nb  |");
        assert_eq!(name_width(&huge), NAME_SHOWN);
        // Escapes count as shown (found by the gguf_header fuzz target).
        assert!(name(&"\u{1b}".repeat(200)).chars().count() <= NAME_SHOWN);
    }

    #[test]
    fn shortens_in_the_middle() {
        assert_eq!(shorten("abcdef", 6), "abcdef");
        assert_eq!(shorten("abcdefghij", 5), "ab…ij");
    }

    #[test]
    fn windows_keep_the_column_in_view() {
        let line = "x".repeat(100_000) + "HERE" + &"y".repeat(100);
        let (shown, at) = window(&line, 100_000, 60);
        assert!(shown.chars().count() <= 62);
        assert_eq!(shown.chars().skip(at).take(4).collect::<String>(), "HERE");
        assert_eq!(window("short", 2, 60), ("short".to_owned(), 2));
    }
}
