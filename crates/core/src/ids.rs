//! Typed indices, so that a replica's index in its service, a leg's index
//! in its connection and a service's index in the configuration cannot be
//! taken for one another (`Conn::evict` takes a leg, `Conn::evict_replica`
//! a replica).

/// A service: its index in `Config::services`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ServiceId(pub usize);

/// A replica: its index in its service's `replicas` (the same replica in
/// two services has two of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ReplicaId(pub usize);

/// A replica's leg of one connection: its index in the connection's legs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LegId(pub usize);
