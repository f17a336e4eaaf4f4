//! What a forward costs: learned from the verify forwards actually timed, by row count
//! and context length.

/// Largest forward (rows, all sequences of a batch) the cost curve tracks; larger ones
/// (a wide beam search's rounds) are priced along the slope at the largest.
const MAX_NODES: usize = 1024;

/// Context lengths separating the cost curves: attention makes every extra row cost
/// more the longer the context it attends to.
const CTX_EDGES: [usize; 4] = [256, 512, 1024, 2048];
const CTX_BUCKETS: usize = CTX_EDGES.len() + 1;

fn ctx_bucket(ctx: usize) -> usize {
    CTX_EDGES.iter().take_while(|&&e| ctx >= e).count()
}

/// Whether `points` are a measured cost curve: at least two (rows, milliseconds) points
/// in increasing rows, the first at one row, every time finite and positive.
pub fn is_curve(points: &[(usize, f64)]) -> bool {
    points.len() >= 2
        && points[0].0 == 1
        && points.windows(2).all(|w| w[0].0 < w[1].0)
        && points.iter().all(|p| p.1.is_finite() && p.1 > 0.0)
}

/// Milliseconds of a forward over `n` rows on the curve `points` (see [`is_curve`]):
/// linear between the measured sizes, beyond the largest along its last segment, never
/// below zero.
pub fn curve_ms(points: &[(usize, f64)], n: usize) -> f64 {
    let i = points
        .partition_point(|&(m, _)| m < n)
        .clamp(1, points.len() - 1);
    let ((n0, t0), (n1, t1)) = (points[i - 1], points[i]);
    let f = (n as f64 - n0 as f64) / (n1 - n0) as f64;
    (t0 + f * (t1 - t0)).max(0.0)
}

/// Forward cost by row count and context length, learned from timed forwards.
///
/// Ratios need no one-row timing: where none ran in a context bucket (a full batch never
/// runs one), the one-row cost is estimated from the smallest timed count. Before, the
/// model fell back to its prior shape there, which priced a ninth row in a batch of eight
/// at a third of its cost on the 1.5B with AMX tiles (8 rows 78 ms, 9 rows 92 ms: a new
/// row group), and speculation at concurrency 8 ran 9% below plain batching.
#[derive(Clone, Debug)]
pub struct CostModel {
    /// EMA of milliseconds per forward over n rows (index n) per context bucket, `None`
    /// until observed.
    ms: Vec<[Option<f64>; CTX_BUCKETS]>,
    /// Per context bucket, the row counts with a time in `ms`, ascending.
    known: [Vec<usize>; CTX_BUCKETS],
    /// Per context bucket, how far the observed ratios depart from the prior on average
    /// (1.0 until observed). Kept up to date by `observe`, because `relative` is asked
    /// for every candidate draft size of every step.
    scale: [f64; CTX_BUCKETS],
    /// Never learns: the prior shape stays (see [`CostModel::frozen`]).
    frozen: bool,
    /// The batch the prior shape prices a request's drafts in (see
    /// [`CostModel::frozen_in_batch`]); 1: alone.
    batch: usize,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            ms: vec![[None; CTX_BUCKETS]; MAX_NODES + 1],
            known: Default::default(),
            scale: [1.0; CTX_BUCKETS],
            frozen: false,
            batch: 1,
        }
    }
}

/// The shape measured for this runtime until observed: each extra row costs about 13% of
/// a one-row forward at short context and more at long context (21% at 1000 tokens).
fn prior(n: usize, bucket: usize) -> f64 {
    let ctx = [128.0, 384.0, 768.0, 1536.0, 3072.0][bucket];
    1.0 + (0.12 + 0.0001 * ctx) * (n as f64 - 1.0)
}

impl CostModel {
    /// A cost model that keeps the prior shape of this runtime and ignores timings: draft
    /// sizes then depend on acceptance alone, so runs are reproducible whatever the
    /// machine's noise (tests; targets whose timing means nothing, like a fake).
    pub fn frozen() -> Self {
        CostModel {
            frozen: true,
            ..CostModel::default()
        }
    }

    /// [`CostModel::frozen`], pricing a request's drafts as one member of a full batch of
    /// `batch` requests: its share of the batch's forward is what one token costs it, and
    /// every node it drafts adds a row to that forward. Alone, a drafted node costs 13% of
    /// a token; among eight members each with one row, about 60% of a member's share
    /// (eight rows cost about two one-row forwards). A relaxed request sized alone kept
    /// drafting 3-4 nodes a step at concurrency 8, and LASER's relaxed knowledge ran at
    /// 0.82x of plain batching on the 1.5B.
    pub fn frozen_in_batch(batch: usize) -> Self {
        CostModel {
            batch: batch.max(1),
            ..CostModel::frozen()
        }
    }

    /// The prior shape for a member of this model's batch (see
    /// [`CostModel::frozen_in_batch`]): its own share of a batch of single rows, plus the
    /// batch's whole added cost for its other rows, over that share.
    fn prior_in_batch(&self, rows: usize, bucket: usize) -> f64 {
        let b = self.batch;
        if b <= 1 {
            return prior(rows, bucket);
        }
        let base = prior(b, bucket);
        1.0 + (prior(b + rows - 1, bucket) - base) * b as f64 / base
    }

