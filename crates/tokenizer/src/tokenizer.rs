//! The [`Tokenizer`]: encoding through HF `tokenizers`, decoding through a per-id byte table.

use specdec_gguf::GgufFile;

use crate::build::{self, PreTokenizerKind};
use crate::chat::{ChatMessage, ChatPart, ChatTemplate};
use crate::meta::{Meta, TokenType};
use crate::{Result, TokenizerError};

/// Which of llama.cpp's tokenizer models (`tokenizer.ggml.model`) a file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// `gpt2`: byte-level BPE with explicit merges (Llama 3, Qwen2, SmolLM2, ...).
    Gpt2,
    /// `llama`: SentencePiece BPE with scores and byte fallback (Llama 2, Mistral, ...).
    Llama,
}

/// Texts of tokens that end a turn in common chat formats; each stops generation when the
/// vocabulary has it as a special token (llama.cpp collects the same end-of-generation set).
const END_OF_TURN: [&str; 8] = [
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
];

/// A tokenizer rebuilt from a GGUF's metadata. Cheap to share: every method takes `&self`.
pub struct Tokenizer {
    /// Parses special tokens out of the text.
    parse: tokenizers::Tokenizer,
    /// The same encoder, but special tokens in the text are ordinary text.
    plain: tokenizers::Tokenizer,
    model: ModelKind,
    pre: PreTokenizerKind,
    /// What each id decodes to, as bytes (byte-level pieces can end mid-character).
    pub(crate) pieces: Vec<Box<[u8]>>,
    /// Control and unknown tokens: dropped by `decode(.., skip_special = true)`.
    special: Vec<bool>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    /// SentencePiece models drop the space their `▁` prefix put before the first word.
    pub(crate) strip_leading_space: bool,
    stop_ids: Vec<u32>,
    /// The text and id of every special token `parse` splits out, longest text first.
    special_texts: Vec<(String, u32)>,
    warnings: Vec<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.model)
            .field("pre", &self.pre)
            .field("vocab_size", &self.pieces.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("stop_ids", &self.stop_ids)
            .finish()
    }
}

/// GPT-2's byte-to-character table: printable bytes stand for themselves, the other 68 bytes
/// are shifted to U+0100.. so every byte has a visible character. Returns char -> byte.
pub(crate) fn byte_level_char_to_byte() -> std::collections::HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut shifted = 0u32;
    (0..=255u8)
        .map(|b| {
            let c = if printable(b) {
                char::from(b)
            } else {
                shifted += 1;
                char::from_u32(255 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
            };
            (c, b)
        })
        .collect()
}

/// SentencePiece byte tokens are spelled `<0xNN>`.
fn byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok())?
}

