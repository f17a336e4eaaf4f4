//! Round trips and error reporting of the GGUF reader on files built by `common`.

use crate::common;

use common::{s, sample, Builder, Tensor};
use specdec_gguf::{dequantize, GgmlType, GgufError, GgufFile, Value};

#[test]
fn round_trip_metadata_and_tensors() {
    let b = sample();
    let f = GgufFile::from_bytes(b.build()).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.metadata.len(), b.kv.len());
    for (k, v) in &b.kv {
        assert_eq!(f.get(k), Some(v), "key {k}");
    }
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.get_u64("t.u64").unwrap(), u64::MAX);
    assert_eq!(f.get_f64("t.f64").unwrap(), -2.25);
    assert!(f.get_bool("t.bool").unwrap());
    let nested = f.get_array("t.nested").unwrap();
    assert_eq!(nested[2].as_array().unwrap()[0].as_str(), Some("def"));

    assert_eq!(f.tensors.len(), b.tensors.len());
    for (want, got) in b.tensors.iter().zip(&f.tensors) {
        assert_eq!(got.name, want.name);
        assert_eq!(got.dims, want.dims);
        assert_eq!(f.tensor_data(got), &want.data[..]);
        assert_eq!(got.offset % 32, 0, "tensor `{}` data is aligned", got.name);
    }
    let a = f.tensor("a").unwrap();
    assert_eq!((a.ty, a.elements()), (GgmlType::F32, 64));
    let mut out = vec![0f32; 64];
    dequantize(a.ty, f.tensor_data(a), &mut out).unwrap();
    assert_eq!(out[5], 5.0 * 0.25 - 3.0);

    let q = f.tensor("b.q8").unwrap();
    assert_eq!(q.ty, GgmlType::Q8_0);
    let mut out = vec![0f32; 32];
    dequantize(q.ty, f.tensor_data(q), &mut out).unwrap();
    assert_eq!(out, (0..32).map(|i| i as f32 - 16.0).collect::<Vec<_>>());
}

#[test]
fn version_2_and_custom_alignment() {
    let mut b = sample().kv("general.alignment", Value::U32(64));
    b.version = 2;
    b.alignment = 64;
    let f = GgufFile::from_bytes(b.build()).unwrap();
    assert_eq!(f.version, 2);
    for t in &f.tensors {
        assert_eq!(t.offset % 64, 0);
    }
    assert_eq!(f.tensor_data(f.tensor("c").unwrap()).len(), 12);
}

#[test]
fn accessors_report_missing_and_mistyped_keys() {
    let f = GgufFile::from_bytes(sample().build()).unwrap();
    assert!(matches!(f.get_str("nope"), Err(GgufError::MissingKey(k)) if k == "nope"));
    let e = f.get_u64("general.architecture").unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::WrongType {
                found: "string",
                ..
            }
        ),
        "{e}"
    );
    assert!(
        f.get_u64("t.i8").is_err(),
        "negative values are not unsigned"
    );
    assert_eq!(f.get_f64("t.i32").unwrap(), -2e9);
}

