//! A bound on the JSON values of a request body, checked in one pass that keeps nothing
//! before the body is parsed into types. Parsing builds a value for each JSON value, many
//! times its bytes: a 30 MB body of token ids took 530 MB to parse (each id buffered by
//! an untagged enum), a million empty messages a struct each. A request needs few values
//! (its prompt's tokens at most, a few per message), so bodies with more are refused here,
//! at the cost of reading them once.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// A body over its budget, and the top-level field it was reading when the budget ran
/// out (none when the body is not an object).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Exceeded {
    pub field: Option<String>,
}

/// Whether `body` holds at most `budget` JSON values: each string, number, boolean, null,
/// list and object counts one, and so does each key of an object. Stops reading once over,
/// so the pass costs at most `budget` values. A body that is not JSON passes: the typed
/// parse that follows says what is wrong with it.
pub(crate) fn within(body: &[u8], budget: usize) -> Result<(), Exceeded> {
    let mut left = Left {
        values: budget,
        out: false,
        field: None,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = Top(&mut left).deserialize(&mut de);
    if left.out {
        Err(Exceeded { field: left.field })
    } else {
        Ok(())
    }
}

struct Left {
    values: usize,
    /// Whether the budget ran out (rather than the JSON being malformed).
    out: bool,
    field: Option<String>,
}

impl Left {
    fn take<E: serde::de::Error>(&mut self) -> Result<(), E> {
        if self.values == 0 {
            self.out = true;
            return Err(E::custom("the body holds too many JSON values"));
        }
        self.values -= 1;
        Ok(())
    }
}

/// The whole body: an object's values are counted under their key.
struct Top<'a>(&'a mut Left);

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.take()?;
        while let Some(key) = map.next_key::<String>()? {
            let counted = self.0.take();
            if let Err(e) = counted.and_then(|()| map.next_value_seed(Count(&mut *self.0))) {
                if self.0.out {
                    self.0.field = Some(key);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Request structs also parse from a list of their fields in order, so a list is
    /// counted too.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Count(self.0).visit_seq(seq)
    }
}

/// Any value, counted with everything in it.
struct Count<'a>(&'a mut Left);

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.0.take()
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.0.take()
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.0.take()
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.0.take()
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.0.take()
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.take()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.take()?;
        while seq.next_element_seed(Count(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.take()?;
        while map.next_key_seed(Count(&mut *self.0))?.is_some() {
            map.next_value_seed(Count(&mut *self.0))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_counted_with_keys_and_containers() {
        // {} 1, "a" 1, [1,2] 3, "b" 1, {"c": null} 3: 9 in all.
        let body = br#"{"a": [1, 2], "b": {"c": null}}"#;
        assert_eq!(within(body, 9), Ok(()));
        let over = within(body, 8).unwrap_err();
        assert_eq!(over.field.as_deref(), Some("b"));
        assert_eq!(within(b"[1, 2, 3]", 4), Ok(()));
        assert_eq!(within(b"[1, 2, 3]", 3), Err(Exceeded { field: None }));
    }

    #[test]
    fn malformed_bodies_are_left_to_the_typed_parse() {
        for body in [&b"{not json"[..], b"", b"\"text\"", b"{\"a\": [1, 2"] {
            assert_eq!(within(body, 100), Ok(()), "{body:?}");
        }
    }
}
