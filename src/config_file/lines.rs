//! Where a byte offset of a config file is, as "file:line:column": the
//! line starts are found once, in one pass, and each position is a binary
//! search, so a file of 40,000 tasks costs 40,000 searches rather than
//! 40,000 scans from the file's start.

use std::path::Path;

/// A file's text with the offsets its lines start at.
pub(crate) struct Lines<'a> {
    path: &'a Path,
    text: &'a str,
    /// Offsets of the lines' first bytes (the first is 0).
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub fn new(path: &'a Path, text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self { path, text, starts }
    }

    /// The line (from 0) and its start, of `offset`.
    fn line(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|s| *s <= offset) - 1;
        (line, self.starts[line])
    }

    /// "file:line:column" (from 1; the column counts characters).
    pub fn at(&self, offset: usize) -> String {
        let offset = floor_char(self.text, offset);
        let (line, start) = self.line(offset);
        let column = self.text[start..offset].chars().count() + 1;
        format!("{}:{}:{column}", self.path.display(), line + 1)
    }

    /// The text of the line `offset` is on, without its end.
    pub fn text_of(&self, offset: usize) -> &'a str {
        let (_, start) = self.line(floor_char(self.text, offset));
        self.text[start..].lines().next().unwrap_or("")
    }
}

/// `offset`, moved back to a character boundary of `text`.
fn floor_char(text: &str, offset: usize) -> usize {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters() {
        let text = "a = 1\né = 2\n\nlast";
        let lines = Lines::new(Path::new("f.toml"), text);
        assert_eq!(lines.at(0), "f.toml:1:1");
        assert_eq!(lines.at(4), "f.toml:1:5");
        assert_eq!(lines.at(6), "f.toml:2:1");
        assert_eq!(lines.at(9), "f.toml:2:3"); // after "é " (é is 2 bytes)
        assert_eq!(lines.at(13), "f.toml:3:1");
        assert_eq!(lines.at(14), "f.toml:4:1");
        assert_eq!(lines.at(999), "f.toml:4:5");
        assert_eq!(lines.text_of(7), "é = 2");
    }
}
