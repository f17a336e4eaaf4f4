//! `Want::LastColumns` on the real model: the asked columns carry a full head's bits, every
//! other column is `-inf`, and the rows batched beside it are unchanged.

use std::sync::Arc;

use crate::common;
use rand::{Rng, SeedableRng};

use common::{bits, model, prefill, prompt};
use specdec_runtime::{Node, SeqInput, Want};

#[test]
fn selected_columns_equal_the_full_head_and_the_rest_is_minus_infinity() {
    let m = model();
    let vocab = m.config().vocab;
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let (pa, pb, pc) = (
        prompt(&mut rng, 17),
        prompt(&mut rng, 9),
        prompt(&mut rng, 12),
    );
    let (ca, cb, cc) = (
        prompt(&mut rng, 3),
        prompt(&mut rng, 4),
        prompt(&mut rng, 2),
    );
    let (na, nb, nc) = (Node::chain(&ca), Node::chain(&cb), Node::chain(&cc));
    // Scattered, repeated, unsorted; the first and last tokens too.
    let mut cols: Vec<u32> = (0..40).map(|_| rng.gen_range(0..vocab as u32)).collect();
    cols.extend([cols[3], 0, vocab as u32 - 1]);
    let cols: Arc<[u32]> = cols.into();
    let (a0, b0, c0) = (prefill(m, &pa), prefill(m, &pb), prefill(m, &pc));

    // Each alone with full rows.
    let alone = |seq: &specdec_runtime::Sequence, nodes: &[Node], want: Want| {
        let mut s = seq.clone();
        let out = m
            .forward(&mut [SeqInput {
                seq: &mut s,
                nodes,
                want,
            }])
            .unwrap();
        out.into_iter().next().unwrap()
    };
    let full_a = alone(&a0, &na, Want::All);
    let full_b = alone(&b0, &nb, Want::Last);
    let full_c = alone(&c0, &nc, Want::Last);

    // B restricted, alone and between two full inputs.
    let only_b = alone(&b0, &nb, Want::LastColumns(cols.clone()));
    let (mut a, mut b, mut c) = (a0.clone(), b0.clone(), c0.clone());
    let batch = m
        .forward(&mut [
            SeqInput {
                seq: &mut a,
                nodes: &na,
                want: Want::All,
            },
            SeqInput {
                seq: &mut b,
                nodes: &nb,
                want: Want::LastColumns(cols.clone()),
            },
            SeqInput {
                seq: &mut c,
                nodes: &nc,
                want: Want::Last,
            },
        ])
        .unwrap();
    let want_b = full_b.get(nb.len() - 1).unwrap();
    for got in [&only_b, &batch[1]] {
        assert!(
            got.get(nb.len() - 2).is_none(),
            "only the last node has logits"
        );
        let row = got.get(nb.len() - 1).unwrap();
        assert_eq!(row.len(), vocab);
        for (t, (&g, &w)) in row.iter().zip(want_b).enumerate() {
            if cols.contains(&(t as u32)) {
                assert_eq!(g.to_bits(), w.to_bits(), "column {t}");
            } else {
                assert_eq!(g, f32::NEG_INFINITY, "column {t}");
            }
        }
    }
    for j in 0..na.len() {
        assert_eq!(bits(batch[0].get(j).unwrap()), bits(full_a.get(j).unwrap()));
    }
    assert_eq!(bits(batch[2].row(0)), bits(full_c.row(0)));

    // Several restricted rows in one forward, one with no columns at all.
    let (mut b, mut c) = (b0.clone(), c0.clone());
    let two = m
        .forward(&mut [
            SeqInput {
                seq: &mut b,
                nodes: &nb,
                want: Want::LastColumns(cols.clone()),
            },
            SeqInput {
                seq: &mut c,
                nodes: &nc,
                want: Want::LastColumns(Arc::from(Vec::new())),
            },
        ])
        .unwrap();
    assert_eq!(bits(two[0].row(0)), bits(only_b.row(0)));
    assert!(two[1].row(0).iter().all(|&v| v == f32::NEG_INFINITY));

    // Rows asking for most of the vocabulary take the full head (then masked; three rows
    // of every tile are past the two passes' worth): the same bits.
    let wide: Arc<[u32]> = (0..vocab as u32).filter(|t| t % 3 != 1).collect();
    let (mut b, mut c) = (b0.clone(), c0.clone());
    let both_wide = m
        .forward(&mut [
            SeqInput {
                seq: &mut b,
                nodes: &nb,
                want: Want::LastColumns(wide.clone()),
            },
            SeqInput {
                seq: &mut c,
                nodes: &nc,
                want: Want::LastColumns(wide.clone()),
            },
            SeqInput {
                seq: &mut a0.clone(),
                nodes: &na,
                want: Want::LastColumns(wide.clone()),
            },
            SeqInput {
                seq: &mut a0.clone(),
                nodes: &na,
                want: Want::Last,
            },
        ])
        .unwrap();
    let last_a = full_a.get(na.len() - 1).unwrap();
    let wides = [
        (&both_wide[0], want_b),
        (&both_wide[1], full_c.row(0)),
        (&both_wide[2], last_a),
    ];
    for (got, full) in wides {
        for (t, (&g, &w)) in got.row(0).iter().zip(full).enumerate() {
            let w = if t % 3 != 1 { w } else { f32::NEG_INFINITY };
            assert_eq!(g.to_bits(), w.to_bits(), "wide, column {t}");
        }
    }
    assert_eq!(bits(both_wide[3].row(0)), bits(last_a));

    // A column outside the vocabulary is refused like a bad token.
    let mut b = b0.clone();
    let bad = m.forward(&mut [SeqInput {
        seq: &mut b,
        nodes: &nb,
        want: Want::LastColumns(Arc::from(vec![vocab as u32])),
    }]);
    assert!(bad.is_err());
}
