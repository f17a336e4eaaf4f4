//! Hashing for token-id keys: the std SipHash is needlessly slow for keys that are
//! already well mixed, and drafting sits on the decode loop's critical path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher for keys that are `u64`s (or pairs packed into one): a multiplicative mix.
#[derive(Default, Clone, Copy)]
pub(crate) struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by our key types; kept correct for completeness.
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = mix64(self.0 ^ x);
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;

/// The murmur3 finalizer: a cheap bijective mix with good avalanche.
#[inline]
pub(crate) fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Extends an n-gram key by one token *to the left*: keys are built from the last token
/// backwards so that the keys of all suffixes of a window come out of one pass.
#[inline]
pub(crate) fn extend_left(key: u64, token: u32) -> u64 {
    mix64(key.rotate_left(17) ^ (token as u64).wrapping_add(0x9e37_79b9_7f4a_7c15))
}

/// FNV-1a over bytes: the checksum of persisted tries (detects corruption, not attacks).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
