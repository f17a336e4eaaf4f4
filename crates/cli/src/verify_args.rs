//! The verification rule options (`--verify`, `--verify-top-k`, `--verify-tau`), shared by
//! every command that generates. Named `--verify-top-k`, not `--top-k`: that is sampling's.
//! The flags are read into the engine's raw form and parsed by its one parser
//! ([`SpeculationSpec::parse`]), as the server's `speculation` and a job's records are.

use clap::builder::PossibleValuesParser;
use clap::Args;
use specdec_engine::{
    Acceptance, DraftMethod, RawSpec, Relaxed, SamplingParams, SpecError, SpeculationSpec,
};

#[derive(Args, Debug, Clone)]
pub struct VerifyArgs {
    /// How drafts are verified: `strict` keeps a draft only where the target itself would
    /// emit it (plain decoding's output); `relaxed` (LASER's rule, greedy only) also keeps a
    /// draft among the target's top-k with probability above tau, so the output may differ
    /// from plain decoding.
    #[arg(
        long = "verify",
        default_value = Acceptance::NAMES[0],
        value_parser = PossibleValuesParser::new(Acceptance::NAMES)
    )]
    pub rule: String,
    /// With --verify relaxed: how many of the target's likeliest tokens a draft may be.
    // Field names are clap's argument ids: `top_k` is sampling's, in the same commands.
    #[arg(long, default_value_t = Relaxed::DEFAULT.top_k())]
    pub verify_top_k: usize,
    /// With --verify relaxed: the probability a draft other than the argmax must exceed.
    #[arg(long, default_value_t = Relaxed::DEFAULT.tau())]
    pub verify_tau: f32,
}

impl VerifyArgs {
    /// Whether `--verify relaxed` was given.
    pub fn is_relaxed(&self) -> bool {
        self.rule == Acceptance::NAMES[1]
    }

    /// The flags in the engine's raw form. Every flag has a default, so `--verify-top-k`
    /// and `--verify-tau` go in with `--verify relaxed` only (a strict rule ignores them).
    pub fn raw(&self) -> RawSpec {
        let relaxed = self.is_relaxed();
        RawSpec {
            method: None,
            verify: Some(self.rule.clone()),
            top_k: relaxed.then(|| i64::try_from(self.verify_top_k).unwrap_or(i64::MAX)),
            tau: relaxed.then(|| f64::from(self.verify_tau)),
        }
    }

    /// `method` verified under these flags, for requests sampled with `sampling`: an error
    /// for out-of-range values and for relaxed verification of a sampled request.
    pub fn spec(
        &self,
        method: DraftMethod,
        sampling: &SamplingParams,
    ) -> anyhow::Result<SpeculationSpec> {
        let default = SpeculationSpec {
            method,
            acceptance: Acceptance::Strict,
        };
        let spec = SpeculationSpec::parse(&self.raw(), &default).map_err(|e| {
            let flags = match e {
                SpecError::Relaxed(_) => "--verify-top-k/--verify-tau",
                _ => "--verify",
            };
            anyhow::anyhow!("{flags}: {e}")
        })?;
        spec.check_sampling(sampling)
            .map_err(|e| anyhow::anyhow!("--verify relaxed: {e}"))?;
        Ok(spec)
    }

    /// The rule alone (for commands that run several methods under it).
    pub fn acceptance(&self, sampling: &SamplingParams) -> anyhow::Result<Acceptance> {
        Ok(self.spec(DraftMethod::None, sampling)?.acceptance)
    }

    /// The relaxed rule these flags' `--verify-top-k` and `--verify-tau` give, whatever
    /// `--verify` says (for commands that run a relaxed configuration beside strict ones).
    pub fn relaxed(&self) -> anyhow::Result<Relaxed> {
        let relaxed = VerifyArgs {
            rule: Acceptance::NAMES[1].into(),
            ..self.clone()
        };
        match relaxed.acceptance(&SamplingParams::default())? {
            Acceptance::Relaxed(r) => Ok(r),
            Acceptance::Strict => unreachable!("--verify relaxed parses to a relaxed rule"),
        }
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
        sampling: crate::sampling_args::SamplingArgs,
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

    #[test]
    fn strict_ignores_the_relaxed_flags_and_relaxed_reads_them() {
        let strict = parse(&["--verify-top-k", "0", "--verify-tau", "3"]);
        assert_eq!(strict.raw().top_k, None);
        assert_eq!(strict.raw().tau, None);
        assert_eq!(
            strict
                .spec(DraftMethod::Auto, &SamplingParams::default())
                .unwrap(),
            SpeculationSpec {
                method: DraftMethod::Auto,
                acceptance: Acceptance::Strict
            }
        );
        let e = strict.relaxed().unwrap_err().to_string();
        assert!(e.starts_with("--verify-top-k/--verify-tau: "), "{e}");
        let relaxed = parse(&["--verify", "relaxed", "--verify-top-k", "5"]);
        assert_eq!(relaxed.raw().top_k, Some(5));
        assert_eq!(relaxed.relaxed().unwrap(), Relaxed::new(5, 0.1).unwrap());
        assert!(Cli::try_parse_from(["x", "--verify", "loose"]).is_err());
    }
}
