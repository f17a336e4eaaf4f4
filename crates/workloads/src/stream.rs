//! Streaming over the elements of a top-level JSON array, one element in memory at a time.
//!
//! ShareGPT's file is 125 MB and ends mid-record. Parsing it whole would fail at the cut and
//! would hold everything in memory; instead each element is handed to a callback as soon as it
//! is complete, the callback can stop the scan early (once `limit` records are found), and an
//! end-of-input inside an element is reported as a truncation rather than an error.

use std::fmt;
use std::io::Read;
use std::marker::PhantomData;
use std::ops::ControlFlow;

use serde::de::{DeserializeOwned, SeqAccess, Visitor};
use serde::Deserializer as _;

/// How a scan ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The closing `]` was reached.
    Closed,
    /// The input ended inside the array; every element before the cut was delivered.
    Truncated,
    /// The callback asked to stop.
    Stopped,
}

/// Elements delivered to the callback, and how the scan ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scan {
    pub elements: usize,
    pub end: End,
}

/// A malformed element (not a cut): which element, and serde_json's line/column message.
#[derive(Debug)]
pub(crate) struct StreamError {
    pub element: usize,
    pub error: serde_json::Error,
}

struct ArrayVisitor<'f, T, F> {
    f: &'f mut F,
    elements: usize,
    stopped: bool,
    _t: PhantomData<T>,
}

impl<'de, T, F> Visitor<'de> for &mut ArrayVisitor<'_, T, F>
where
    T: DeserializeOwned,
    F: FnMut(T) -> ControlFlow<()>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<T>()? {
            self.elements += 1;
            if (self.f)(item).is_break() {
                self.stopped = true;
                return Ok(());
            }
        }
        Ok(())
    }
}

/// Feeds each element of the JSON array in `reader` to `f`, in order. Pass a buffered reader:
/// serde_json reads byte by byte.
pub(crate) fn for_each_element<T, F>(reader: impl Read, mut f: F) -> Result<Scan, StreamError>
where
    T: DeserializeOwned,
    F: FnMut(T) -> ControlFlow<()>,
{
    let mut visitor = ArrayVisitor {
        f: &mut f,
        elements: 0,
        stopped: false,
        _t: PhantomData,
    };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let result = (&mut de).deserialize_seq(&mut visitor);
    let elements = visitor.elements;
    // After an early stop serde_json complains that the array did not end; that is expected.
    let end = match result {
        _ if visitor.stopped => End::Stopped,
        Ok(()) => End::Closed,
        Err(e) if e.is_eof() => End::Truncated,
        Err(error) => {
            return Err(StreamError {
                element: elements + 1,
                error,
            })
        }
    };
    Ok(Scan { elements, end })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Item {
        id: String,
    }

    fn ids(json: &str, stop_after: usize) -> (Vec<String>, Result<Scan, StreamError>) {
        let mut got = Vec::new();
        let scan = for_each_element(json.as_bytes(), |it: Item| {
            got.push(it.id);
            if got.len() == stop_after {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        (got, scan)
    }

    #[test]
    fn stops_cleanly_at_a_cut_inside_a_record() {
        let json = "[\n {\"id\": \"a\", \"x\": [1]},\n {\"id\": \"b\"},\n {\"id\": \"c\", \"x\": \"unterminated";
        let (got, scan) = ids(json, usize::MAX);
        assert_eq!(got, ["a", "b"]);
        let scan = scan.unwrap();
        assert_eq!((scan.elements, scan.end), (2, End::Truncated));
        // Cut right after a comma, and inside a key.
        for json in ["[{\"id\": \"a\"},", "[{\"id\": \"a\"}, {\"i"] {
            let (got, scan) = ids(json, usize::MAX);
            assert_eq!(
                (got.len(), scan.unwrap().end),
                (1, End::Truncated),
                "{json}"
            );
        }
    }

    #[test]
    fn closed_arrays_and_early_stops() {
        let (got, scan) = ids("[{\"id\": \"a\"}, {\"id\": \"b\"}]", usize::MAX);
        assert_eq!((got.len(), scan.unwrap().end), (2, End::Closed));
        let (got, scan) = ids("[{\"id\": \"a\"}, {\"id\": \"b\"}, {\"id\": ", 1);
        assert_eq!(
            (got, scan.unwrap().end),
            (vec!["a".to_string()], End::Stopped)
        );
        let (got, scan) = ids("[]", usize::MAX);
        assert_eq!((got.len(), scan.unwrap().end), (0, End::Closed));
    }

    #[test]
    fn malformed_elements_are_errors_naming_the_element() {
        let (_, scan) = ids("[{\"id\": \"a\"},\n {\"id\": 7}]", usize::MAX);
        let err = scan.unwrap_err();
        assert_eq!(err.element, 2);
        assert!(err.error.to_string().contains("line 2"), "{}", err.error);
        let (_, scan) = ids("[{\"id\": \"a\"} {\"id\": \"b\"}]", usize::MAX);
        assert_eq!(scan.unwrap_err().element, 2);
    }
}
