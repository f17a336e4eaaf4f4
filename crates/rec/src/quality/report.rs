//! The downstream check three ways, side by side: no knowledge, strict knowledge, relaxed
//! knowledge; same split, same model, same features but for the texts.

use serde::Serialize;

use super::ctr::{evaluate_with, CtrConfig, CtrMetrics};
use super::knowledge::Knowledge;
use crate::movielens::{Dataset, Rating};
use crate::{KnowledgeOutput, RecError};

/// The downstream check without knowledge, with strict knowledge and with relaxed knowledge.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DownstreamReport {
    /// Without knowledge texts: the baseline.
    pub none: CtrMetrics,
    /// With the strictly verified (plain decoding's) knowledge.
    pub strict: CtrMetrics,
    /// With the relaxed-verified knowledge.
    pub relaxed: CtrMetrics,
    /// The number the paper's claim is about: near zero when relaxed knowledge is as useful.
    pub relaxed_minus_strict_auc: f64,
    /// What knowledge adds at all: the AUC gain of strict knowledge over none.
    pub strict_minus_none_auc: f64,
}

/// `train` is the training interactions, `heldout` the pairs scored (for leave-last-out,
/// each user's validation and test interactions); the knowledge files give the texts.
pub fn downstream_with(
    config: &CtrConfig,
    dataset: &Dataset,
    train: &[Rating],
    heldout: &[Rating],
    strict: &[KnowledgeOutput],
    relaxed: &[KnowledgeOutput],
) -> Result<DownstreamReport, RecError> {
    let (users, items) = (&dataset.users, &dataset.items);
    let run = |k: Option<&Knowledge>| evaluate_with(config, train, heldout, users, items, k);
    let none = run(None)?;
    let strict = run(Some(&Knowledge::from_outputs(strict)?))?;
    let relaxed = run(Some(&Knowledge::from_outputs(relaxed)?))?;
    Ok(DownstreamReport {
        relaxed_minus_strict_auc: relaxed.auc - strict.auc,
        strict_minus_none_auc: strict.auc - none.auc,
        none,
        strict,
        relaxed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quality::ctr::tests::synthetic;
    use crate::{Kind, Role, VerifyMode};

    fn outputs(k: &Knowledge, verify: VerifyMode) -> Vec<KnowledgeOutput> {
        let one = |kind, id: u32, text: &String| KnowledgeOutput {
            id: format!("{kind:?}-{id}").to_lowercase(),
            kind,
            group: "g".into(),
            role: Role::Target,
            user_id: (kind == Kind::User).then_some(id),
            item_id: (kind == Kind::Item).then_some(id),
            text: text.clone(),
            token_ids: vec![],
            stop_token: None,
            finish_reason: "stop".into(),
            verify,
            top_k: None,
            tau: None,
            relaxed_tokens: 0,
            completion_tokens: 0,
            forward_passes: 0,
            mean_accepted_length: 0.0,
            elapsed_ms: 0.0,
        };
        let mut out: Vec<KnowledgeOutput> = k
            .users
            .iter()
            .map(|(&id, t)| one(Kind::User, id, t))
            .collect();
        out.extend(k.items.iter().map(|(&id, t)| one(Kind::Item, id, t)));
        out
    }

    #[test]
    fn identical_strict_and_relaxed_knowledge_score_identically_and_beat_none() {
        let (train, heldout, users, items, k) = synthetic();
        let dataset = Dataset {
            users,
            items,
            ratings: vec![],
        };
        let config = CtrConfig {
            text_buckets: 16,
            ..CtrConfig::default()
        };
        let strict = outputs(&k, VerifyMode::Strict);
        let mut relaxed = outputs(&k, VerifyMode::Relaxed);
        // The order of a file's lines must not matter.
        relaxed.reverse();
        let r = downstream_with(&config, &dataset, &train, &heldout, &strict, &relaxed).unwrap();
        assert_eq!(r.strict, r.relaxed);
        assert_eq!(r.relaxed_minus_strict_auc, 0.0);
        assert!(r.strict_minus_none_auc > 0.2, "{r:?}");
    }
}
