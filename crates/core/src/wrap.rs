//! Conversions whose truncation is the rule (TCP sequence numbers and
//! timestamps wrap modulo 2^32): the workspace's one definition lives in
//! `ftnet_wire::seq`; the core's casts go through it.

pub(crate) use ftnet_wire::seq::{len32, mod32};
