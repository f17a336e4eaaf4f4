//! `Want::Argmax` on the real models: each node's argmax equals the argmax of its full
//! row, whether the forward streams the head in blocks (large rows, every input asking
//! argmaxes only) or computes whole rows (small ones, or beside inputs wanting rows).

use crate::common;

use specdec_runtime::{Model, Node, SeqInput, Want};

fn row_argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// A prefix, then a tree below it: a chain of `chain` nodes and a branch of two.
fn inputs(m: &Model, chain: u32) -> (Vec<u32>, Vec<Node>) {
    let vocab = m.config().vocab as u32;
    let prefix: Vec<u32> = (0..40).map(|i| (i * 7919 + 13) % vocab).collect();
    let mut nodes = Node::chain(
        &(0..chain)
            .map(|i| (i * 4241 + 77) % vocab)
            .collect::<Vec<_>>(),
    );
    nodes.push(Node {
        token: 999 % vocab,
        parent: Some(0),
    });
    nodes.push(Node {
        token: 31 % vocab,
        parent: Some(chain),
    });
    (prefix, nodes)
}

#[test]
fn streamed_argmaxes_equal_the_full_rows_argmaxes() {
    // Small trees' rows are computed whole and reduced; large ones stream the head (past
    // 4 MiB of rows: 30 nodes of SmolLM2's 49,152 columns, 5 of Gemma's 262,144).
    for (m, chain) in common::models().into_iter().flat_map(|m| [(m, 3), (m, 28)]) {
        let (prefix, nodes) = inputs(m, chain);
        let run = |wants: &[Want]| {
            let mut seqs: Vec<_> = wants.iter().map(|_| m.new_sequence()).collect();
            for s in &mut seqs {
                m.forward(&mut [SeqInput {
                    seq: s,
                    nodes: &Node::chain(&prefix),
                    want: Want::None,
                }])
                .unwrap();
                s.commit_all().unwrap();
            }
            let mut ins: Vec<SeqInput<'_>> = seqs
                .iter_mut()
                .zip(wants)
                .map(|(seq, w)| SeqInput {
                    seq,
                    nodes: &nodes,
                    want: w.clone(),
                })
                .collect();
            m.forward(&mut ins).unwrap()
        };
        let full = run(&[Want::All]);
        let want: Vec<u32> = (0..nodes.len())
            .map(|i| row_argmax(full[0].row(i)))
            .collect();
        // Alone (streamed), two at once (streamed), and beside a full-row input.
        for wants in [
            vec![Want::Argmax],
            vec![Want::Argmax, Want::Argmax],
            vec![Want::All, Want::Argmax],
        ] {
            let out = run(&wants);
            for (w, l) in wants.iter().zip(&out) {
                let got: Vec<u32> = (0..nodes.len()).map(|i| l.argmax(i).unwrap()).collect();
                assert_eq!(got, want, "{} {wants:?}", m.config().name);
                // Past 4 MiB of rows, an all-argmax forward holds no rows.
                let all_argmax = wants.iter().all(|w| matches!(w, Want::Argmax));
                let bytes = wants.len() * nodes.len() * m.config().vocab * 4;
                let streamed = all_argmax && bytes > 4 << 20;
                assert_eq!(l.get(0).is_none(), streamed, "{wants:?} {w:?}");
            }
        }
    }
}
