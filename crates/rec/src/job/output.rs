//! The job's output: one JSON line per finished record, appended and fsynced before the
//! record counts as done, so after a crash the file holds whole lines and at most one torn
//! last line. Resuming reads which ids are done and cuts a torn line away (that record is
//! redone); anything else that does not parse is someone else's data and stops the job.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::io;
use crate::records::KnowledgeOutput;
use crate::RecError;

/// What an existing output holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Ids of complete lines.
    pub done: HashSet<String>,
    /// Bytes of complete lines: everything after is the torn line.
    pub valid_len: u64,
    /// The torn last line's number, if there is one.
    pub torn_line: Option<usize>,
}

/// Reads an output's lines. The last line is torn when it has no trailing newline or does
/// not parse (a crash mid-write); an unparseable line before it is an error naming it.
pub fn scan(bytes: &[u8], path: &Path) -> Result<Scan, RecError> {
    let mut s = Scan::default();
    let mut start = 0usize;
    let mut line = 0usize;
    while start < bytes.len() {
        line += 1;
        let (end, complete) = match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(i) => (start + i + 1, true),
            None => (bytes.len(), false),
        };
        let last = end == bytes.len();
        let parsed = serde_json::from_slice::<KnowledgeOutput>(&bytes[start..end]);
        match parsed {
            Ok(out) if complete => {
                if !s.done.insert(out.id.clone()) {
                    tracing::warn!("{}: line {line}: id `{}` again", path.display(), out.id);
                }
                s.valid_len = end as u64;
            }
            _ if last => {
                s.torn_line = Some(line);
                break;
            }
            Ok(_) => unreachable!("only the last line lacks a newline"),
            Err(e) => {
                return Err(RecError::Record {
                    path: path.to_path_buf(),
                    line,
                    message: format!(
                        "not an output line ({e}); only a torn last line is cut on --resume, \
                         so this file needs a look (is it another job's?)"
                    ),
                })
            }
        }
        start = end;
    }
    Ok(s)
}

/// The output file, open for appending.
#[derive(Debug)]
pub struct OutputFile {
    file: File,
    path: PathBuf,
}

impl OutputFile {
    /// Opens `path` for this run. Without `resume` an output that holds anything is an
    /// error (results are never overwritten); with it, the ids already done come back and
    /// a torn last line is cut away. The file is locked while the job runs, so a second
    /// job on the same output fails instead of interleaving lines.
    pub fn open(path: &Path, resume: bool) -> Result<(OutputFile, HashSet<String>), RecError> {
        let what = "opening output";
        let created = !path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io(what, path))?;
        if let Err(e) = file.try_lock() {
            return Err(RecError::Invalid(format!(
                "{} is in use by another job ({e})",
                path.display()
            )));
        }
        if created {
            // The new file's directory entry, durable before any result is appended.
            specdec_fs::sync_dir(specdec_fs::parent(path))
                .map_err(|e| io(e.step.what(), &e.path)(e.source))?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(io("reading output", path))?;
        if !bytes.is_empty() && !resume {
            return Err(RecError::Invalid(format!(
                "{} already holds results: pass --resume to skip the records it has, or \
                 choose another output",
                path.display()
            )));
        }
        let s = scan(&bytes, path)?;
        if let Some(line) = s.torn_line {
            tracing::warn!(
                "{}: line {line} is torn (an interrupted write); cutting it, its record is redone",
                path.display()
            );
            file.set_len(s.valid_len)
                .and_then(|()| file.sync_data())
                .map_err(io("truncating output", path))?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(io("opening output", path))?;
        let out = OutputFile {
            file,
            path: path.to_path_buf(),
        };
        Ok((out, s.done))
    }

    /// Appends `out` as one line and waits until it is on disk.
    pub fn append(&mut self, out: &KnowledgeOutput) -> Result<(), RecError> {
        let mut line = serde_json::to_vec(out).expect("an output serializes");
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(io("writing output", &self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Kind, Role, VerifyMode};

    fn output(id: &str) -> KnowledgeOutput {
        KnowledgeOutput {
            id: id.into(),
            kind: Kind::User,
            group: "g".into(),
            role: Role::Target,
            user_id: Some(1),
            item_id: None,
            text: format!("text of {id}"),
            token_ids: vec![1, 2, 3],
            stop_token: None,
            finish_reason: "length".into(),
            verify: VerifyMode::Strict,
            top_k: None,
            tau: None,
            relaxed_tokens: 0,
            completion_tokens: 3,
            forward_passes: 2,
            mean_accepted_length: 1.5,
            elapsed_ms: 1.0,
        }
    }

    fn line(id: &str) -> String {
        serde_json::to_string(&output(id)).unwrap() + "\n"
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("specdec-job-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn whole_lines_are_done_and_a_last_line_without_newline_is_torn() {
        let (a, b) = (line("a"), line("b"));
        let torn = &b[..b.len() / 2];
        let text = format!("{a}{b}{torn}");
        let s = scan(text.as_bytes(), Path::new("o")).unwrap();
        assert_eq!(s.done, HashSet::from(["a".into(), "b".into()]));
        assert_eq!(s.valid_len, (a.len() + b.len()) as u64);
        assert_eq!(s.torn_line, Some(3));
        // A whole line that lost only its newline is torn too: never kept.
        let s = scan(a.trim_end().as_bytes(), Path::new("o")).unwrap();
        assert!(s.done.is_empty());
        assert_eq!((s.valid_len, s.torn_line), (0, Some(1)));
    }

    #[test]
    fn a_corrupt_line_before_the_last_is_an_error_naming_it() {
        let text = format!("{}garbage\n{}", line("a"), line("b"));
        let e = scan(text.as_bytes(), Path::new("o")).unwrap_err();
        assert!(matches!(e, RecError::Record { line: 2, .. }), "{e}");
        // The same garbage as the last line is a torn write.
        let text = format!("{}garbage\n", line("a"));
        assert_eq!(
            scan(text.as_bytes(), Path::new("o")).unwrap().torn_line,
            Some(2)
        );
    }

    #[test]
    fn resuming_cuts_the_torn_line_and_appends_after_the_whole_ones() {
        let p = temp("resume.jsonl");
        let b = line("b");
        std::fs::write(&p, format!("{}{}", line("a"), &b[..10])).unwrap();
        let (mut out, done) = OutputFile::open(&p, true).unwrap();
        assert_eq!(done, HashSet::from(["a".to_string()]));
        out.append(&output("b")).unwrap();
        drop(out);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            format!("{}{}", line("a"), b)
        );
    }

    #[test]
    fn an_output_with_results_is_never_overwritten_without_resume() {
        let p = temp("keep.jsonl");
        std::fs::write(&p, line("a")).unwrap();
        let e = OutputFile::open(&p, false).unwrap_err();
        assert!(e.to_string().contains("--resume"), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), line("a"));
        // An empty or missing output is a fresh start.
        std::fs::write(&p, "").unwrap();
        assert!(OutputFile::open(&p, false).unwrap().1.is_empty());
        let fresh = temp("fresh.jsonl");
        assert!(OutputFile::open(&fresh, false).unwrap().1.is_empty());
        assert!(fresh.exists());
    }

    #[test]
    fn a_second_job_on_the_same_output_is_refused() {
        let p = temp("locked.jsonl");
        let (_held, _) = OutputFile::open(&p, true).unwrap();
        let e = OutputFile::open(&p, true).unwrap_err();
        assert!(e.to_string().contains("in use"), "{e}");
    }
}
