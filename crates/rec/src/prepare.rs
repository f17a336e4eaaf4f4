//! `rec prepare`: the split, prompts and groups of docs/recsys.md as knowledge records
//! (`users.jsonl`, `items.jsonl`) and a summary of the groups (`groups.json`).
//!
//! Records come group by group (user clusters, then item groups in `ITEM_GROUPS` order), each
//! group's warm-up members first, in the group's deterministic order, so two runs write the
//! same bytes and a job reading a file front to back warms each pool before its targets.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::error::io;
use crate::groups::{self, Group, UserClustering, WarmupFraction};
use crate::movielens::Dataset;
use crate::prompts;
use crate::split::{Split, DEFAULT_HISTORY};
use crate::{Kind, KnowledgeRecord, RecError, Role};

/// The user records' file in the output directory.
pub const USERS_FILE: &str = "users.jsonl";
/// The item records' file in the output directory.
pub const ITEMS_FILE: &str = "items.jsonl";
/// The groups' summary file in the output directory.
pub const GROUPS_FILE: &str = "groups.json";

/// What `rec prepare` makes: prompt length, groups and sample size.
#[derive(Clone, Debug, PartialEq)]
pub struct PrepareConfig {
    /// History items in a user prompt.
    pub history: usize,
    /// User groups (k-means clusters).
    pub user_clusters: usize,
    /// Share of each group's members that are warm-up members.
    pub warmup: WarmupFraction,
    /// Written into every record; `None` leaves the job's default.
    pub max_tokens: Option<usize>,
    /// Only the first N warm-up and first N target members of each group (small samples).
    pub limit_per_group: Option<usize>,
}

impl Default for PrepareConfig {
    fn default() -> Self {
        PrepareConfig {
            history: DEFAULT_HISTORY,
            user_clusters: groups::DEFAULT_USER_CLUSTERS,
            warmup: WarmupFraction::default(),
            max_tokens: None,
            limit_per_group: None,
        }
    }
}

/// One group in `groups.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupSummary {
    /// Users or items.
    pub kind: Kind,
    /// Members in all.
    pub members: usize,
    /// Warm-up members.
    pub warmup: usize,
    /// Target members.
    pub target: usize,
    /// Records written for the group (fewer than its members under `limit_per_group`).
    pub written_warmup: usize,
    /// Target records written for the group.
    pub written_target: usize,
}

/// `groups.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// The dataset and its source.
    pub dataset: &'static str,
    /// History items in a user prompt.
    pub history: usize,
    /// Share of each group's members that are warm-up members.
    pub warmup_fraction: f64,
    /// The per-role sample size, when limited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_per_group: Option<usize>,
    /// How the user groups were made.
    pub user_clustering: UserClustering,
    /// Item groups and the genres each takes.
    pub item_groups: BTreeMap<&'static str, &'static [&'static str]>,
    /// Every group by name.
    pub groups: BTreeMap<String, GroupSummary>,
}

/// What `rec prepare` writes: the records and the groups' summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    /// User records, group by group, warm-up members first.
    pub users: Vec<KnowledgeRecord>,
    /// Item records, group by group, warm-up members first.
    pub items: Vec<KnowledgeRecord>,
    /// `groups.json`.
    pub summary: Summary,
}

/// Splits the ratings (leave last out), groups users and items, and writes every chosen
/// member's knowledge prompt as a record (see the module docs for the order).
pub fn prepare(data: &Dataset, config: &PrepareConfig) -> Result<Prepared, RecError> {
    let split = Split::leave_last_out(data);
    let (user_groups, clustering) =
        groups::user_groups(data, &split, config.user_clusters, config.warmup)?;
    let item_groups = groups::item_groups(data, config.warmup);

    let mut summary = Summary {
        dataset: "MovieLens-100k (recbole 1.2.1)",
        history: config.history,
        warmup_fraction: config.warmup.get(),
        limit_per_group: config.limit_per_group,
        user_clustering: clustering,
        item_groups: groups::ITEM_GROUPS.iter().copied().collect(),
        groups: BTreeMap::new(),
    };
    let mut records = |groups: &[Group]| {
        let mut out = Vec::new();
        for g in groups {
            let chosen = sample(g, config.limit_per_group);
            let count = |role| chosen.iter().filter(|(_, r)| *r == role).count();
            summary.groups.insert(
                g.name.to_string(),
                GroupSummary {
                    kind: g.kind,
                    members: g.members.len(),
                    warmup: g.warmup_members().len(),
                    target: g.target_members().len(),
                    written_warmup: count(Role::Warmup),
                    written_target: count(Role::Target),
                },
            );
            out.extend(
                chosen
                    .into_iter()
                    .filter_map(|(id, role)| record(data, &split, config, g, id, role)),
            );
        }
        out
    };
    let users = records(&user_groups);
    let items = records(&item_groups);
    Ok(Prepared {
        users,
        items,
        summary,
    })
}

/// The group's members with roles, cut to `limit` of each role.
fn sample(g: &Group, limit: Option<usize>) -> Vec<(u32, Role)> {
    let limit = limit.unwrap_or(usize::MAX);
    let warmup = g.warmup_members().iter().take(limit);
    let target = g.target_members().iter().take(limit);
    warmup
        .map(|&id| (id, Role::Warmup))
        .chain(target.map(|&id| (id, Role::Target)))
        .collect()
}

fn record(
    data: &Dataset,
    split: &Split,
    config: &PrepareConfig,
    g: &Group,
    id: u32,
    role: Role,
) -> Option<KnowledgeRecord> {
    let (prompt, user_id, item_id) = match g.kind {
        Kind::User => {
            let user = data.user(id)?;
            let history = split.history(id, config.history);
            (prompts::user_prompt(data, user, history), Some(id), None)
        }
        Kind::Item => (prompts::item_prompt(data.item(id)?), None, Some(id)),
    };
    let prefix = match g.kind {
        Kind::User => "user",
        Kind::Item => "item",
    };
    Some(KnowledgeRecord {
        id: format!("{prefix}-{id}"),
        kind: g.kind,
        group: g.name.to_string(),
        role,
        prompt,
        user_id,
        item_id,
        max_tokens: config.max_tokens,
        verify: None,
        top_k: None,
        tau: None,
    })
}

/// Writes `users.jsonl`, `items.jsonl` and `groups.json` into `dir` (created if needed), each
/// atomically and durably ([`specdec_fs`]).
pub fn write(dir: &Path, prepared: &Prepared) -> Result<(), RecError> {
    std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
    write_atomic(&dir.join(USERS_FILE), &jsonl(&prepared.users)?)?;
    write_atomic(&dir.join(ITEMS_FILE), &jsonl(&prepared.items)?)?;
    let mut summary = serde_json::to_string_pretty(&prepared.summary).map_err(invalid_json)?;
    summary.push('\n');
    write_atomic(&dir.join(GROUPS_FILE), &summary)
}

fn jsonl(records: &[KnowledgeRecord]) -> Result<String, RecError> {
    let mut out = String::new();
    for r in records {
        out.push_str(&serde_json::to_string(r).map_err(invalid_json)?);
        out.push('\n');
    }
    Ok(out)
}

fn invalid_json(e: serde_json::Error) -> RecError {
    RecError::Invalid(format!("cannot serialise: {e}"))
}

fn write_atomic(path: &Path, text: &str) -> Result<(), RecError> {
    specdec_fs::write_atomic(path, text.as_bytes())
        .map_err(|e| io(e.step.what(), &e.path)(e.source))
}
