//! Reproducible learning for jobs with relaxed records. Relaxed acceptance follows the
//! drafts and the drafts follow the pools, so if records fed the pools as they finished,
//! a record's text would depend on which records happened to finish before it started:
//! two runs would differ, and a killed and resumed run would differ from an uninterrupted
//! one. Here a record's drafts come from its own copy of its group's pool, and that copy
//! holds exactly a fixed set of earlier records, whatever the timing:
//!
//! - the job's records have one order: warm-up records before targets, each in input
//!   order (the order the queue admits them in);
//! - record `i` drafts from the pools as they were before the job, fed the records before
//!   it in that order except the last [`LAG`] of them (so that it rarely waits for them),
//!   and, for a target, every warm-up record;
//! - those records are fed in order, each as its drafter would have learned it, and a
//!   record is admitted only when every record it needs has finished.
//!
//! The pool files are written only when every record is done: until then the output file
//! is the journal, and a resumed run feeds the pools from it the same way. Once they are
//! written, a marker beside the output ([`marker_path`]) lists the records they hold, so
//! that a later `--resume` (retrying failed records) never feeds a record twice.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use specdec_engine::{ChatTemplate, DraftMethod, Engine, EngineError, Pool};

use super::input::Task;
use crate::records::{KnowledgeOutput, Role};

/// Records just before a record in the job's order that it does not wait for.
pub const LAG: usize = 16;

/// What became of a record.
#[derive(Debug)]
enum State {
    /// Not finished yet.
    Pending,
    /// Finished with these output tokens.
    Done(Vec<u32>),
    /// Failed: it feeds nothing.
    Failed,
    /// In the pools (fed by this run, or by an earlier one that saved them).
    Fed,
}

#[derive(Debug)]
struct Entry {
    task: Task,
    state: State,
}

/// The job's records in order and how far the pools have been fed.
#[derive(Debug)]
pub struct Replay {
    entries: Vec<Entry>,
    /// Position of each record by input line.
    by_line: HashMap<usize, usize>,
    /// Warm-up records (they come first).
    warmups: usize,
    /// Records `..fed` are in the pools (or failed).
    fed: usize,
    /// Records `..settled` have finished (or failed).
    settled: usize,
}

