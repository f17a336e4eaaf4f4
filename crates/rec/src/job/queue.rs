//! The order records are admitted in. With warm-up first, no target starts until every
//! warm-up record has finished, so each target drafts from a pool its group's warm-up
//! knowledge has already fed.

use std::collections::VecDeque;

use crate::records::Role;

use super::input::Task;

/// Which records a run generates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Warmup {
    /// Warm-up records, then (once they are all done) the targets.
    #[default]
    First,
    /// Warm-up records only: fills the pools.
    Only,
    /// Targets only.
    Skip,
}

/// The records still to admit.
#[derive(Debug)]
pub struct Queue {
    warmup: VecDeque<Task>,
    targets: VecDeque<Task>,
}

impl Queue {
    /// The tasks `mode` runs, each role in input order.
    pub fn new(tasks: Vec<Task>, mode: Warmup) -> Self {
        let (warmup, targets): (VecDeque<Task>, VecDeque<Task>) = tasks
            .into_iter()
            .partition(|t| t.record.role == Role::Warmup);
        match mode {
            Warmup::First => Queue { warmup, targets },
            Warmup::Only => Queue {
                warmup,
                targets: VecDeque::new(),
            },
            Warmup::Skip => Queue {
                warmup: VecDeque::new(),
                targets,
            },
        }
    }

    /// Records still to admit, warm-up and targets.
    pub fn len(&self) -> usize {
        self.warmup.len() + self.targets.len()
    }

    /// Whether every record was admitted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next task to admit, given how many warm-up records are still generating; none
    /// while targets wait for those.
    pub fn next(&mut self, warmups_running: usize) -> Option<Task> {
        if let Some(t) = self.warmup.pop_front() {
            return Some(t);
        }
        if warmups_running > 0 {
            return None;
        }
        self.targets.pop_front()
    }

    /// Returns `task` (just handed out) to the head of its line.
    pub fn put_back(&mut self, task: Task) {
        if task.record.role == Role::Warmup {
            self.warmup.push_front(task);
        } else {
            self.targets.push_front(task);
        }
    }

    /// The tasks still to admit, in the order they will be.
    pub fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.warmup.iter().chain(&self.targets)
    }

    /// The tasks, in order, taken out.
    pub fn into_tasks(self) -> impl Iterator<Item = Task> {
        self.warmup.into_iter().chain(self.targets)
    }

    /// Drops what was not admitted (a stop was asked); how many that was.
    pub fn abandon(&mut self) -> usize {
        let n = self.len();
        self.warmup.clear();
        self.targets.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::input::parse_input;
    use specdec_engine::SpeculationSpec;

    fn tasks(roles: &[&str]) -> Vec<Task> {
        let text: Vec<String> = roles
            .iter()
            .enumerate()
            .map(|(i, r)| {
                format!(r#"{{"id":"r{i}","kind":"user","group":"g","role":"{r}","prompt":"p"}}"#)
            })
            .collect();
        parse_input(text.join("\n").as_bytes(), &SpeculationSpec::default())
            .unwrap()
            .tasks
    }

    fn ids(q: &mut Queue, running: usize) -> Vec<String> {
        std::iter::from_fn(|| q.next(running))
            .map(|t| t.record.id)
            .collect()
    }

    #[test]
    fn targets_wait_until_every_warmup_record_has_finished() {
        let mut q = Queue::new(
            tasks(&["target", "warmup", "target", "warmup"]),
            Warmup::First,
        );
        assert_eq!(q.len(), 4);
        // Warm-up records come first, in input order; while one still runs, no target.
        assert_eq!(ids(&mut q, 1), ["r1", "r3"]);
        assert_eq!(q.next(2).map(|t| t.record.id), None);
        assert_eq!(ids(&mut q, 0), ["r0", "r2"]);
        assert!(q.is_empty());
    }

    #[test]
    fn only_and_skip_keep_one_role() {
        let roles = ["target", "warmup", "target"];
        assert_eq!(ids(&mut Queue::new(tasks(&roles), Warmup::Only), 0), ["r1"]);
        assert_eq!(
            ids(&mut Queue::new(tasks(&roles), Warmup::Skip), 0),
            ["r0", "r2"]
        );
    }

    #[test]
    fn abandoning_drops_what_was_not_admitted() {
        let mut q = Queue::new(tasks(&["warmup", "target", "target"]), Warmup::First);
        q.next(0);
        assert_eq!(q.abandon(), 2);
        assert!(q.next(0).is_none());
    }
}