    /// A cost model that prices forwards on a measured curve and ignores timings (an
    /// offline replay, whose target takes no time): `points` are (rows, milliseconds) of
    /// forwards measured after one prefix (see [`is_curve`]). Rows are priced by
    /// [`curve_ms`], every context alike (one curve was measured). `None` when `points`
    /// are not a curve.
    pub fn measured(points: &[(usize, f64)]) -> Option<Self> {
        if !is_curve(points) {
            return None;
        }
        let mut m = CostModel::frozen();
        for n in 1..=MAX_NODES {
            m.set(n, [Some(curve_ms(points, n).max(points[0].1)); CTX_BUCKETS]);
        }
        Some(m)
    }

    fn set(&mut self, rows: usize, ms: [Option<f64>; CTX_BUCKETS]) {
        for (b, m) in ms.into_iter().enumerate() {
            if m.is_some() {
                if let Err(i) = self.known[b].binary_search(&rows) {
                    self.known[b].insert(i, rows);
                }
            }
        }
        self.ms[rows] = ms;
    }

    /// Records one forward over `rows` rows attending to `ctx` tokens on average that
    /// took `ms`.
    pub fn observe(&mut self, rows: usize, ctx: usize, ms: f64) {
        if self.frozen || rows == 0 || rows > MAX_NODES || !ms.is_finite() || ms <= 0.0 {
            return;
        }
        let b = ctx_bucket(ctx);
        let mut e = self.ms[rows];
        e[b] = Some(e[b].map_or(ms, |old| 0.8 * old + 0.2 * ms));
        self.set(rows, e);
        self.rescale(b);
    }

    /// Recomputes bucket `b`'s departure from the prior over its timed counts.
    fn rescale(&mut self, b: usize) {
        self.scale[b] = self.one_row_ms_in(b).map_or(1.0, |base| {
            let (mut sum, mut count) = (0.0, 0.0);
            for &n in self.known[b].iter().filter(|&&n| n >= 2) {
                let m = self.ms[n][b].expect("known row counts have a time");
                sum += (m / base) / prior(n, b);
                count += 1.0;
            }
            if count > 0.0 {
                sum / count
            } else {
                1.0
            }
        });
    }

    /// Milliseconds of a one-row forward in context bucket `b`: observed, or else
    /// estimated from the smallest count timed there along the prior's shape; `None`
    /// before any timing there.
    fn one_row_ms_in(&self, b: usize) -> Option<f64> {
        if let Some(m) = self.ms[1][b] {
            return Some(m).filter(|&m| m > 0.0);
        }
        let &n = self.known[b].first()?;
        let m = self.ms[n][b].expect("known row counts have a time");
        Some(m / prior(n, b)).filter(|&m| m > 0.0)
    }

    /// Milliseconds of a one-row forward at context `ctx` (see `one_row_ms_in`).
    pub fn one_row_ms(&self, ctx: usize) -> Option<f64> {
        self.one_row_ms_in(ctx_bucket(ctx))
    }

    /// Relative cost of a forward over `rows` rows at context `ctx` (1.0 at one row): the
    /// observed ratio where known, else the prior scaled by how far this context's
    /// observations depart from it; the prior before any observation there.
    pub fn relative(&self, rows: usize, ctx: usize) -> f64 {
        if rows > MAX_NODES {
            // Past the largest tracked: compute bound, each row as dear as the average one.
            return self.relative(MAX_NODES, ctx) * rows as f64 / MAX_NODES as f64;
        }
        let rows = rows.max(1);
        let b = ctx_bucket(ctx);
        let Some(base) = self.one_row_ms_in(b) else {
            return self.prior_in_batch(rows, b);
        };
        if let Some(m) = self.ms[rows][b] {
            return (m / base).max(1.0);
        }
        (prior(rows, b) * self.scale[b]).max(1.0)
    }
}

impl CostModel {
    /// Milliseconds of a forward over `rows` rows at context `ctx`, once a forward at that
    /// context was timed.
    pub fn ms(&self, rows: usize, ctx: usize) -> Option<f64> {
        Some(self.one_row_ms(ctx)? * self.relative(rows, ctx))
    }

    /// The milliseconds observed (an EMA) for forwards of exactly `rows` rows at context
    /// `ctx`, if any ran.
    pub fn observed(&self, rows: usize, ctx: usize) -> Option<f64> {
        self.ms.get(rows).and_then(|m| m[ctx_bucket(ctx)])
    }
}

/// What the members of a batch planned so far put in the next forward.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchLoad {
    /// Rows of the forward.
    pub rows: usize,
    /// Context lengths the rows attend to, summed.
    pub ctx_sum: usize,
}

impl BatchLoad {
    /// One decode step at context `ctx`: its pending token plus `nodes` draft nodes.
    pub fn add(&mut self, nodes: usize, ctx: usize) {
        self.rows += 1 + nodes;
        self.ctx_sum += (1 + nodes) * ctx;
    }

    /// Mean context per row.
    pub fn mean_ctx(&self) -> usize {
        self.ctx_sum / self.rows.max(1)
    }
}
