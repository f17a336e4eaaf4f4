//! Tokenizer and chat template for specdec, built from a GGUF file's own metadata.
//!
//! A GGUF carries its tokenizer as metadata under llama.cpp's key names (`tokenizer.ggml.*`),
//! not as a `tokenizer.json`. We rebuild the HF `tokenizers` pipeline it describes:
//!
//! * `tokenizer.ggml.model = "gpt2"`: byte-level BPE from the stored tokens and merges, split
//!   first by the pre-tokenizer that `tokenizer.ggml.pre` names (see [`PreTokenizerKind`]).
//! * `tokenizer.ggml.model = "llama"`: SentencePiece-style BPE. The file has no merges, so they
//!   are derived from the scores as HF does when it converts a SentencePiece model, with byte
//!   fallback to the `<0xNN>` tokens and `▁` standing for spaces.
//!
//! Control tokens (type 3) and the unknown token become special tokens, parsed out of the text
//! only when asked to; user-defined tokens (type 4) are always matched whole, as llama.cpp does.
//!
//! Decoding does not go through `tokenizers`: every id maps to a fixed byte string, and
//! decoding is the lossy UTF-8 reading of their concatenation (SentencePiece models then drop
//! the one leading space their `▁` prefix added). That one rule is what lets [`StreamDecoder`]
//! reproduce [`Tokenizer::decode`] exactly while tokens arrive one by one.
//!
//! Known, deliberate behaviours:
//! * A byte-level vocabulary that lacks some byte tokens (SmolLM2 lacks 21, e.g. 0x04 and
//!   0xF1) drops those bytes when encoding, exactly as HF `tokenizers` does.
//! * In SentencePiece models, text right after a special or user-defined token gets its own
//!   `▁` prefix, as in llama.cpp (and HF's legacy Llama tokenizer).
//! * Qwen2-family vocabularies get HF's NFC normalization, which llama.cpp skips.
//!
//! Modules: `meta` (the checked `tokenizer.ggml.*` metadata), `build` (the HF pipeline it
//! describes), `tokenizer` ([`Tokenizer`]: encoding, decoding, special tokens), `stream`
//! ([`StreamDecoder`]), `chat` and `chat_time` ([`ChatTemplate`]: the GGUF's Jinja template
//! rendered with minijinja, with a small `strftime`).

mod build;
mod chat;
mod chat_time;
mod meta;
mod stream;
mod tokenizer;

#[cfg(test)]
mod tests;

pub use build::PreTokenizerKind;
pub use chat::{ChatMessage, ChatPart, ChatTemplate, CHATML_TEMPLATE};
pub use stream::StreamDecoder;
pub use tokenizer::{ModelKind, Tokenizer};

/// Everything that can go wrong building or using a tokenizer or chat template.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A metadata key the tokenizer needs is absent from the GGUF.
    #[error("tokenizer metadata key `{0}` is missing")]
    MissingMetadata(String),
    /// A metadata value has the wrong type or an unusable content.
    #[error("tokenizer metadata key `{key}` is invalid: {reason}")]
    InvalidMetadata {
        /// The metadata key.
        key: String,
        /// What is wrong with its value.
        reason: String,
    },
    /// `tokenizer.ggml.model` names a model other than `gpt2` or `llama`.
    #[error(
        "tokenizer model `{0}` (tokenizer.ggml.model) is not supported; supported: gpt2, llama"
    )]
    UnsupportedModel(String),
    /// The HF `tokenizers` pipeline rejected the vocabulary, merges or pre-tokenizer.
    #[error("cannot build the tokenizer: {0}")]
    Build(String),
    /// Encoding failed, or a chat message's role holds special-token text.
    #[error("cannot encode text: {0}")]
    Encode(String),
    /// The chat template does not parse.
    #[error("chat template has a syntax error: {0}")]
    TemplateSyntax(String),
    /// The chat template failed while rendering (it raised an error, or its output cannot
    /// be traced back to the messages).
    #[error("cannot render the chat template: {0}")]
    TemplateRender(String),
    /// The template did more work, or wrote more text, than a render of its input may
    /// (see [`ChatTemplate::render`]): a template that loops on its own, as a hostile
    /// model file's can.
    #[error(
        "the chat template needed more work than {fuel} fuel (minijinja's unit: an \
         instruction, or 64 bytes of text) for {messages} messages of {bytes} bytes; a \
         template that loops on its own is refused"
    )]
    TemplateTooCostly {
        /// The fuel the render was allowed.
        fuel: u64,
        /// Messages rendered.
        messages: usize,
        /// Their total size in bytes.
        bytes: usize,
    },
}

/// A result whose error is a [`TokenizerError`].
pub type Result<T> = std::result::Result<T, TokenizerError>;
