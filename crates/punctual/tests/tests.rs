//! The integration tests of the punctual library, against private redis-server processes.

mod util;

mod attempts;
mod bulk;
mod by_id;
mod check;
mod cluster;
mod cold;
mod cold_admin;
mod cold_listing;
mod dead_letters;
mod enqueue_forms;
mod faults;
mod fencing;
mod flow;
mod group_limits;
mod groups;
mod handler;
mod history;
mod ids;
mod leases;
mod limits;
mod many_due;
mod never_early;
mod nodes;
mod options;
mod partitions;
mod recovery;
mod registry;
mod runtime_regressions;
mod schedules;
mod script_arguments;
mod steps;
mod validation;
mod worker;
