//! Chat templates: the Jinja template a GGUF ships, rendered with minijinja.

use std::collections::BTreeMap;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, Error, ErrorKind, Value};
use specdec_gguf::GgufFile;

use crate::meta::{self, SPECIAL_ID_KEYS};
use crate::{Result, TokenizerError};

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// Who speaks: `system`, `user`, `assistant`, or whatever the template accepts.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A piece of a rendered conversation (see [`ChatTemplate::render_parts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChatPart {
    /// The template's own text: its control tokens are meant as such.
    Markup(String),
    /// Text from a message's content: ordinary text, whatever it spells.
    Content(String),
}

/// Brackets the sentinels that stand for contents in [`ChatTemplate::render_parts`] (a
/// private-use character no chat template emits on its own).
const SENTINEL: char = '\u{F8FF}';

/// One piece of a render with sentinels: template text, or the place of message `i`'s content.
enum Slot<'a> {
    Markup(&'a str),
    Content(usize),
}

/// Splits `text` at the sentinels `{mark}{i}{SENTINEL}`; `None` when one is malformed (the
/// template cut or changed it) or names no message.
fn split_at_sentinels<'a>(text: &'a str, mark: &str, messages: usize) -> Option<Vec<Slot<'a>>> {
    let mut slots = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(mark) {
        slots.push(Slot::Markup(&rest[..at]));
        let tail = &rest[at + mark.len()..];
        let end = tail.find(SENTINEL)?;
        let digits = &tail[..end];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let i: usize = digits.parse().ok().filter(|&i| i < messages)?;
        slots.push(Slot::Content(i));
        rest = &tail[end + SENTINEL.len_utf8()..];
    }
    slots.push(Slot::Markup(rest));
    Some(slots)
}

/// Lays `slots` (markup and contents alternating, markup first and last) over `rendered`:
/// markup must match exactly and each content be there as it is or trimmed, and nothing may
/// be left over. Returns the parts, empty ones dropped.
fn trace(rendered: &str, slots: &[Slot<'_>], messages: &[ChatMessage]) -> Option<Vec<ChatPart>> {
    let mut parts = Vec::new();
    let mut rest = rendered;
    for (k, slot) in slots.iter().enumerate() {
        match *slot {
            Slot::Markup(t) => {
                rest = rest.strip_prefix(t)?;
                if !t.is_empty() {
                    parts.push(ChatPart::Markup(t.to_string()));
                }
            }
            Slot::Content(i) => {
                let next = match slots.get(k + 1) {
                    Some(Slot::Markup(t)) => *t,
                    _ => "",
                };
                let last = k + 2 == slots.len();
                let raw = messages[i].content.as_str();
                let fits = |c: &str| {
                    rest.strip_prefix(c).is_some_and(|after| {
                        if last {
                            after == next
                        } else {
                            after.starts_with(next)
                        }
                    })
                };
                let c = [raw, raw.trim()].into_iter().find(|c| fits(c))?;
                rest = &rest[c.len()..];
                if !c.is_empty() {
                    parts.push(ChatPart::Content(c.to_string()));
                }
            }
        }
    }
    rest.is_empty().then_some(parts)
}

/// A render's fuel (minijinja's unit of work: one instruction, or 64 bytes of text made or
/// read): a fixed allowance for the template's own logic and text, plus allowances per
/// message and per byte of input text, so a conversation of any size renders. SmolLM2's,
/// Qwen2.5's and Gemma 3's templates take at most 60 fuel a message and 1/16 a byte of
/// content (ChatML's `+` chain builds each content four times): a sixteenth and an eighth
/// of the allowances (measured on 1 to 1,000 messages and a 1 MiB content). A template
/// that loops on its own (two nested loops of 100,000 are 10^10 steps and 10 GB of text,
/// from a hostile model file) stops within milliseconds on a short chat, and in time
/// proportional to the input on a long one (0.75 s for a 32 MiB message). Fuel bounds
/// memory as well as time, since every byte written or built is charged: a render makes
/// at most 64 bytes per fuel, so 12.5 MiB of its own and 32 bytes per byte of input.
const FUEL_BASE: u64 = 200_000;
const FUEL_PER_MESSAGE: u64 = 1_000;
const FUEL_PER_KIB: u64 = 512;

/// The fuel a render of `messages` with `contents` may use (see [`FUEL_BASE`]), and the
/// bytes of its input (`extra`: the template's other variables).
fn fuel_for(messages: &[ChatMessage], contents: &[&str], extra: usize) -> (u64, usize) {
    let bytes: usize = messages.iter().map(|m| m.role.len()).sum::<usize>()
        + contents.iter().map(|c| c.len()).sum::<usize>()
        + extra;
    let fuel = FUEL_BASE
        .saturating_add(FUEL_PER_MESSAGE.saturating_mul(messages.len() as u64))
        .saturating_add(FUEL_PER_KIB.saturating_mul(bytes as u64) / 1024);
    (fuel, bytes)
}

/// ChatML, the format llama.cpp falls back to when a model has no template: it is what most
/// instruction-tuned GGUFs without a template were trained on, and for a base model any
/// consistent format serves.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// A compiled chat template, with the variables HF templates expect: `messages`,
/// `add_generation_prompt`, `bos_token`, `eos_token`, and the functions `raise_exception(msg)`
/// and `strftime_now(format)` (UTC). Python string methods work through minijinja-contrib's
/// pycompat layer, and blocks are trimmed (`trim_blocks`, `lstrip_blocks`) as transformers'
/// Jinja environment does.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

fn raise_exception(msg: String) -> std::result::Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    crate::chat_time::strftime(secs, &format)
}

