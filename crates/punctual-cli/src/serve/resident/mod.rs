//! Resident handlers: long-running programs that take jobs over fd 3 and
//! reply over fd 4, one JSON object per line (the protocol is
//! docs/RESIDENT.md).
//!
//! Each worker process runs one [`Pool`] per resident topic: `processes`
//! managers, each owning one program at a time. The worker's handler
//! closure puts a job on the pool's queue and awaits its outcome; an idle
//! manager (fewer jobs in flight than the program declared) takes it,
//! writes it to fd 3 and routes the reply naming its id back to that
//! handler. Replies only ever reach the handler of the delivery they were
//! sent for, and the worker acks with that delivery's fenced lease token,
//! so a late reply can never ack a re-delivery.
//!
//! Its rooms, each importing only those after it: `pool` (a topic's pool,
//! what the worker calls), `manager` (one slot: the run loop), `request`
//! (a job on the pool's queue), `program` (one running program: spawn,
//! handshake, retire), `pipes` (fd 3 and fd 4 as the manager writes and
//! reads them, with no task between), `logs` (its stdout and stderr),
//! `protocol` (the lines on fd 3 and fd 4).

mod logs;
mod manager;
mod pipes;
mod pool;
mod program;
mod protocol;
mod request;

pub(crate) use manager::Registered;
pub(crate) use pool::{FirstStart, Pool};
pub(crate) use program::{StopTimes, Takes};
pub(crate) use protocol::{parse_reply_any, PROTOCOL};
