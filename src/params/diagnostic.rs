//! Recipe errors: every problem found, each with file:line:col, the line
//! itself and a hint (usually the nearest valid name).

use std::fmt;
use std::path::{Path, PathBuf};

use super::Span;

/// One problem, located by byte span in the recipe text.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    pub hint: Option<String>,
    /// The source line is not shown (it may hold a secret).
    pub hide_source: bool,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic { message: message.into(), span, hint: None, hide_source: false }
    }

    /// Says where the problem is without quoting the line (a URL that may
    /// hold a credential, say).
    pub fn hiding_source(mut self) -> Diagnostic {
        self.hide_source = true;
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    /// Adds "did you mean `X`?" when some candidate is close to `word`.
    pub fn suggest<'a>(self, word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Diagnostic {
        let valid: Vec<&str> = candidates.into_iter().collect();
        match nearest(word, valid.iter().copied()) {
            Some(best) => self.with_hint(format!("did you mean `{best}`?")),
            None if !valid.is_empty() => self.with_hint(format!("expected one of: {}", valid.join(", "))),
            None => self,
        }
    }
}

pub use crate::spelling::nearest;

/// A diagnostic placed in its file.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
    /// The source line the problem is on, or the part of it around the
    /// column when the line is long.
    pub source_line: String,
    /// The column's place in `source_line` (1-based).
    pub snippet_column: usize,
}

/// Every problem found in one recipe.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct RecipeError {
    pub file: PathBuf,
    pub problems: Vec<Located>,
}

impl RecipeError {
    pub fn new(file: &Path, text: &str, mut diagnostics: Vec<Diagnostic>) -> RecipeError {
        diagnostics.sort_by_key(|d| d.span.start);
        diagnostics.dedup();
        let problems = diagnostics.into_iter().map(|d| locate(text, d)).collect();
        RecipeError { file: file.to_owned(), problems }
    }

    /// An error about the file as a whole (it cannot be read, say).
    pub fn whole_file(file: &Path, message: String) -> RecipeError {
        let problem =
            Located { line: 1, column: 1, message, hint: None, source_line: String::new(), snippet_column: 1 };
        RecipeError { file: file.to_owned(), problems: vec![problem] }
    }
}

/// Characters of a long source line shown around a problem's column.
const SNIPPET_WIDTH: usize = 100;

/// Problems printed in full; the rest are counted.
const SHOWN_PROBLEMS: usize = 50;

/// The 1-based line and column (in characters) of byte `offset` of `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let start = char_start(text, offset);
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    (text[..start].matches('\n').count() + 1, text[line_start..start].chars().count() + 1)
}

/// `offset`, moved back to the start of the character it falls in.
fn char_start(text: &str, offset: usize) -> usize {
    let mut start = offset.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    start
}

fn locate(text: &str, d: Diagnostic) -> Located {
    let start = char_start(text, d.span.start);
    let (line, column) = line_column(text, start);
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let (source_line, at) = match d.hide_source {
        true => (String::new(), 0),
        false => crate::text::window(text[line_start..line_end].trim_end(), column - 1, SNIPPET_WIDTH),
    };
    Located { line, column, message: d.message, hint: d.hint, source_line, snippet_column: at + 1 }
}

impl fmt::Display for RecipeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(f, "{} has {n} problem{}", self.file.display(), if n == 1 { "" } else { "s" })?;
        for p in self.problems.iter().take(SHOWN_PROBLEMS) {
            let message = crate::text::shorten(&p.message, 4 * SNIPPET_WIDTH);
            write!(f, "\n{}:{}:{}: {message}", self.file.display(), p.line, p.column)?;
            if !p.source_line.is_empty() {
                let gutter = p.line.to_string().len();
                write!(f, "\n{:gutter$} |\n{} | {}", "", p.line, p.source_line)?;
                write!(f, "\n{:gutter$} | {}^", "", " ".repeat(p.snippet_column - 1))?;
            }
            if let Some(hint) = &p.hint {
                write!(f, "\n  = hint: {}", crate::text::shorten(hint, 4 * SNIPPET_WIDTH))?;
            }
        }
        if n > SHOWN_PROBLEMS {
            write!(f, "\n… and {} more problems", n - SHOWN_PROBLEMS)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_finds_typos_only() {
        let ops = ["load", "quantize", "dequantize", "export"];
        assert_eq!(nearest("quantise", ops), Some("quantize"));
        assert_eq!(nearest("exprot", ops), Some("export"));
        assert_eq!(nearest("frobnicate", ops), None);
    }

    #[test]
    fn locates_line_and_column() {
        let text = "a = 1\n[step.x]\nop = \"qantize\"\n";
        let at = text.find("\"qantize\"").unwrap();
        let e = RecipeError::new(Path::new("r.toml"), text, vec![Diagnostic::new("unknown op", at..at + 9)]);
        assert_eq!((e.problems[0].line, e.problems[0].column), (3, 6));
        assert!(e.to_string().contains("r.toml:3:6: unknown op"), "{e}");
    }
}
