//! How a request speculates, as every edge states it: the draft method and the
//! verification rule with its parameters. Each edge (the server's `speculation` object, a
//! knowledge job's record, the command line's flags) reads its own fields into one
//! [`RawSpec`] and parses it here, once, into a [`SpeculationSpec`] or a [`SpecError`]
//! that says what to fix; nothing past the edge sees the raw form.

use specdec_verify::{Acceptance, Relaxed, SamplingParams};

use crate::method::DraftMethod;

/// A speculation as an edge read it, unchecked: each field is the client's own spelling,
/// `None` where it gave none (the default of [`SpeculationSpec::parse`] fills it in).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawSpec {
    /// A draft method's name (see [`DraftMethod::name`]).
    pub method: Option<String>,
    /// The rule's name: `strict` or `relaxed` (see [`Acceptance::NAMES`]).
    pub verify: Option<String>,
    /// With `verify: "relaxed"`: how many of the target's likeliest tokens a draft may be.
    pub top_k: Option<i64>,
    /// With `verify: "relaxed"`: the probability a draft other than the argmax must exceed.
    pub tau: Option<f64>,
}

/// A validated speculation: the draft method and the rule its drafts are verified by.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeculationSpec {
    /// Where drafts come from.
    pub method: DraftMethod,
    /// How they are accepted.
    pub acceptance: Acceptance,
}

impl Default for SpeculationSpec {
    /// Plain decoding, strict (what a request that says nothing gets from the engine).
    fn default() -> Self {
        SpeculationSpec {
            method: DraftMethod::None,
            acceptance: Acceptance::Strict,
        }
    }
}

/// Why a [`RawSpec`] is not a [`SpeculationSpec`]. The message names the raw form's fields;
/// an edge may prefix where they sit (`speculation: `, a flag's name).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpecError {
    /// No draft method has this name (the name, cut to [`MAX_ECHO_CHARS`]).
    #[error("unknown draft method `{0}` (known: {known})", known = known_methods())]
    UnknownMethod(String),
    /// No rule has this name (the name, cut to [`MAX_ECHO_CHARS`]).
    #[error("`verify` must be `{strict}` or `{relaxed}`, got `{0}`", strict = Acceptance::NAMES[0], relaxed = Acceptance::NAMES[1])]
    UnknownRule(String),
    /// `top_k` or `tau` with the strict rule, which has no parameters.
    #[error(
        "`top_k` and `tau` apply only with `verify: \"relaxed\"`: they tune relaxed verification only"
    )]
    StrictWithParameters,
    /// Relaxed parameters out of range (the message says which and why).
    #[error("{0}")]
    Relaxed(String),
    /// A rule that cannot verify the request's sampling (relaxed is greedy only).
    #[error("{0}")]
    Sampling(String),
}

/// The draft methods' names, as an unknown one's error lists them.
fn known_methods() -> String {
    let known: Vec<&str> = DraftMethod::ALL.iter().map(|m| m.name()).collect();
    known.join(", ")
}

/// Most characters of an unknown name a [`SpecError`] repeats.
pub const MAX_ECHO_CHARS: usize = 256;

/// `input` cut to [`MAX_ECHO_CHARS`] characters, marked when cut.
fn echo(input: &str) -> String {
    match input.char_indices().nth(MAX_ECHO_CHARS) {
        None => input.to_string(),
        Some((at, _)) => format!("{}... ({} bytes in all)", &input[..at], input.len()),
    }
}

impl DraftMethod {
    /// The method named `name` (see [`DraftMethod::name`]).
    pub fn parse(name: &str) -> Result<Self, SpecError> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| SpecError::UnknownMethod(echo(name)))
    }
}

