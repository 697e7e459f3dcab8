//! `punctual serve`: the consumer service (supervisor, worker and scheduler
//! processes, exec, http and resident handlers, health and metrics).

pub(crate) mod child;
pub(crate) mod cmd;
pub(crate) mod config;
mod connect;
pub(crate) mod handlers;
mod http;
pub(crate) mod metrics;
pub(crate) mod otel;
pub(crate) mod resident;
pub(crate) mod roles;
pub(crate) mod rust;
mod schedules;
pub(crate) mod supervisor;
