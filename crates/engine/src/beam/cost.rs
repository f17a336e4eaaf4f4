//! What a forward costs by its row count, learned from timed forwards: what N and gamma
//! are chosen from.

/// Largest row count tracked; larger forwards are priced by extrapolation.
const MAX_ROWS: usize = 1024;

/// Milliseconds per forward by row count (an EMA per count), for one model.
#[derive(Clone, Debug)]
pub struct RowCost {
    ms: Vec<Option<f64>>,
    frozen: bool,
}

impl Default for RowCost {
    fn default() -> Self {
        RowCost {
            ms: vec![None; MAX_ROWS + 1],
            frozen: false,
        }
    }
}

impl RowCost {
    /// A cost that never learns: the prior's shape whatever the timings (tests, fakes).
    pub fn frozen() -> Self {
        RowCost {
            frozen: true,
            ..RowCost::default()
        }
    }

    /// Records a forward of `rows` rows that took `ms` milliseconds (an EMA per row count,
    /// counts past the largest tracked pooled with it); ignored when frozen.
    pub fn observe(&mut self, rows: usize, ms: f64) {
        if self.frozen || rows == 0 || !ms.is_finite() {
            return;
        }
        let e = &mut self.ms[rows.min(MAX_ROWS)];
        *e = Some(e.map_or(ms, |old| 0.8 * old + 0.2 * ms));
    }

    /// The milliseconds observed for forwards of exactly `rows` rows (an EMA), if any.
    pub fn observed(&self, rows: usize) -> Option<f64> {
        self.ms.get(rows).copied().flatten()
    }

    /// The expected milliseconds of a forward over `rows` rows: interpolated between the
    /// nearest observed counts, extrapolated past the largest along the last slope, or
    /// `None` before anything was observed.
    pub fn ms(&self, rows: usize) -> Option<f64> {
        let rows = rows.clamp(1, MAX_ROWS);
        if let Some(m) = self.ms[rows] {
            return Some(m);
        }
        let below = (1..rows).rev().find_map(|r| self.ms[r].map(|m| (r, m)));
        let above = (rows + 1..=MAX_ROWS).find_map(|r| self.ms[r].map(|m| (r, m)));
        match (below, above) {
            (Some((r0, m0)), Some((r1, m1))) => {
                Some(m0 + (m1 - m0) * (rows - r0) as f64 / (r1 - r0) as f64)
            }
            // Past the largest: grow as rows do beyond it (compute bound).
            (Some((r0, m0)), None) => Some(m0 * (rows as f64 / r0 as f64)),
            // Below the smallest: no cheaper than a fixed share of it.
            (None, Some((r1, m1))) => Some(m1 * prior(rows) / prior(r1)),
            (None, None) => None,
        }
    }

    /// Relative cost with the prior shape of this runtime (1.0 at one row) when nothing
    /// is known.
    pub fn estimate(&self, rows: usize, one_row_ms: f64) -> f64 {
        self.ms(rows).unwrap_or_else(|| one_row_ms * prior(rows))
    }
}

/// This runtime's measured shape: rows are nearly free up to about 8, then cost about
/// 13% of a one-row forward each.
fn prior(rows: usize) -> f64 {
    1.0 + 0.02 * rows.min(8) as f64 + 0.13 * rows.saturating_sub(8) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_and_extrapolates() {
        let mut c = RowCost::default();
        assert_eq!(c.ms(5), None);
        c.observe(10, 10.0);
        c.observe(20, 20.0);
        assert_eq!(c.ms(15), Some(15.0));
        assert_eq!(c.ms(40), Some(40.0));
        assert!(c.ms(1).unwrap() < 10.0);
        let mut f = RowCost::frozen();
        f.observe(10, 10.0);
        assert_eq!(f.ms(10), None);
    }
}
