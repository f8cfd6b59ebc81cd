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
    c.is_control() && c != '\n' && c != '\t'
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_control_characters_only() {
        assert_eq!(for_terminal("plain\tname\n"), "plain\tname\n");
        assert_eq!(for_terminal("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(for_terminal("bell\u{7}"), "bell\\u{7}");
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
