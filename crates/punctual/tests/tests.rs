//! The integration tests of the punctual library, against private redis-server processes.

mod util;

mod bulk;
mod cluster;
mod cold;
mod cold_admin;
mod cold_listing;
mod faults;
mod flow;
mod group_limits;
mod groups;
mod handler;
mod history;
mod integrity;
mod limits;
mod nodes;
mod options;
mod queue;
mod registry;
mod runtime_regressions;
mod schedules;
mod worker;
