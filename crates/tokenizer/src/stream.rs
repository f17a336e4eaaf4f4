//! Streaming detokenization that never splits a UTF-8 character.

use crate::Tokenizer;

/// Turns ids into text one at a time, for printing tokens as they are generated.
///
/// A byte-level BPE piece can end in the middle of a UTF-8 character (an emoji is often two or
/// three tokens), so bytes that may still become a character are held back until the next
/// token completes them. The concatenation of everything [`push`](Self::push) and
/// [`finish`](Self::finish) return equals [`Tokenizer::decode`] of the same ids with the same
/// `skip_special`, for any ids at all.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    /// Whether any byte has been emitted yet (for the SentencePiece leading-space strip).
    started: bool,
    skip_special: bool,
}

/// The length of the longest prefix of `buf` whose decoding later bytes cannot change: all of
/// it but a trailing incomplete UTF-8 sequence. An invalid sequence is final once seen
/// (`error_len` is `Some`), so it is included and replaced exactly as a whole-buffer decode
/// would replace it.
fn settled_len(buf: &[u8]) -> usize {
    let mut pos = 0;
    loop {
        match std::str::from_utf8(&buf[pos..]) {
            Ok(_) => return buf.len(),
            Err(e) => match e.error_len() {
                Some(n) => pos += e.valid_up_to() + n,
                None => return pos + e.valid_up_to(),
            },
        }
    }
}

impl StreamDecoder {
    /// A decoder that drops special tokens when `skip_special` is set, like `decode`.
    pub fn new(skip_special: bool) -> Self {
        StreamDecoder {
            skip_special,
            ..Self::default()
        }
    }

    /// Adds one token and returns the text it completes (often empty mid-character).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        let Some(mut piece) = tok.emitted(id, self.skip_special) else {
            return String::new();
        };
        if !self.started && !piece.is_empty() {
            self.started = true;
            if tok.strip_leading_space && piece[0] == b' ' {
                piece = &piece[1..];
            }
        }
        self.pending.extend_from_slice(piece);
        let settled = settled_len(&self.pending);
        let out = String::from_utf8_lossy(&self.pending[..settled]).into_owned();
        self.pending.drain(..settled);
        out
    }

    /// Flushes what is held back; an unfinished character becomes U+FFFD. `_tok` is taken for
    /// symmetry with `push`, so that decoders with tokenizer-dependent tails fit the same API.
    pub fn finish(self, _tok: &Tokenizer) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::settled_len;

    #[test]
    fn settled_prefix_holds_back_only_an_incomplete_tail() {
        assert_eq!(settled_len(b"abc"), 3);
        assert_eq!(settled_len("é".as_bytes()), 2);
        assert_eq!(settled_len(&[b'a', 0xE2, 0x82]), 1); // start of €
        assert_eq!(settled_len(&[0xFF, b'a']), 2); // invalid byte: final
        assert_eq!(settled_len(&[0xE2, 0x41, 0xF0, 0x9F]), 2); // invalid, 'A', then incomplete
        assert_eq!(settled_len(&[]), 0);
    }
}
