//! `Model::forward_work` and `matrix_work` on the real model: the multiply-adds split by
//! weight format add up, the matrix phases add up to the forward's matrices, and the
//! split puts each matrix under its own format (SmolLM2's head is Q8_0, its layers Q4_1).

use crate::common;

use specdec_runtime::{Phase, WeightFormat};

#[test]
fn multiply_adds_split_by_format_add_up() {
    let m = common::model();
    let cfg = m.config();
    for rows in [1, 16] {
        let w = m.forward_work(100, rows);
        assert_eq!(w.int8_macs_by_format.iter().sum::<u64>(), w.int8_macs);
        let phases = [
            Phase::Qkv,
            Phase::AttnOut,
            Phase::GateUp,
            Phase::Down,
            Phase::Head,
        ];
        let mut by_format = [0u64; WeightFormat::ALL.len()];
        for phase in phases {
            let p = m.matrix_work(phase, rows).expect("a matrix phase");
            assert_eq!(p.int8_macs_by_format.iter().sum::<u64>(), p.int8_macs);
            for f in WeightFormat::ALL {
                by_format[f.index()] += p.int8_macs_by_format[f.index()];
            }
        }
        assert_eq!(by_format, w.int8_macs_by_format);
        let head = (cfg.vocab * cfg.hidden * rows) as u64;
        let q8 = w.int8_macs_by_format[WeightFormat::Q8_0.index()];
        let q41 = w.int8_macs_by_format[WeightFormat::Q4_1.index()];
        assert_eq!(q8, head, "the head, Q8_0");
        assert_eq!(q41, w.int8_macs - head, "every layer matrix, Q4_1");
        assert!(m.matrix_work(Phase::Attention, rows).is_none());
    }
}