/// The text of the token a `*_token_id` key names, or "" when there is none.
fn token_text(file: &GgufFile, id_key: &str) -> String {
    let id = file.get(id_key).and_then(|v| v.as_u64());
    let tokens = file.get(meta::TOKENS).and_then(|v| v.as_array());
    match (id, tokens) {
        (Some(id), Some(tokens)) => usize::try_from(id)
            .ok()
            .and_then(|i| tokens.get(i))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` are the texts the template may insert.
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<ChatTemplate> {
        let source = source.into();
        let syntax_err = |e: Error| TokenizerError::TemplateSyntax(e.to_string());
        let mut env = Environment::new();
        env.set_syntax(
            SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(syntax_err)?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned("chat_template", source.clone())
            .map_err(syntax_err)?;
        Ok(ChatTemplate {
            env,
            source,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// ChatML (see [`CHATML_TEMPLATE`]).
    pub fn chatml(bos_token: impl Into<String>, eos_token: impl Into<String>) -> Result<Self> {
        Self::new(CHATML_TEMPLATE, bos_token, eos_token)
    }

    /// The template in `tokenizer.chat_template`, or `None` when the file has none.
    pub fn from_gguf(file: &GgufFile) -> Result<Option<ChatTemplate>> {
        let Some(source) = meta::opt_string(file, meta::CHAT_TEMPLATE)? else {
            return Ok(None);
        };
        let bos = token_text(file, SPECIAL_ID_KEYS[0]);
        let eos = token_text(file, SPECIAL_ID_KEYS[1]);
        Self::new(source, bos, eos).map(Some)
    }

    /// The file's template, or ChatML when it has none (as llama.cpp does).
    pub fn from_gguf_or_chatml(file: &GgufFile) -> Result<ChatTemplate> {
        match Self::from_gguf(file)? {
            Some(t) => Ok(t),
            None => Self::chatml(
                token_text(file, SPECIAL_ID_KEYS[0]),
                token_text(file, SPECIAL_ID_KEYS[1]),
            ),
        }
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends where the assistant's
    /// reply begins. Errors (including `raise_exception`) carry minijinja's message. The
    /// work and the text of a render are bounded by its input's size (see `FUEL_BASE`):
    /// past the bound it fails with [`TokenizerError::TemplateTooCostly`].
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let contents: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
        self.render_with(messages, &contents, add_generation_prompt)
    }

    /// Renders `messages` as [`render`](Self::render) does, split into the template's own text
    /// and the text that came from message contents; the parts concatenate to what `render`
    /// returns. [`Tokenizer::encode_chat`](crate::Tokenizer::encode_chat) encodes the first with
    /// special-token parsing and the second without, so a message cannot forge control tokens.
    ///
    /// The template is rendered a second time with each content replaced by a sentinel it
    /// cannot otherwise produce (private-use characters around a nonce absent from the
    /// template, the contents and the output); the sentinels mark where contents went. A
    /// content may be rendered as it is or trimmed (`| trim`, `.strip()`). A template that
    /// changes contents in any other way (slicing, escaping, branching on their text) cannot be
    /// traced back and is an error ([`TokenizerError::TemplateRender`]) rather than a guess.
    pub fn render_parts(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<ChatPart>> {
        let rendered = self.render(messages, add_generation_prompt)?;
        let taken = |mark: &str| {
            rendered.contains(mark)
                || self.source.contains(mark)
                || messages
                    .iter()
                    .any(|m| m.content.contains(mark) || m.role.contains(mark))
        };
        let mut nonce = 0u64;
        let mark = loop {
            let mark = format!("{SENTINEL}specdec{nonce}:");
            if !taken(&mark) {
                break mark;
            }
            nonce += 1;
        };
        let sentinels: Vec<String> = (0..messages.len())
            .map(|i| format!("{mark}{i}{SENTINEL}"))
            .collect();
        let sentinels: Vec<&str> = sentinels.iter().map(String::as_str).collect();
        let with_sentinels = self.render_with(messages, &sentinels, add_generation_prompt)?;
        let slots = split_at_sentinels(&with_sentinels, &mark, messages.len());
        slots
            .and_then(|slots| trace(&rendered, &slots, messages))
            .ok_or_else(|| {
                TokenizerError::TemplateRender(
                    "the chat template changes message contents in a way that cannot be traced \
                     back, so special-token text in them cannot be kept as text"
                        .to_string(),
                )
            })
    }

    /// Renders `messages` with `contents[i]` as message `i`'s content.
    fn render_with(
        &self,
        messages: &[ChatMessage],
        contents: &[&str],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let values: Vec<Value> = messages
            .iter()
            .zip(contents)
            .map(|(m, &content)| {
                Value::from(BTreeMap::from([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(content)),
                ]))
            })
            .collect();
        let ctx = minijinja::context! {
            messages => values,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        let (fuel, bytes) = fuel_for(
            messages,
            contents,
            self.bos_token.len() + self.eos_token.len(),
        );
        // A clone per render (shared compiled template, functions and filters: a few
        // reference counts) because fuel is an environment setting and the budget is this
        // render's.
        let mut env = self.env.clone();
        env.set_fuel(Some(fuel));
        let render_err = |e: Error| match e.kind() {
            ErrorKind::OutOfFuel => TokenizerError::TemplateTooCostly {
                fuel,
                messages: messages.len(),
                bytes,
            },
            _ => TokenizerError::TemplateRender(e.to_string()),
        };
        env.get_template("chat_template")
            .map_err(render_err)?
            .render(ctx)
            .map_err(render_err)
    }
}
