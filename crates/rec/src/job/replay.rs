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
//! is the journal, and a resumed run feeds the pools from it the same way.

use std::collections::HashMap;
use std::path::Path;

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
    /// Records `..fed` are in the pools.
    fed: usize,
}

impl Replay {
    /// The order of `tasks` (this run's) and `done` (earlier runs', with their outputs).
    pub fn new(tasks: &[Task], done: Vec<(Task, Vec<u32>)>) -> Self {
        let mut entries: Vec<Entry> = tasks
            .iter()
            .map(|t| Entry {
                task: t.clone(),
                state: State::Pending,
            })
            .chain(done.into_iter().map(|(task, out)| Entry {
                task,
                state: State::Done(out),
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
        Replay {
            entries,
            by_line,
            warmups,
            fed: 0,
        }
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
        let n = self.needs(task);
        self.entries[..n]
            .iter()
            .all(|e| !matches!(e.state, State::Pending))
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
            let e = &self.entries[self.fed];
            match &e.state {
                State::Pending => panic!("record at line {} fed before it finished", e.task.line),
                State::Failed => {}
                State::Done(out) => {
                    let prompt = super::run::prompt(engine, template, &e.task)?;
                    let pool = engine.pools_mut().pool(Some(&e.task.pool))?;
                    // The drafter learns as it does at the end of a request it served.
                    if let Some(mut d) = method.drafter(&pool) {
                        d.begin(&prompt, &[]);
                        d.end(out);
                    }
                    engine.pools_mut().mark_dirty(Some(&e.task.pool));
                }
            }
            self.fed += 1;
        }
        Ok(())
    }

    /// Records that `task` finished with `output` (none: it failed).
    pub fn finished(&mut self, task: &Task, output: Option<Vec<u32>>) {
        let i = self.by_line[&task.line];
        self.entries[i].state = output.map_or(State::Failed, State::Done);
    }
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