fn piece_bytes(
    model: ModelKind,
    text: &str,
    ty: TokenType,
    special: bool,
    char_to_byte: &std::collections::HashMap<char, u8>,
) -> Box<[u8]> {
    // Special tokens, and user-defined ones in a byte-level vocabulary, are stored as the
    // literal text they stand for.
    if special || (ty == TokenType::UserDefined && model == ModelKind::Gpt2) {
        return text.as_bytes().into();
    }
    match model {
        // A piece spelled outside the byte alphabet is taken literally, as HF does.
        ModelKind::Gpt2 => text
            .chars()
            .map(|c| char_to_byte.get(&c).copied())
            .collect::<Option<Vec<u8>>>()
            .unwrap_or_else(|| text.as_bytes().to_vec())
            .into(),
        ModelKind::Llama => match (ty, byte_token(text)) {
            (TokenType::Byte, Some(b)) => Box::new([b]),
            _ => text.replace('▁', " ").into_bytes().into(),
        },
    }
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF describes. Fails on missing or malformed tokenizer
    /// metadata and on tokenizer models other than `gpt2` and `llama`.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer> {
        let meta = Meta::read(file)?;
        let model = match meta.model.as_str() {
            "gpt2" => ModelKind::Gpt2,
            "llama" => ModelKind::Llama,
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };
        let mut warnings = meta.warnings.clone();
        let (parse, pre) = build::build(&meta, &mut warnings)?;
        let mut plain = parse.clone();
        plain.set_encode_special_tokens(true);

        let [bos, eos, _unk, _pad, eot, eom] = meta.special_ids;
        let special = meta.special_flags();
        let char_to_byte = byte_level_char_to_byte();
        let pieces = (meta.tokens.iter().zip(&meta.types).zip(&special))
            .map(|((text, &ty), &sp)| piece_bytes(model, text, ty, sp, &char_to_byte))
            .collect();

        let mut stop_ids: Vec<u32> = [eos, eot, eom].into_iter().flatten().collect();
        for text in END_OF_TURN {
            if let Some(id) = parse.token_to_id(text) {
                if special.get(id as usize) == Some(&true) && !stop_ids.contains(&id) {
                    stop_ids.push(id);
                }
            }
        }
        let mut special_texts: Vec<(String, u32)> = (meta.tokens.iter().zip(&special))
            .filter(|(text, &sp)| sp && !text.is_empty())
            .filter_map(|(text, _)| Some((text.clone(), parse.token_to_id(text)?)))
            .collect();
        special_texts.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        special_texts.dedup_by(|a, b| a.0 == b.0);
        Ok(Tokenizer {
            special_texts,
            add_bos: meta.add_bos.unwrap_or(pre.default_add_bos()),
            strip_leading_space: model == ModelKind::Llama && meta.add_space_prefix.unwrap_or(true),
            parse,
            plain,
            model,
            pre,
            pieces,
            special,
            bos,
            eos,
            stop_ids,
            warnings,
        })
    }

    /// Token ids of `text`. Never adds BOS. With `parse_special`, the text of a special token
    /// (`<|im_start|>`) becomes that token; without it, it is tokenized as ordinary text.
    /// User-defined tokens are matched whole either way, as llama.cpp does.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let tok = if parse_special {
            &self.parse
        } else {
            &self.plain
        };
        tok.encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Encode(e.to_string()))
    }

    /// Ids for a prompt (usually a rendered chat template): special tokens are parsed, and
    /// BOS is put first when the model wants it (`tokenizer.ggml.add_bos_token`, by default
    /// true for `llama` models and the Llama 3 pre-tokenizer, false otherwise) unless the
    /// text already begins with it.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let ids = self.encode(text, true)?;
        Ok(self.with_bos(ids))
    }

    fn with_bos(&self, mut ids: Vec<u32>) -> Vec<u32> {
        if let Some(bos) = self.bos.filter(|_| self.add_bos) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        ids
    }

    /// Ids for a conversation rendered through `template`, as a prompt (BOS as in
    /// [`encode_prompt`](Self::encode_prompt)). Message contents are text: a content that
    /// spells a special token (`<|im_end|>`) gets ordinary text tokens, so no message can end
    /// its turn or open another; only the template's own markup yields control tokens.
    ///
    /// When no content holds a special token's text, or a piece of one at either end (which
    /// the template's text could complete), this is exactly `encode_prompt(template.render(..))`.
    /// Otherwise the render is split with [`ChatTemplate::render_parts`] and encoded with
    /// [`encode_parts`](Self::encode_parts). A role that holds (a piece of) a special token's
    /// text is an error: roles are names, and templates compare them.
    pub fn encode_chat(
        &self,
        template: &ChatTemplate,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        if let Some(m) = messages.iter().find(|m| self.touches_special(&m.role)) {
            return Err(TokenizerError::Encode(format!(
                "the message role {:?} holds special-token text",
                m.role
            )));
        }
        if !messages.iter().any(|m| self.touches_special(&m.content)) {
            return self.encode_prompt(&template.render(messages, add_generation_prompt)?);
        }
        let parts = template.render_parts(messages, add_generation_prompt)?;
        self.encode_parts(&parts)
    }

    /// Ids for a rendered conversation's parts, as a prompt: special tokens are parsed out of
    /// [`ChatPart::Markup`] only. The text between two special tokens (markup and contents
    /// alike) is encoded as one piece, as `encode_prompt` would, so where no content spells a
    /// special token the ids equal `encode_prompt` of the parts' concatenation.
    pub fn encode_parts(&self, parts: &[ChatPart]) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        let mut text = String::new();
        let flush = |text: &mut String, ids: &mut Vec<u32>| -> Result<()> {
            if !text.is_empty() {
                ids.extend(self.encode(text, false)?);
                text.clear();
            }
            Ok(())
        };
        for part in parts {
            match part {
                ChatPart::Content(c) => text.push_str(c),
                ChatPart::Markup(m) => {
                    let mut rest = m.as_str();
                    while let Some((at, special, id)) = self.find_special(rest) {
                        text.push_str(&rest[..at]);
                        flush(&mut text, &mut ids)?;
                        ids.push(id);
                        rest = &rest[at + special.len()..];
                    }
                    text.push_str(rest);
                }
            }
        }
        flush(&mut text, &mut ids)?;
        Ok(self.with_bos(ids))
    }

    /// The leftmost special token in `text` (the longest one there), as HF's added-token
    /// matching finds it: its byte offset, text and id.
    fn find_special<'t>(&'t self, text: &str) -> Option<(usize, &'t str, u32)> {
        let mut best: Option<(usize, &str, u32)> = None;
        for (s, id) in &self.special_texts {
            if let Some(at) = text.find(s.as_str()) {
                // Longest first, so a later text wins only by starting earlier.
                if best.is_none_or(|(b, _, _)| at < b) {
                    best = Some((at, s, *id));
                }
            }
        }
        best
    }

    /// Whether `text` holds a special token's text, or begins with the end of one or ends
    /// with the start of one (text around it could complete it).
    fn touches_special(&self, text: &str) -> bool {
        self.special_texts.iter().any(|(s, _)| {
            text.contains(s.as_str())
                || s.char_indices()
                    .skip(1)
                    .any(|(k, _)| text.ends_with(&s[..k]) || text.starts_with(&s[k..]))
        })
    }

    /// The bytes `id` contributes to decoded text, or `None` if it contributes nothing.
    pub(crate) fn emitted(&self, id: u32, skip_special: bool) -> Option<&[u8]> {
        let i = id as usize;
        let piece = self.pieces.get(i)?;
        (!(skip_special && self.special[i])).then_some(&**piece)
    }

    /// The text of `ids`: their bytes concatenated and read as UTF-8, invalid sequences
    /// replaced by U+FFFD. Ids outside the vocabulary are skipped; with `skip_special`, so are
    /// control tokens. SentencePiece models drop one leading space (the `▁` prefix).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.emitted(id, skip_special).unwrap_or_default());
        }
        let start = usize::from(self.strip_leading_space && bytes.first() == Some(&b' '));
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// Number of token ids (the length of `tokenizer.ggml.tokens`).
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// A hash (FNV-1a, 64 bits) of every id's bytes in order, each length-prefixed:
    /// tokenizers with equal fingerprints mean the same bytes by the same ids, so engines
    /// of their models can share drafting state (a draft is ids). Not a security hash.
    pub fn vocab_fingerprint(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |b: u8| {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        };
        for piece in &self.pieces {
            (piece.len() as u32)
                .to_le_bytes()
                .into_iter()
                .for_each(&mut eat);
            piece.iter().copied().for_each(&mut eat);
        }
        h
    }

    /// The beginning-of-sequence token (`tokenizer.ggml.bos_token_id`), if the file names one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token (`tokenizer.ggml.eos_token_id`), if the file names one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `encode_prompt` puts BOS first.
    pub fn adds_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Ids that end generation: eos, `tokenizer.ggml.eot_token_id`/`eom_token_id`, and the
    /// special end-of-turn tokens the vocabulary has (`<|im_end|>`, `<|eot_id|>`, ...).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// The text `id` decodes to on its own (U+FFFD for a partial UTF-8 character).
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.token_bytes(id)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }

    /// The raw bytes `id` decodes to.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.pieces.get(id as usize).map(|p| &**p)
    }

    /// Whether `id` is a control (or unknown) token, like `<|im_start|>` or `<s>`.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize) == Some(&true)
    }

    /// The most bytes one token decodes to: a text longer than `n` times this cannot be
    /// fewer than `n` tokens.
    pub fn max_token_bytes(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| p.len())
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// The id of a token by its text as the vocabulary spells it (`<|im_end|>`, `Ġthe`, `▁the`).
    pub fn id_of(&self, piece: &str) -> Option<u32> {
        self.parse.token_to_id(piece)
    }

    /// Which tokenizer model the file describes (byte-level BPE or SentencePiece).
    pub fn model_kind(&self) -> ModelKind {
        self.model
    }

    /// The pre-tokenizer `tokenizer.ggml.pre` selected.
    pub fn pre_tokenizer(&self) -> PreTokenizerKind {
        self.pre
    }

    /// What was tolerated while building: an unknown `tokenizer.ggml.pre` (GPT-2's regex is
    /// used instead), out-of-range special token ids (ignored), repeated token texts.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}
