//! Whose cached state a request may reuse: the prefix cache and the drafting pools are
//! both scoped by it.

/// Who may reuse a request's cached prompt prefix, and whose it may reuse. A hit reports
/// its length (`cached_prompt_tokens`) and is faster, so reuse across clients would let one
/// learn another's prompt token by token: only requests of one scope share.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CacheScope {
    /// Every request of this scope shares with every other (one caller's own engine: the
    /// command line, a benchmark, a server without clients to tell apart).
    #[default]
    Shared,
    /// Only requests of the same tenant share.
    Tenant(Tenant),
    /// Reuses nothing and leaves nothing for others.
    Private,
}

/// A client identity for [`CacheScope::Tenant`] (an opaque string: a hash, a user id).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Tenant(String);

impl Tenant {
    /// The tenant identified by `id`.
    pub fn new(id: impl Into<String>) -> Self {
        Tenant(id.into())
    }

    /// The identity (for keys derived from it and the operator's own stores, never for
    /// logs).
    pub fn id(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Tenant {
    /// Never the identity itself (requests are logged).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tenant(..)")
    }
}