impl SpeculationSpec {
    /// The one parser of speculations: `raw`, with `default` filling in what it leaves out.
    /// Without `verify` the rule is the default's kind; a relaxed rule takes the `top_k` and
    /// `tau` it is not given from the default when that is relaxed too, else the paper's
    /// ([`Relaxed::DEFAULT`]). A strict rule refuses `top_k` and `tau`.
    pub fn parse(raw: &RawSpec, default: &SpeculationSpec) -> Result<Self, SpecError> {
        let method = match raw.method.as_deref() {
            Some(name) => DraftMethod::parse(name)?,
            None => default.method,
        };
        let relaxed = match raw.verify.as_deref() {
            None => default.acceptance.is_relaxed(),
            Some(name) if name == Acceptance::NAMES[0] => false,
            Some(name) if name == Acceptance::NAMES[1] => true,
            Some(other) => return Err(SpecError::UnknownRule(echo(other))),
        };
        let acceptance = if relaxed {
            let base = match &default.acceptance {
                Acceptance::Relaxed(r) => *r,
                Acceptance::Strict => Relaxed::DEFAULT,
            };
            let top_k = raw.top_k.unwrap_or(base.top_k() as i64);
            let tau = raw.tau.unwrap_or(f64::from(base.tau()));
            Acceptance::Relaxed(Relaxed::from_wide(top_k, tau).map_err(SpecError::Relaxed)?)
        } else if raw.top_k.is_some() || raw.tau.is_some() {
            return Err(SpecError::StrictWithParameters);
        } else {
            Acceptance::Strict
        };
        Ok(SpeculationSpec { method, acceptance })
    }

    /// Whether this speculation can verify a request sampled with `sampling` (relaxed
    /// verification is greedy only).
    pub fn check_sampling(&self, sampling: &SamplingParams) -> Result<(), SpecError> {
        self.acceptance
            .check_sampling(sampling)
            .map_err(SpecError::Sampling)
    }
}

impl TryFrom<RawSpec> for SpeculationSpec {
    type Error = SpecError;