impl Replay {
    /// The order of `tasks` (this run's) and `done` (earlier runs', with their outputs;
    /// those whose ids are in `in_pools` are in the saved pools already).
    pub fn new(tasks: &[Task], done: Vec<(Task, Vec<u32>)>, in_pools: &HashSet<String>) -> Self {
        let mut entries: Vec<Entry> = tasks
            .iter()
            .map(|t| Entry {
                task: t.clone(),
                state: State::Pending,
            })
            .chain(done.into_iter().map(|(task, out)| Entry {
                state: if in_pools.contains(&task.record.id) {
                    State::Fed
                } else {
                    State::Done(out)
                },
                task,
            }))
            .collect();
        entries.sort_by_key(|e| (e.task.record.role != Role::Warmup, e.task.line));
        let warmups = entries
            .iter()
            .filter(|e| e.task.record.role == Role::Warmup)
            .count();
        let by_line = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.task.line, i))
            .collect();
        let mut r = Replay {
            entries,
            by_line,
            warmups,
            fed: 0,
            settled: 0,
        };
        r.settle();
        r
    }

    /// Moves `settled` past the records that have finished.
    fn settle(&mut self) {
        while self
            .entries
            .get(self.settled)
            .is_some_and(|e| !matches!(e.state, State::Pending))
        {
            self.settled += 1;
        }
    }

    /// Whether a finished record is not in the pools yet (they must be saved).
    pub fn has_unfed(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.state, State::Done(_)))
    }

    /// How many records before `task` in the job's order its drafts hold.
    fn needs(&self, task: &Task) -> usize {
        let i = self.by_line[&task.line];
        let lagged = i.saturating_sub(LAG);
        if task.record.role == Role::Warmup {
            lagged
        } else {
            lagged.max(self.warmups)
        }
    }

    /// Whether every record `task` drafts from has finished.
    pub fn ready(&self, task: &Task) -> bool {
        self.needs(task) <= self.settled
    }

    /// The pool `task` drafts from: its group's, fed up to what it needs, copied (so that
    /// what other records learn later, and what it learns itself, stay out of the pools).
    /// Call only when [`Replay::ready`].
    pub fn pool_for(
        &mut self,
        engine: &mut Engine<'_>,
        template: &ChatTemplate,
        method: DraftMethod,
        task: &Task,
    ) -> Result<Pool, EngineError> {
        self.feed_to(engine, template, method, self.needs(task))?;
        Ok(engine.pools_mut().pool(Some(&task.pool))?.deep_clone())
    }

    /// Feeds every finished record (at the end of a job that finished them all).
    pub fn feed_all(
        &mut self,
        engine: &mut Engine<'_>,
        template: &ChatTemplate,
        method: DraftMethod,
    ) -> Result<(), EngineError> {
        self.feed_to(engine, template, method, self.entries.len())
    }

    fn feed_to(
        &mut self,
        engine: &mut Engine<'_>,
        template: &ChatTemplate,
        method: DraftMethod,
        n: usize,
    ) -> Result<(), EngineError> {
        while self.fed < n {
            let e = &mut self.entries[self.fed];
            match std::mem::replace(&mut e.state, State::Fed) {
                State::Pending => panic!("record at line {} fed before it finished", e.task.line),
                State::Failed => e.state = State::Failed,
                State::Fed => {}
                State::Done(out) => {
                    if let Err(err) = feed(engine, template, method, &e.task, &out) {
                        // One record's pool that cannot be read must not fail the others.
                        tracing::error!(
                            "record {} (line {}) could not feed its pool: {err}",
                            e.task.record.id,
                            e.task.line
                        );
                        e.state = State::Failed;
                    }
                }
            }
            self.fed += 1;
        }
        Ok(())
    }

    /// The ids of the records in the pools.
    pub fn fed_ids(&self) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .filter(|e| matches!(e.state, State::Fed))
            .map(|e| e.task.record.id.as_str())
    }

    /// Records that `task` finished with `output` (none: it failed).
    pub fn finished(&mut self, task: &Task, output: Option<Vec<u32>>) {
        let i = self.by_line[&task.line];
        self.entries[i].state = output.map_or(State::Failed, State::Done);
        self.settle();
    }
}

/// Feeds one finished record to its group's pool, as its drafter learns at the end of a
/// request it served.
fn feed(
    engine: &mut Engine<'_>,
    template: &ChatTemplate,
    method: DraftMethod,
    task: &Task,
    output: &[u32],
) -> Result<(), EngineError> {
    let prompt = task.chat_prompt(engine, template)?;
    let pool = engine.pools_mut().pool(Some(&task.pool))?;
    if let Some(mut d) = method.drafter(&pool, None) {
        d.begin(&prompt, &[]);
        d.end(output);
    }
    engine.pools_mut().mark_dirty(Some(&task.pool));
    Ok(())
}

/// Where a job writes the ids of the records its saved pools hold: beside the output.
pub fn marker_path(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".pools-fed");
    PathBuf::from(name)
}

/// The ids a marker lists (a JSON list; none without one, logged if unreadable).
pub fn read_marker(output: &Path) -> HashSet<String> {
    let path = marker_path(output);
    let Ok(bytes) = std::fs::read(&path) else {
        return HashSet::new();
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        tracing::error!("{} is not a list of ids ({e}); ignoring it", path.display());
        HashSet::new()
    })
}

/// Writes the marker (after the pools were saved), atomically.
pub fn write_marker<'a>(output: &Path, ids: impl Iterator<Item = &'a str>) -> Result<(), String> {
    let ids: Vec<&str> = ids.collect();
    let bytes = serde_json::to_vec(&ids).expect("strings serialize");
    specdec_fs::write_atomic(&marker_path(output), &bytes).map_err(|e| e.to_string())
}

/// The output tokens of the records an output file holds, by id (later lines win, as they
/// are the ones kept); lines that do not parse are skipped (the job refuses those files
/// when it opens them).
pub fn done_outputs(path: &Path) -> HashMap<String, Vec<u32>> {
    let Ok(text) = std::fs::read(path) else {
        return HashMap::new();
    };
    text.split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice::<KnowledgeOutput>(line).ok())
        .map(|o| (o.id, o.token_ids))
        .collect()
}
