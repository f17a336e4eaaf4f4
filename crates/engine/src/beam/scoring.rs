//! How a draft model's logits are read: over the whole vocabulary, or over the catalogue's
//! allowed tokens only, as a draft trained on the catalogue-renormalised distribution is.

/// The GGUF metadata key a draft declares its scoring by (`"vocabulary"` or `"catalogue"`;
/// absent: vocabulary).
pub const DRAFT_SCORING_KEY: &str = "specdec.draft.scoring";

/// How the draft scores a step's candidates (the trie children of a draft beam).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DraftScoring {
    /// The candidates' log-probabilities under the full vocabulary softmax (strict
    /// search), renormalised over the candidates for relaxed verification's q.
    #[default]
    Vocabulary,
    /// The draft was trained on the softmax over the candidates alone: its forwards
    /// compute just the candidates' logits (`Want::LastColumns`) and every use
    /// renormalises over them. Far cheaper for a small draft, whose head over a large
    /// vocabulary costs more than its blocks.
    Catalogue,
}

impl DraftScoring {
    /// The metadata value naming this scoring.
    pub fn name(self) -> &'static str {
        match self {
            DraftScoring::Vocabulary => "vocabulary",
            DraftScoring::Catalogue => "catalogue",
        }
    }

    /// The scoring a metadata value names (`None`: the key is absent); `Err` for any other.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value {
            None | Some("vocabulary") => Ok(DraftScoring::Vocabulary),
            Some("catalogue") => Ok(DraftScoring::Catalogue),
            Some(other) => Err(format!(
                "{DRAFT_SCORING_KEY} is `{other}`: expected `vocabulary` or `catalogue`"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for s in [DraftScoring::Vocabulary, DraftScoring::Catalogue] {
            assert_eq!(DraftScoring::parse(Some(s.name())), Ok(s));
        }
        assert_eq!(DraftScoring::parse(None), Ok(DraftScoring::Vocabulary));
        assert!(DraftScoring::parse(Some("catalog")).is_err());
    }
}
