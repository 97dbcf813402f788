//! Newline-delimited JSON framing for an MCP server's stdout and stderr, with a bound.
//!
//! A stdio MCP server writes one JSON-RPC message per line. Its output reaches us in chunks
//! cut wherever the pipe happened to be read, so lines are put back together here. A line
//! longer than the bound is dropped whole rather than held: a server that never writes a
//! newline must not grow the client's memory without end.

/// What [`LineBuffer::push`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A complete line, without its `\n` (nor a `\r` before it).
    Complete(Vec<u8>),
    /// A line longer than the bound was dropped; this many bytes of it were seen.
    Overlong(usize),
}

pub(crate) struct LineBuffer {
    max_line: usize,
    pending: Vec<u8>,
    /// Inside a line already past the bound: bytes are counted and skipped up to its end.
    skipped: Option<usize>,
}

impl LineBuffer {
    pub(crate) fn new(max_line: usize) -> Self {
        Self { max_line, pending: Vec::new(), skipped: None }
    }

    /// Takes the next chunk of output; returns the lines it completed.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) -> Vec<Line> {
        let mut lines = Vec::new();
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match newline {
                Some(at) => (&bytes[..at], Some(&bytes[at + 1..])),
                None => (bytes, None),
            };
            if let Some(skipped) = &mut self.skipped {
                *skipped += part.len();
            } else if self.pending.len() + part.len() > self.max_line {
                self.skipped = Some(self.pending.len() + part.len());
                self.pending = Vec::new();
            } else {
                self.pending.extend_from_slice(part);
            }
            match rest {
                Some(rest) => {
                    lines.push(self.take_line());
                    bytes = rest;
                }
                None => break,
            }
        }
        lines
    }

    /// The last line, if the output ended without a newline after it.
    pub(crate) fn finish(&mut self) -> Option<Line> {
        (self.skipped.is_some() || !self.pending.is_empty()).then(|| self.take_line())
    }

    fn take_line(&mut self) -> Line {
        if let Some(skipped) = self.skipped.take() {
            return Line::Overlong(skipped);
        }
        let mut line = std::mem::take(&mut self.pending);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Line::Complete(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(text: &str) -> Line {
        Line::Complete(text.as_bytes().to_vec())
    }

    #[test]
    fn lines_split_across_chunks_come_out_whole() {
        let mut buffer = LineBuffer::new(64);
        assert_eq!(buffer.push(b"{\"a\":"), []);
        assert_eq!(buffer.push(b"1}\n{\"b\""), [complete("{\"a\":1}")]);
        assert_eq!(buffer.push(b":2}\r\n\n"), [complete("{\"b\":2}"), complete("")]);
        assert_eq!(buffer.finish(), None);
    }

    #[test]
    fn an_unterminated_last_line_is_kept_for_the_end() {
        let mut buffer = LineBuffer::new(64);
        assert_eq!(buffer.push(b"one\ntwo"), [complete("one")]);
        assert_eq!(buffer.finish(), Some(complete("two")));
    }

    #[test]
    fn an_overlong_line_is_dropped_and_the_next_one_kept() {
        let mut buffer = LineBuffer::new(4);
        assert_eq!(buffer.push(b"abc"), []);
        assert_eq!(buffer.push(b"defg"), []);
        assert_eq!(buffer.push(b"hi\nok\n"), [Line::Overlong(9), complete("ok")]);
        assert_eq!(buffer.push(b"12345"), []);
        assert_eq!(buffer.finish(), Some(Line::Overlong(5)));
        // Exactly at the bound is fine.
        assert_eq!(buffer.push(b"1234\n"), [complete("1234")]);
    }
}
