//! Measures `draft()` (and `observe()`) time on a ~4000-token context.
//!
//! `cargo run --release -p specdec-drafters --example draft_bench`
//!
//! The text is synthetic: Zipf-distributed tokens from a 32k vocabulary, with spans copied
//! from two 2000-token references and from earlier text, so that drafters find matches as
//! they would on grounded generation. The shared trie is warmed with 1500 past outputs.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use specdec_drafters::*;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Zipf-like token id: frequent ids small.
    fn token(&mut self) -> u32 {
        ((32000f64).powf(self.unit()) as u32).min(31999)
    }
}

/// Text that copies spans from `sources` (prob. `p_copy` per span) or samples fresh tokens.
fn text(rng: &mut Rng, len: usize, sources: &[&[u32]], p_copy: f64) -> Vec<u32> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let src = sources[(rng.next() % sources.len() as u64) as usize];
        if rng.unit() < p_copy && src.len() > 40 {
            let start = (rng.next() % (src.len() as u64 - 40)) as usize;
            let n = 4 + (rng.next() % 30) as usize;
            out.extend_from_slice(&src[start..start + n]);
        } else {
            for _ in 0..1 + rng.next() % 8 {
                out.push(rng.token());
            }
        }
    }
    out.truncate(len);
    out
}

fn main() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let r1: Vec<u32> = (0..2000).map(|_| rng.token()).collect();
    let r2: Vec<u32> = (0..2000).map(|_| rng.token()).collect();
    let refs = vec![r1.clone(), r2.clone()];
    let prompt = text(&mut rng, 3000, &[&r1, &r2], 0.3);
    let output = text(&mut rng, 1000, &[&r1, &r2, &prompt], 0.5);

    let trie = Arc::new(Mutex::new(Trie::default()));
    let history = Arc::new(Mutex::new(HistoryIndex::default()));
    let t0 = Instant::now();
    for _ in 0..1500 {
        let past = text(&mut rng, 300, &[&r1, &r2], 0.3);
        let mut d = TrieDrafter::new(trie.clone(), TrieDrafterConfig::default());
        d.begin(&[1, 2], &[]);
        d.observe(&past);
        d.end(&past);
        history.lock().unwrap().add_request(&[1, 2], &past);
    }
    let h = history.lock().unwrap();
    println!(
        "warm trie: {} nodes, history: {} tokens in {} MiB, in {:.2} s",
        trie.lock().unwrap().len(),
        h.tokens(),
        h.memory_bytes() >> 20,
        t0.elapsed().as_secs_f64()
    );
    drop(h);

    let drafters: Vec<Box<dyn Drafter>> = vec![
        Box::new(ReferenceDrafter::default()),
        Box::new(ReferenceDrafter::prompt_only()),
        Box::new(SuffixDrafter::default()),
        Box::new(TrieDrafter::new(trie.clone(), TrieDrafterConfig::default())),
        Box::new(HistoryDrafter::new(
            history.clone(),
            HistoryDrafterConfig::default(),
        )),
        Box::new(MixDrafter::auto(Some(trie.clone()), Some(history.clone()))),
    ];
    println!("context 3000 -> 4000 tokens; steps commit the greedily accepted path + 1");
    println!(
        "{:<10} {:>6} {:>11} {:>11} {:>11} {:>12} {:>10}",
        "drafter", "budget", "draft mean", "draft p50", "draft p99", "observe/tok", "begin"
    );
    for mut d in drafters {
        for budget in [8, 32] {
            let t = Instant::now();
            d.begin(&prompt, &refs);
            let begin = t.elapsed();
            let mut ctx = prompt.clone();
            let mut times = Vec::new();
            let mut observe = 0.0;
            let mut pos = 0;
            let mut step = 0usize;
            let mut nodes = 0usize;
            while pos < output.len() {
                let t = Instant::now();
                let tree = d.draft(&ctx, budget);
                times.push(t.elapsed().as_secs_f64() * 1e6);
                std::hint::black_box(&tree);
                // Greedy verification against the true text: walk the tree along it.
                let mut at = 0;
                let mut accepted = 0;
                while let Some(i) = output
                    .get(pos + accepted)
                    .and_then(|&t| tree.child_with(Some(at), t))
                {
                    at = i;
                    accepted += 1;
                }
                nodes += tree.drafted();
                step += 1;
                let c = &output[pos..(pos + accepted + 1).min(output.len())];
                let t = Instant::now();
                d.observe(c);
                observe += t.elapsed().as_secs_f64() * 1e6;
                ctx.extend_from_slice(c);
                pos += c.len();
            }
            d.end(&output);
            let mean = times.iter().sum::<f64>() / times.len() as f64;
            times.sort_by(f64::total_cmp);
            let p = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
            println!(
                "{:<10} {:>6} {:>9.2}us {:>9.2}us {:>9.2}us {:>10.2}us {:>8.2}ms {:>6.2} {:>7.1}",
                d.name(),
                budget,
                mean,
                p(0.5),
                p(0.99),
                observe / output.len() as f64,
                begin.as_secs_f64() * 1e3,
                output.len() as f64 / step as f64,
                nodes as f64 / step as f64
            );
        }
    }
    history_at_cap(&mut rng, &r1, &r2);
}

/// Fills a history index with the default cap three times over: insert time (the largest
/// is a drop of the older generation) and memory per million tokens held.
fn history_at_cap(rng: &mut Rng, r1: &[u32], r2: &[u32]) {
    let mut h = HistoryIndex::default();
    let cap = h.config().max_tokens;
    let mut times = Vec::new();
    let mut inserted = 0;
    let mut peak_per_m = 0f64;
    while inserted < 3 * cap {
        let prompt = text(rng, 256, &[r1, r2], 0.3);
        let output = text(rng, 300, &[r1, r2, &prompt], 0.3);
        let t = Instant::now();
        h.add_request(&prompt, &output);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        inserted += prompt.len() + output.len();
        let per_m = h.memory_bytes() as f64 / h.tokens() as f64; // bytes per token
        peak_per_m = peak_per_m.max(per_m);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "history at its cap of {cap} tokens ({} inserted): insert p50 {:.3} ms, max {:.0} ms \
         (dropping the older generation); {:.0} MiB per million tokens held (peak)",
        inserted,
        times[times.len() / 2],
        times[times.len() - 1],
        peak_per_m * 1e6 / (1 << 20) as f64
    );
}
