//! The phases of the bench protocol, one file each, and the `serve` path
//! (`punctual serve` as a child process) that `serve`, `resident` and
//! `handlers` run. What they share stands in `harness` (jobs, recorder,
//! consumer, loading, the pool) and `stats`; `floor` is the yardstick the
//! script phases (`scripts`, `calls`) measure again beside their own.

mod calls;
mod client_enqueue;
mod drain;
mod enqueue;
pub(crate) mod floor;
mod groups;
pub(crate) mod handlers;
mod idle;
mod precision;
mod promote;
mod resident;
mod scripts;
mod serve;

pub(crate) use calls::calls;
pub(crate) use drain::drain;
pub(crate) use enqueue::enqueue;
pub(crate) use groups::groups;
pub(crate) use idle::idle;
pub(crate) use precision::{precision, precision_load};
pub(crate) use promote::promote;
pub(crate) use resident::resident;
pub(crate) use scripts::scripts;
pub(crate) use serve::serve;
