//! The knowledge job (`specdec rec knowledge`): every record of a JSONL file through the
//! engine's scheduler, drafting from its group's pool, each result appended to a JSONL
//! output and fsynced; resumable after a crash, shardable across processes (a Kubernetes
//! Indexed Job), stoppable by a signal without losing what is in flight.

pub mod input;
pub mod output;
pub mod progress;
pub mod queue;
pub mod replay;
pub mod run;
pub mod shard;

pub use input::{parse_input, read_input, Input, Malformed, Task};
pub use output::{scan, OutputFile, Scan};
pub use progress::{Progress, Summary};
pub use queue::{Queue, Warmup};
pub use run::{execute, prepare, run, JobOptions, Prepared};
pub use shard::Shard;