    /// [`SpeculationSpec::parse`] over [`SpeculationSpec::default`].
    fn try_from(raw: RawSpec) -> Result<Self, SpecError> {
        SpeculationSpec::parse(&raw, &SpeculationSpec::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(
        method: Option<&str>,
        verify: Option<&str>,
        top_k: Option<i64>,
        tau: Option<f64>,
    ) -> RawSpec {
        RawSpec {
            method: method.map(Into::into),
            verify: verify.map(Into::into),
            top_k,
            tau,
        }
    }

    fn relaxed(top_k: usize, tau: f32) -> Acceptance {
        Acceptance::Relaxed(Relaxed::new(top_k, tau).unwrap())
    }

    #[test]
    fn an_empty_raw_form_is_the_default() {
        assert_eq!(
            SpeculationSpec::try_from(RawSpec::default()),
            Ok(SpeculationSpec::default())
        );
        let job = SpeculationSpec {
            method: DraftMethod::Auto,
            acceptance: relaxed(3, 0.2),
        };
        assert_eq!(SpeculationSpec::parse(&RawSpec::default(), &job), Ok(job));
    }

    #[test]
    fn accepted_forms() {
        let strict = SpeculationSpec::default();
        let cases = [
            (
                raw(Some("auto"), None, None, None),
                DraftMethod::Auto,
                Acceptance::Strict,
            ),
            (
                raw(Some("history"), Some("strict"), None, None),
                DraftMethod::History,
                Acceptance::Strict,
            ),
            (
                raw(None, Some("relaxed"), None, None),
                DraftMethod::None,
                Acceptance::Relaxed(Relaxed::DEFAULT),
            ),
            (
                raw(Some("prompt"), Some("relaxed"), Some(3), None),
                DraftMethod::Prompt,
                relaxed(3, 0.1),
            ),
            (
                raw(None, Some("relaxed"), None, Some(0.05)),
                DraftMethod::None,
                relaxed(2, 0.05),
            ),
            (
                raw(None, Some("relaxed"), Some(64), Some(0.0)),
                DraftMethod::None,
                relaxed(64, 0.0),
            ),
            (
                raw(None, Some("relaxed"), Some(1), Some(0.999)),
                DraftMethod::None,
                relaxed(1, 0.999),
            ),
        ];
        for (raw, method, acceptance) in cases {
            assert_eq!(
                SpeculationSpec::parse(&raw, &strict),
                Ok(SpeculationSpec { method, acceptance }),
                "{raw:?}"
            );
        }
        for m in DraftMethod::ALL {
            assert_eq!(DraftMethod::parse(m.name()), Ok(m));
        }
    }

    #[test]
    fn a_relaxed_default_fills_in_what_the_raw_form_leaves_out() {
        let job = SpeculationSpec {
            method: DraftMethod::Trie,
            acceptance: relaxed(3, 0.2),
        };
        let parse = |r: RawSpec| SpeculationSpec::parse(&r, &job).map(|s| s.acceptance);
        assert_eq!(parse(raw(None, None, Some(5), None)), Ok(relaxed(5, 0.2)));
        assert_eq!(parse(raw(None, None, None, Some(0.3))), Ok(relaxed(3, 0.3)));
        assert_eq!(
            parse(raw(None, Some("strict"), None, None)),
            Ok(Acceptance::Strict)
        );
        assert_eq!(
            SpeculationSpec::parse(&raw(Some("none"), None, None, None), &job).map(|s| s.method),
            Ok(DraftMethod::None)
        );
    }

    #[test]
    fn each_refusal_says_what_to_fix() {
        let strict = SpeculationSpec::default();
        let refused = |r: RawSpec| SpeculationSpec::parse(&r, &strict).unwrap_err();
        let e = refused(raw(Some("magic"), None, None, None));
        assert_eq!(e, SpecError::UnknownMethod("magic".into()));
        assert!(
            e.to_string()
                .starts_with("unknown draft method `magic` (known: none, "),
            "{e}"
        );
        let e = refused(raw(None, Some("loose"), None, None));
        assert_eq!(
            e.to_string(),
            "`verify` must be `strict` or `relaxed`, got `loose`"
        );
        for r in [
            raw(None, None, Some(3), None),
            raw(None, Some("strict"), None, Some(0.2)),
        ] {
            let e = refused(r);
            assert_eq!(e, SpecError::StrictWithParameters);
            assert!(e.to_string().contains("apply only with"), "{e}");
            assert!(e.to_string().contains("relaxed verification only"), "{e}");
        }
        for (k, got) in [(0, "got 0"), (65, "got 65"), (-3, "got -3")] {
            let e = refused(raw(None, Some("relaxed"), Some(k), None));
            assert!(matches!(e, SpecError::Relaxed(_)), "{e:?}");
            assert!(e.to_string().contains("top_k must be in 1..=64"), "{e}");
            assert!(e.to_string().ends_with(got), "{e}");
        }
        for tau in [1.0, 1.5, -0.1, f64::NAN, f64::INFINITY] {
            let e = refused(raw(None, Some("relaxed"), None, Some(tau)));
            assert!(e.to_string().contains("tau must be in [0, 1)"), "{e}");
        }
        // Rounded to f32 first: just below 1 in f64 is 1 in f32.
        assert!(matches!(
            refused(raw(None, Some("relaxed"), None, Some(0.999_999_999))),
            SpecError::Relaxed(_)
        ));
    }

    #[test]
    fn echoed_names_are_cut() {
        let long = "x".repeat(10_000);
        let e = SpeculationSpec::try_from(raw(None, Some(&long), None, None)).unwrap_err();
        assert!(e.to_string().contains("... (10000 bytes in all)"), "{e}");
        assert!(e.to_string().len() < 400);
        let e = DraftMethod::parse(&long).unwrap_err();
        assert!(e.to_string().len() < 500);
    }

    #[test]
    fn relaxed_verification_of_a_sampled_request_is_refused() {
        let spec = SpeculationSpec::try_from(raw(None, Some("relaxed"), None, None)).unwrap();
        let sampled = SamplingParams {
            temperature: 0.7,
            ..SamplingParams::default()
        };
        let e = spec.check_sampling(&sampled).unwrap_err();
        assert!(matches!(e, SpecError::Sampling(_)));
        assert!(
            e.to_string()
                .contains("is greedy only: set `temperature` to 0, got 0.7"),
            "{e}"
        );
        assert!(spec.check_sampling(&SamplingParams::default()).is_ok());
        assert!(SpeculationSpec::default().check_sampling(&sampled).is_ok());
    }
}
