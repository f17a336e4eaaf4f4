//! Hostile input: random bytes and mutated valid files must give errors, never panics, and
//! parsing must allocate in proportion to the input, never to a count read from it.

use crate::common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use specdec_gguf::{dequantize, GgufFile};

/// Counts what the current thread allocates while `TRACK` is set; other test threads are
/// unaffected, so the bound checked is the parser's own.
struct Counting;

thread_local! {
    static TRACK: Cell<bool> = const { Cell::new(false) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = TRACK.try_with(|t| {
        if t.get() {
            TOTAL.with(|c| c.set(c.get() + size));
            LARGEST.with(|c| c.set(c.get().max(size)));
        }
    });
}

// Counting allocations needs a global allocator, which is an unsafe trait to implement.
#[allow(unsafe_code)]
// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so this
// allocator upholds `GlobalAlloc`'s contract exactly as `System` does; `note` only touches
// thread-locals with const initialisers (`try_with`), so it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        // SAFETY: the caller's `Layout` contract is `System.alloc`'s.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        // SAFETY: the caller's `Layout` contract is `System.alloc_zeroed`'s.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new);
        // SAFETY: `p` came from this allocator, hence from `System`, with layout `l`, as
        // the caller guarantees; `new` is valid for `l`'s alignment by the same contract.
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from this allocator, hence from `System`, with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Parses `bytes`, checks the allocation bound, and if the file is accepted reads every tensor
/// through the public API as a loader would.
fn parse_checked(bytes: Vec<u8>) -> Result<(), TestCaseError> {
    let len = bytes.len();
    TOTAL.with(|c| c.set(0));
    LARGEST.with(|c| c.set(0));
    TRACK.with(|t| t.set(true));
    let parsed = GgufFile::from_bytes(bytes);
    TRACK.with(|t| t.set(false));
    let (total, largest) = (TOTAL.with(Cell::get), LARGEST.with(Cell::get));
    // Metadata values are 32-byte enums made from as little as one input byte, hence ~32x;
    // the constant covers error messages and small maps.
    let limit = 64 * len + (64 << 10);
    prop_assert!(
        total <= limit,
        "parsing {len} bytes allocated {total} in all (largest {largest})"
    );
    if let Ok(f) = parsed {
        for t in &f.tensors {
            let data = f.tensor_data(t);
            prop_assert_eq!(data.len(), t.size);
            // A loader would size the output from the shape; bound it, the bytes are in the
            // file so this is small anyway.
            let n = t.elements();
            if t.ty.can_dequantize() && n <= 1 << 20 {
                let mut out = vec![0f32; n as usize];
                dequantize(t.ty, data, &mut out).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
        for v in f.metadata.values() {
            let _ = (v.as_u64(), v.as_f64(), v.as_str(), v.type_name());
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Mutation {
    FlipBit(usize, u8),
    SetByte(usize, u8),
    Truncate(usize),
    /// Overwrite the n-th count/length field (modulo how many there are).
    Length(usize, u64),
    Insert(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let huge = prop_oneof![
        Just(u64::MAX),
        Just(u64::MAX / 2),
        Just(1u64 << 32),
        Just(1u64 << 62),
        Just(0u64),
        0u64..100_000,
    ];
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Mutation::SetByte(i, v)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), huge).prop_map(|(i, v)| Mutation::Length(i, v)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
    ]
}

fn apply(bytes: &mut Vec<u8>, fields: &[usize], m: &Mutation) {
    let n = bytes.len().max(1);
    match *m {
        Mutation::FlipBit(i, b) => {
            if let Some(x) = bytes.get_mut(i % n) {
                *x ^= 1 << b;
            }
        }
        Mutation::SetByte(i, v) => {
            if let Some(x) = bytes.get_mut(i % n) {
                *x = v;
            }
        }
        Mutation::Truncate(i) => bytes.truncate(i % n),
        Mutation::Length(i, v) => {
            let at = fields[i % fields.len()];
            if at + 8 <= bytes.len() {
                bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        Mutation::Insert(i, ref v) => {
            let at = (i % n).min(bytes.len());
            bytes.splice(at..at, v.iter().copied());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        parse_checked(bytes)?;
    }

    /// Random bytes behind a valid magic and version, so the parser gets past the first check.
    #[test]
    fn random_bodies_never_panic(
        version in 2u32..4,
        body in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut bytes = b"GGUF".to_vec();
        bytes.extend(version.to_le_bytes());
        bytes.extend(body);
        parse_checked(bytes)?;
    }

    #[test]
    fn mutated_files_never_panic(mutations in proptest::collection::vec(mutation(), 1..5)) {
        let built = common::sample().build_with_fields();
        let mut bytes = built.bytes;
        for m in &mutations {
            apply(&mut bytes, &built.length_fields, m);
        }
        parse_checked(bytes)?;
    }
}

/// Every count and length field set to each huge value, exhaustively: these are the fields
/// that would drive an allocation if they were trusted.
#[test]
fn huge_length_fields_are_errors() {
    let built = common::sample().build_with_fields();
    for &at in &built.length_fields {
        for v in [
            u64::MAX,
            u64::MAX / 24 + 1,
            1 << 40,
            built.bytes.len() as u64,
        ] {
            let mut bytes = built.bytes.clone();
            bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
            parse_checked(bytes.clone()).unwrap();
            assert!(
                GgufFile::from_bytes(bytes).is_err(),
                "length {v} at byte {at} accepted"
            );
        }
    }
}

/// A large file of one-byte array elements: the worst ratio of memory to input, still bounded.
#[test]
fn large_u8_array_stays_proportional() {
    let v = specdec_gguf::Value::Array(vec![specdec_gguf::Value::U8(7); 100_000]);
    let bytes = common::Builder::default().kv("big", v).build();
    parse_checked(bytes).unwrap();
}

#[test]
fn bad_alignment_error_does_not_print_the_value() {
    let v = specdec_gguf::Value::Array(vec![common::s("x"); 10_000]);
    let bytes = common::sample().kv("general.alignment", v).build();
    let e = GgufFile::from_bytes(bytes).unwrap_err().to_string();
    assert!(e.len() < 200, "error message of {} bytes", e.len());
}