#[test]
fn open_reads_from_disk_and_reports_io_errors() {
    let dir = std::env::temp_dir().join(format!("specdec-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ok.gguf");
    std::fs::write(&path, sample().build()).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.tensors.len(), 3);
    assert_eq!(f.tensor_data(f.tensor("c").unwrap()).len(), 12);

    let missing = dir.join("missing.gguf");
    let e = GgufFile::open(&missing).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }), "{e}");
    assert!(e.to_string().contains("missing.gguf"), "{e}");

    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = GgufFile::open(&empty).unwrap_err();
    assert!(
        matches!(e, GgufError::Corrupt(_) | GgufError::Io { .. }),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn empty_and_non_gguf_bytes_are_rejected() {
    assert!(matches!(
        GgufFile::from_bytes(Vec::new()),
        Err(GgufError::Corrupt(_))
    ));
    let e = GgufFile::from_bytes(b"PK\x03\x04 this is a zip file".to_vec()).unwrap_err();
    assert!(
        matches!(e, GgufError::BadMagic(m) if &m == b"PK\x03\x04"),
        "{e}"
    );
    let mut b = sample();
    b.magic = *b"GGML";
    assert!(matches!(
        GgufFile::from_bytes(b.build()),
        Err(GgufError::BadMagic(_))
    ));
}

#[test]
fn unsupported_versions_are_rejected() {
    for version in [0, 1, 4, u32::MAX] {
        let mut b = sample();
        b.version = version;
        let e = GgufFile::from_bytes(b.build()).unwrap_err();
        assert!(
            matches!(e, GgufError::UnsupportedVersion(v) if v == version),
            "{e}"
        );
    }
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample().build();
    for len in 0..bytes.len() {
        let r = GgufFile::from_bytes(bytes[..len].to_vec());
        assert!(r.is_err(), "prefix of {len}/{} bytes parsed", bytes.len());
    }
    GgufFile::from_bytes(bytes).unwrap();
}

#[test]
fn tensor_data_beyond_end_of_file() {
    let mut b = sample();
    b.tensors.push(Tensor {
        name: "far".into(),
        dims: vec![4],
        type_id: 0,
        offset: Some(1 << 20),
        data: vec![0; 16],
    });
    let e = GgufFile::from_bytes(b.build()).unwrap_err();
    assert!(e.to_string().contains("`far`"), "{e}");

    // Offset plus size overflowing u64 must not wrap around into the file.
    let mut b = sample();
    b.tensors.push(Tensor {
        name: "wrap".into(),
        dims: vec![4],
        type_id: 0,
        offset: Some(u64::MAX - 8),
        data: vec![],
    });
    assert!(GgufFile::from_bytes(b.build()).is_err());

    // Declared shape larger than the bytes present.
    let b = Builder::default().tensor("big", &[1 << 40, 1 << 20], 0, vec![0; 64]);
    assert!(GgufFile::from_bytes(b.build()).is_err());
    let b = Builder::default().tensor("ovf", &[u64::MAX, 3], 0, vec![0; 64]);
    assert!(GgufFile::from_bytes(b.build()).is_err());
}

#[test]
fn unknown_tensor_type_is_named() {
    let b = Builder::default().tensor("odd", &[4], 99, vec![0; 16]);
    let e = GgufFile::from_bytes(b.build()).unwrap_err();
    assert!(
        matches!(&e, GgufError::UnknownType { tensor, type_id: 99 } if tensor == "odd"),
        "{e}"
    );
}

#[test]
fn partial_blocks_and_bad_alignment_are_rejected() {
    // 16 elements of Q4_0 is half a block.
    let b = Builder::default().tensor("half", &[16], 2, vec![0; 18]);
    assert!(GgufFile::from_bytes(b.build()).is_err());
    for bad in [Value::U32(0), Value::U32(48), Value::I32(-32), s("32")] {
        let b = sample().kv("general.alignment", bad.clone());
        assert!(GgufFile::from_bytes(b.build()).is_err(), "{bad:?}");
    }
}

#[test]
fn malformed_metadata_is_rejected() {
    // A bool must be 0 or 1.
    let mut bytes = Builder::default().kv("b", Value::Bool(true)).build();
    let pos = bytes.len() - 1;
    bytes[pos] = 2;
    assert!(GgufFile::from_bytes(bytes).is_err());
    // Unknown value type id 13.
    let mut bytes = Builder::default().kv("x", Value::U8(0)).build();
    let ty_pos = bytes.len() - 5;
    bytes[ty_pos] = 13;
    assert!(GgufFile::from_bytes(bytes).is_err());
    // Arrays nested deeper than any real writer produces.
    let mut v = Value::Array(vec![Value::U8(1)]);
    for _ in 0..8 {
        v = Value::Array(vec![v]);
    }
    assert!(GgufFile::from_bytes(Builder::default().kv("deep", v).build()).is_err());
}

#[test]
fn duplicate_keys_and_tensor_names_are_rejected() {
    let b = sample().kv("t.u8", Value::U8(1));
    let e = GgufFile::from_bytes(b.build()).unwrap_err();
    assert!(e.to_string().contains("t.u8"), "{e}");
    let b = sample().f32_tensor("a", &[1], &[0.0]);
    let e = GgufFile::from_bytes(b.build()).unwrap_err();
    assert!(e.to_string().contains("`a`"), "{e}");
}

#[test]
fn invalid_utf8_strings_are_kept_lossily() {
    let mut bytes = Builder::default().kv("k", s("ab")).build();
    let n = bytes.len();
    bytes[n - 1] = 0xff;
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.get_str("k").unwrap(), "a\u{fffd}");
}

#[test]
fn tensors_whose_offset_makes_them_overlap_are_rejected() {
    // `b` is declared at the data of `a`: both would read the same bytes.
    let mut b = Builder::default().f32_tensor("a", &[8], &[1.0; 8]);
    b.tensors.push(Tensor {
        name: "b".into(),
        dims: vec![4],
        type_id: 0,
        offset: Some(16),
        data: vec![],
    });
    let e = GgufFile::from_bytes(b.build()).unwrap_err();
    assert!(
        e.to_string().contains("`a`") && e.to_string().contains("`b`"),
        "{e}"
    );
}

#[test]
fn tensors_whose_declared_type_makes_them_overlap_are_rejected() {
    // `a` holds 16 f16 values (32 bytes) but is declared f32, so it claims 64 bytes and runs
    // into `b`, laid out right after its real data.
    let b = Builder::default()
        .tensor("a", &[16], 0, vec![0; 32])
        .f32_tensor("b", &[8], &[2.0; 8]);
    let bytes = b.build();
    let e = GgufFile::from_bytes(bytes).unwrap_err();
    assert!(e.to_string().contains("overlaps"), "{e}");
    // Declared as what it holds, the same layout is fine.
    let ok = Builder::default()
        .tensor("a", &[16], 1, vec![0; 32])
        .f32_tensor("b", &[8], &[2.0; 8]);
    GgufFile::from_bytes(ok.build()).unwrap();
}
