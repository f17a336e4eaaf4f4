//! Row-wise float operations of the forward.
//!
//! Each function computes one row with a fixed operation order that depends only on the
//! row's length, never on how many rows share the forward: that is what keeps the whole
//! forward batch-invariant. Reductions use eight interleaved partial sums (so LLVM can keep
//! them in one vector register) combined in a fixed tree.

use crate::config::RopeStyle;

const LANES: usize = 8;

/// Dot product with a fixed reduction order.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f32; LANES];
    let chunks = a.len() / LANES;
    for c in 0..chunks {
        let (x, y) = (&a[c * LANES..][..LANES], &b[c * LANES..][..LANES]);
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0f32;
    for i in chunks * LANES..a.len() {
        tail += a[i] * b[i];
    }
    reduce(acc) + tail
}

#[inline]
fn reduce(acc: [f32; LANES]) -> f32 {
    let a = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (a[0] + a[2]) + (a[1] + a[3])
}

/// out = x / rms(x) * w.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ms = dot(x, x) / x.len() as f32;
    let scale = 1.0 / (ms + eps).sqrt();
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = xi * scale * wi;
    }
}

/// Precomputed RoPE rotations, one row of (cos, sin) pairs per position, grown on demand.
pub struct Rope {
    style: RopeStyle,
    head_dim: usize,
    inv_freq: Vec<f64>,
    table: std::sync::RwLock<Vec<f32>>,
}

impl Rope {
    /// `factors` divides each frequency (Llama 3's `rope_freqs` tensor), if present.
    pub fn new(
        style: RopeStyle,
        head_dim: usize,
        rope_dims: usize,
        base: f32,
        factors: Option<&[f32]>,
    ) -> Self {
        let half = rope_dims / 2;
        let inv_freq = (0..half)
            .map(|i| {
                let f = (base as f64).powf(-((2 * i) as f64) / rope_dims as f64);
                f / factors.and_then(|fs| fs.get(i)).map_or(1.0, |&x| x as f64)
            })
            .collect();
        Rope {
            style,
            head_dim,
            inv_freq,
            table: std::sync::RwLock::new(Vec::new()),
        }
    }

    fn ensure(&self, positions: usize) {
        let half = self.inv_freq.len();
        if self.table.read().expect("rope lock").len() >= positions * half * 2 {
            return;
        }
        let mut t = self.table.write().expect("rope lock");
        let have = t.len() / (half * 2);
        let want = positions.max(have * 2).max(256);
        for p in have..want {
            for &f in &self.inv_freq {
                let a = p as f64 * f;
                t.push(a.cos() as f32);
                t.push(a.sin() as f32);
            }
        }
    }

    /// The rotations of positions below `positions`, read once for a whole forward.
    pub fn table(&self, positions: usize) -> RopeTable<'_> {
        self.ensure(positions);
        RopeTable {
            rope: self,
            table: self.table.read().expect("rope lock"),
        }
    }
}

/// A [`Rope`]'s rotations, held for the rows of one forward.
pub struct RopeTable<'a> {
    rope: &'a Rope,
    table: std::sync::RwLockReadGuard<'a, Vec<f32>>,
}

impl RopeTable<'_> {
    /// Rotates every head of `x` (heads × head_dim) in place for position `pos`, which
    /// must be below the `positions` the table was taken for.
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        let half = self.rope.inv_freq.len();
        let cs = &self.table[pos * half * 2..][..half * 2];
        // One loop per style, so each vectorizes (a style test per element kept the
        // interleaved one scalar: 2.6x slower); the same operations per element.
        let rotate = |x0: f32, x1: f32, cs: &[f32]| {
            let (c, s) = (cs[0], cs[1]);
            (x0 * c - x1 * s, x0 * s + x1 * c)
        };
        for head in x.chunks_exact_mut(self.rope.head_dim) {
            match self.rope.style {
                RopeStyle::Interleaved => {
                    let pairs = head[..2 * half].chunks_exact_mut(2);
                    for (pair, cs) in pairs.zip(cs.chunks_exact(2)) {
                        (pair[0], pair[1]) = rotate(pair[0], pair[1], cs);
                    }
                }
                RopeStyle::NeoX => {
                    let (lo, hi) = head.split_at_mut(half);
                    for ((a, b), cs) in lo.iter_mut().zip(hi).zip(cs.chunks_exact(2)) {
                        (*a, *b) = rotate(*a, *b, cs);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_f64_closely() {
        let a: Vec<f32> = (0..77).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..77).map(|i| (i as f32 * 0.11).cos()).collect();
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        assert!((dot(&a, &b) as f64 - exact).abs() < 1e-4);
    }

    /// `apply` against the pairs written out one by one, bit for bit: both styles, a
    /// partial rotation (the dimensions past `rope_dims` untouched) and several heads.
    #[test]
    fn apply_matches_the_pairwise_definition() {
        for style in [RopeStyle::Interleaved, RopeStyle::NeoX] {
            for rope_dims in [8, 6] {
                let rope = Rope::new(style, 8, rope_dims, 10000.0, None);
                let table = rope.table(64);
                let half = rope_dims / 2;
                let x: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin()).collect();
                for pos in [0, 1, 17, 63] {
                    let mut got = x.clone();
                    table.apply(&mut got, pos);
                    let mut want = x.clone();
                    let cs = &table.table[pos * half * 2..][..half * 2];
                    for head in want.chunks_exact_mut(8) {
                        for i in 0..half {
                            let (a, b) = match style {
                                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                                RopeStyle::NeoX => (i, i + half),
                            };
                            let (x0, x1, c, s) = (head[a], head[b], cs[2 * i], cs[2 * i + 1]);
                            head[a] = x0 * c - x1 * s;
                            head[b] = x0 * s + x1 * c;
                        }
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{style:?} dims {rope_dims} pos {pos}"
                    );
                }
            }
        }
    }

    #[test]
    fn rope_at_zero_is_identity_and_preserves_norm() {
        for style in [RopeStyle::Interleaved, RopeStyle::NeoX] {
            let rope = Rope::new(style, 8, 8, 10000.0, None);
            let table = rope.table(1001);
            let orig: Vec<f32> = (0..16).map(|i| i as f32 - 3.0).collect();
            let mut x = orig.clone();
            table.apply(&mut x, 0);
            assert_eq!(x, orig);
            table.apply(&mut x, 1000);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = x.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
        }
    }
}
