//! A lesson as one Redis stream entry: named fields, token ids as little-endian `u32`
//! bytes. Entries come from other processes, so decoding bounds and checks every field.
//!
//! Each entry carries its publisher's sequence number. A publish whose reply is lost (Redis
//! killed after it stored the entry, before the answer arrived) is sent again, so an entry
//! can be in the stream twice; readers drop what they have already had from that origin.

use std::collections::HashMap;

use redis::Value;
use specdec_engine::{CacheScope, Learned, PoolName, Tenant};

/// Prompt tokens an entry may carry at most (a history index keeps a few hundred).
pub const MAX_PROMPT_TOKENS: usize = 4096;
/// Output tokens an entry may carry at most.
pub const MAX_OUTPUT_TOKENS: usize = 1 << 17;
/// Bytes of a tenant's identity at most (the server accepts far less).
const MAX_SCOPE_BYTES: usize = 4096;

/// Why an entry was not a lesson (logged, then skipped).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// A field is absent or not a string.
    #[error("field `{0}` is missing")]
    Missing(&'static str),
    /// A field is there but malformed.
    #[error("field `{0}` is malformed")]
    Malformed(&'static str),
}

/// The fields of `learned`'s entry, the `seq`th published by replica `origin`.
pub fn encode(learned: &Learned, origin: &str, seq: u64) -> Vec<(&'static str, Vec<u8>)> {
    let scope = match &learned.scope {
        CacheScope::Shared => "shared".to_string(),
        CacheScope::Tenant(t) => format!("tenant:{}", t.id()),
        // Never published (see `Learned::scope`); spelled out so a decoder refuses it.
        CacheScope::Private => "private".to_string(),
    };
    let pool = learned.pool.as_ref().map(|p| p.as_str()).unwrap_or("");
    vec![
        ("origin", origin.as_bytes().to_vec()),
        ("seq", seq.to_string().into_bytes()),
        ("scope", scope.into_bytes()),
        ("pool", pool.as_bytes().to_vec()),
        ("prompt", ids_to_bytes(&learned.prompt)),
        ("output", ids_to_bytes(&learned.output)),
    ]
}

/// A decoded entry: who published it and what it teaches.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// The publishing replica.
    pub origin: String,
    /// Its place in what that replica published (from 0, no gaps but for drops).
    pub seq: u64,
    /// The lesson.
    pub learned: Learned,
}

/// The lesson in an entry's fields.
pub fn decode(fields: &HashMap<String, Value>) -> Result<Entry, WireError> {
    let origin = String::from_utf8(bytes(fields, "origin")?.to_vec())
        .map_err(|_| WireError::Malformed("origin"))?;
    let seq = std::str::from_utf8(bytes(fields, "seq")?)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or(WireError::Malformed("seq"))?;
    let scope = bytes(fields, "scope")?;
    if scope.len() > MAX_SCOPE_BYTES {
        return Err(WireError::Malformed("scope"));
    }
    let scope = std::str::from_utf8(scope).map_err(|_| WireError::Malformed("scope"))?;
    let scope = match scope.strip_prefix("tenant:") {
        Some(id) => CacheScope::Tenant(Tenant::new(id)),
        None if scope == "shared" => CacheScope::Shared,
        None => return Err(WireError::Malformed("scope")),
    };
    let pool =
        std::str::from_utf8(bytes(fields, "pool")?).map_err(|_| WireError::Malformed("pool"))?;
    let pool = match pool {
        "" => None,
        p => Some(PoolName::parse(p).map_err(|_| WireError::Malformed("pool"))?),
    };
    let prompt = bytes_to_ids(bytes(fields, "prompt")?, MAX_PROMPT_TOKENS)
        .ok_or(WireError::Malformed("prompt"))?;
    let output = bytes_to_ids(bytes(fields, "output")?, MAX_OUTPUT_TOKENS)
        .ok_or(WireError::Malformed("output"))?;
    Ok(Entry {
        origin,
        seq,
        learned: Learned {
            scope,
            pool,
            prompt,
            output,
        },
    })
}

fn bytes<'a>(
    fields: &'a HashMap<String, Value>,
    name: &'static str,
) -> Result<&'a [u8], WireError> {
    match fields.get(name) {
        Some(Value::BulkString(b)) => Ok(b),
        Some(Value::SimpleString(s)) => Ok(s.as_bytes()),
        Some(_) => Err(WireError::Malformed(name)),
        None => Err(WireError::Missing(name)),
    }
}

fn ids_to_bytes(ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|t| t.to_le_bytes()).collect()
}

/// `None` for a length that is not whole ids or more than `max` of them.
fn bytes_to_ids(b: &[u8], max: usize) -> Option<Vec<u32>> {
    if !b.len().is_multiple_of(4) || b.len() / 4 > max {
        return None;
    }
    let ids = b.chunks_exact(4);
    Some(
        ids.map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fields(f: Vec<(&'static str, Vec<u8>)>) -> HashMap<String, Value> {
        f.into_iter()
            .map(|(k, v)| (k.to_string(), Value::BulkString(v)))
            .collect()
    }

    proptest! {
        #[test]
        fn entries_decode_to_what_was_encoded(
            tenant in proptest::option::of("[a-z:0-9]{0,40}"),
            pool in proptest::option::of("[a-z0-9_-]{1,20}"),
            prompt in proptest::collection::vec(any::<u32>(), 0..300),
            output in proptest::collection::vec(any::<u32>(), 0..300),
            seq in any::<u64>(),
        ) {
            let learned = Learned {
                scope: tenant.map_or(CacheScope::Shared, |t| CacheScope::Tenant(Tenant::new(t))),
                pool: pool.map(|p| PoolName::parse(&p).unwrap()),
                prompt,
                output,
            };
            let entry = decode(&fields(encode(&learned, "replica-1", seq))).unwrap();
            prop_assert_eq!(entry.origin, "replica-1");
            prop_assert_eq!(entry.seq, seq);
            prop_assert_eq!(entry.learned, learned);
        }

        #[test]
        fn arbitrary_fields_never_panic(
            seq in proptest::collection::vec(any::<u8>(), 0..20),
            scope in proptest::collection::vec(any::<u8>(), 0..20),
            pool in proptest::collection::vec(any::<u8>(), 0..20),
            ids in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let f = fields(vec![
                ("origin", b"o".to_vec()),
                ("seq", seq),
                ("scope", scope),
                ("pool", pool),
                ("prompt", ids.clone()),
                ("output", ids),
            ]);
            let _ = decode(&f);
        }
    }

    #[test]
    fn a_private_lesson_or_torn_ids_are_refused() {
        let learned = Learned {
            scope: CacheScope::Private,
            pool: None,
            prompt: vec![1],
            output: vec![2],
        };
        let f = fields(encode(&learned, "o", 0));
        assert_eq!(decode(&f), Err(WireError::Malformed("scope")));
        let mut f = fields(encode(
            &Learned {
                scope: CacheScope::Shared,
                ..learned
            },
            "o",
            1,
        ));
        f.insert("output".into(), Value::BulkString(vec![1, 2, 3]));
        assert_eq!(decode(&f), Err(WireError::Malformed("output")));
        f.remove("prompt");
        assert_eq!(decode(&f), Err(WireError::Missing("prompt")));
    }
}
