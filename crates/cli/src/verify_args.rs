//! The verification rule options (`--verify`, `--verify-top-k`, `--verify-tau`), shared by
//! every command that generates. Named `--verify-top-k`, not `--top-k`: that is sampling's.

use clap::{Args, ValueEnum};
use specdec_engine::{Acceptance, Relaxed, SamplingParams};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum VerifyRule {
    /// Keep a draft only where the target itself would emit it: plain decoding's output.
    #[default]
    Strict,
    /// LASER's rule (greedy only): also keep a draft among the target's top-k with
    /// probability above tau; the output may differ from plain decoding.
    Relaxed,
}

#[derive(Args, Debug, Clone)]
pub struct VerifyArgs {
    /// How drafts are verified.
    #[arg(long = "verify", value_enum, default_value_t = VerifyRule::Strict)]
    pub rule: VerifyRule,
    /// With --verify relaxed: how many of the target's likeliest tokens a draft may be.
    // Field names are clap's argument ids: `top_k` is sampling's, in the same commands.
    #[arg(long, default_value_t = Relaxed::DEFAULT.top_k())]
    pub verify_top_k: usize,
    /// With --verify relaxed: the probability a draft other than the argmax must exceed.
    #[arg(long, default_value_t = Relaxed::DEFAULT.tau())]
    pub verify_tau: f32,
}

impl VerifyArgs {
    /// The rule for requests sampled with `sampling`: an error for out-of-range values and
    /// for relaxed verification of a sampled request.
    pub fn acceptance(&self, sampling: &SamplingParams) -> anyhow::Result<Acceptance> {
        let acceptance = match self.rule {
            VerifyRule::Strict => Acceptance::Strict,
            VerifyRule::Relaxed => Acceptance::Relaxed(
                Relaxed::new(self.verify_top_k, self.verify_tau)
                    .map_err(|e| anyhow::anyhow!("--verify-top-k/--verify-tau: {e}"))?,
            ),
        };
        acceptance
            .check_sampling(sampling)
            .map_err(|e| anyhow::anyhow!("--verify relaxed: {e}"))?;
        Ok(acceptance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// With sampling's `--top-k` beside it, as in `generate` and `bench`.
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        verify: VerifyArgs,
        #[command(flatten)]
        sampling: crate::generate::SamplingArgs,
    }

    fn parse(args: &[&str]) -> VerifyArgs {
        Cli::parse_from([&["x"], args].concat()).verify
    }

    #[test]
    fn strict_is_the_default_and_relaxed_takes_the_papers_defaults() {
        let greedy = SamplingParams::default();
        assert_eq!(parse(&[]).acceptance(&greedy).unwrap(), Acceptance::Strict);
        assert_eq!(
            parse(&["--verify", "relaxed"]).acceptance(&greedy).unwrap(),
            Acceptance::Relaxed(Relaxed::DEFAULT)
        );
        let custom = parse(&[
            "--verify",
            "relaxed",
            "--verify-top-k",
            "3",
            "--verify-tau",
            "0.2",
        ]);
        assert_eq!(
            custom.acceptance(&greedy).unwrap(),
            Acceptance::Relaxed(Relaxed::new(3, 0.2).unwrap())
        );
    }

    #[test]
    fn bad_values_and_sampled_relaxed_requests_are_refused_with_a_reason() {
        let greedy = SamplingParams::default();
        let bad_k = parse(&["--verify", "relaxed", "--verify-top-k", "0"]);
        assert!(bad_k
            .acceptance(&greedy)
            .unwrap_err()
            .to_string()
            .contains("top_k"));
        let bad_tau = parse(&["--verify", "relaxed", "--verify-tau", "1.5"]);
        assert!(bad_tau
            .acceptance(&greedy)
            .unwrap_err()
            .to_string()
            .contains("tau"));
        let sampled = SamplingParams {
            temperature: 0.7,
            ..SamplingParams::default()
        };
        let err = parse(&["--verify", "relaxed"])
            .acceptance(&sampled)
            .unwrap_err();
        assert!(err.to_string().contains("greedy"), "{err}");
        assert!(parse(&[]).acceptance(&sampled).is_ok(), "strict samples");
    }
}
