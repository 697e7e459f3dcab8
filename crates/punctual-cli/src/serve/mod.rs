//! `punctual serve`: the consumer service (supervisor, worker and scheduler
//! processes, exec, http and resident handlers, health and metrics).

pub mod cmd;
pub mod config;
pub mod handlers;
mod http;
pub mod metrics;
pub mod resident;
pub mod roles;
pub mod rust;
pub mod supervisor;
