//! Which records a process of a sharded job owns: record `id` is in shard `I` of `N` iff
//! `fnv1a64(id) % N == I`. FNV-1a (64-bit, over the id's UTF-8 bytes) is fixed by its
//! definition, unlike std's randomized hasher, so every process, run and machine agrees.

use crate::hash::fnv1a64;
use crate::RecError;

/// Shard `index` of `count` (`index < count`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    index: u64,
    count: u64,
}

/// The environment variables of a Kubernetes Indexed Job: the pod's index (set by
/// Kubernetes) and the Job's completions (set by the manifest).
pub const ENV_INDEX: &str = "JOB_COMPLETION_INDEX";
/// The Job's completions: the shard count (see [`ENV_INDEX`]).
pub const ENV_COUNT: &str = "JOB_COMPLETIONS";

impl Shard {
    /// Shard `index` of `count`; an invalid-option error unless `index < count`.
    pub fn new(index: u64, count: u64) -> Result<Self, RecError> {
        if count == 0 || index >= count {
            return Err(RecError::Invalid(format!(
                "shard {index}/{count}: the index must be below the count (0-based, count >= 1)"
            )));
        }
        Ok(Shard { index, count })
    }

    /// `I/N`, as `--shard` takes it.
    pub fn parse(s: &str) -> Result<Self, RecError> {
        let bad = || RecError::Invalid(format!("shard `{s}` is not I/N (e.g. 0/4)"));
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let i = i.trim().parse().map_err(|_| bad())?;
        let n = n.trim().parse().map_err(|_| bad())?;
        Shard::new(i, n)
    }

    /// The shard to run: `--shard` (`cli`) and the Indexed Job's variables (read through
    /// `env`) must agree where both are given; half of the variables is an error, since
    /// running every record in every pod would silently duplicate the work.
    pub fn resolve(
        cli: Option<Shard>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Shard>, RecError> {
        let read = |name: &str| -> Result<Option<u64>, RecError> {
            env(name)
                .map(|v| {
                    v.trim().parse().map_err(|_| {
                        RecError::Invalid(format!("{name}=`{v}` is not a non-negative integer"))
                    })
                })
                .transpose()
        };
        let (index, count) = (read(ENV_INDEX)?, read(ENV_COUNT)?);
        let from_env = match (index, count) {
            (Some(i), Some(n)) => Some(Shard::new(i, n)?),
            (None, None) => None,
            _ if cli.is_some() => None,
            _ => {
                return Err(RecError::Invalid(format!(
                    "only one of {ENV_INDEX} and {ENV_COUNT} is set: set both (the manifest \
                     sets {ENV_COUNT} to the Job's completions) or pass --shard I/N"
                )))
            }
        };
        match (cli, from_env) {
            (Some(c), Some(e)) if c != e => Err(RecError::Invalid(format!(
                "--shard {c} disagrees with {ENV_INDEX}/{ENV_COUNT} = {e}"
            ))),
            (Some(c), _) => {
                // A lone index must still match the one given.
                match index {
                    Some(i) if i != c.index => Err(RecError::Invalid(format!(
                        "--shard {c} disagrees with {ENV_INDEX}={i}"
                    ))),
                    _ => Ok(Some(c)),
                }
            }
            (None, e) => Ok(e),
        }
    }

    /// Whether the record with this id belongs to this shard.
    pub fn contains(&self, id: &str) -> bool {
        fnv1a64(id.as_bytes()) % self.count == self.index
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn shards_parse_as_index_slash_count() {
        assert_eq!(Shard::parse("1/4").unwrap(), Shard::new(1, 4).unwrap());
        for bad in ["4/4", "1", "a/2", "0/0", "-1/3", "1/2/3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_indexed_job_supplies_the_shard_and_must_agree_with_the_flag() {
        let k8s = [(ENV_INDEX, "2"), (ENV_COUNT, "5")];
        let want = Shard::new(2, 5).unwrap();
        assert_eq!(Shard::resolve(None, env(&k8s)).unwrap(), Some(want));
        assert_eq!(Shard::resolve(Some(want), env(&k8s)).unwrap(), Some(want));
        let other = Shard::new(1, 5).unwrap();
        assert!(Shard::resolve(Some(other), env(&k8s)).is_err());
        assert_eq!(Shard::resolve(None, env(&[])).unwrap(), None);
        assert_eq!(Shard::resolve(Some(other), env(&[])).unwrap(), Some(other));
        let half = [(ENV_INDEX, "2")];
        assert!(Shard::resolve(None, env(&half)).is_err());
        assert!(Shard::resolve(Some(other), env(&half)).is_err());
        assert!(Shard::resolve(None, env(&[(ENV_INDEX, "x"), (ENV_COUNT, "2")])).is_err());
        assert!(Shard::resolve(None, env(&[(ENV_INDEX, "5"), (ENV_COUNT, "5")])).is_err());
    }

    proptest! {
        #[test]
        fn every_id_lands_in_exactly_one_shard(id in "\\PC{0,40}", count in 1u64..64) {
            let owners = (0..count)
                .filter(|&i| Shard::new(i, count).unwrap().contains(&id))
                .count();
            prop_assert_eq!(owners, 1);
        }
    }
}
