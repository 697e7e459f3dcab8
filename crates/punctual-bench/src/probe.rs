//! Where the time of a phase went: Redis CPU (INFO cpu, main thread), the
//! commands Redis ran (INFO stats and commandstats, script-internal
//! commands included), and this process's CPU (getrusage), as deltas
//! between two snapshots.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::Result;
use nix::sys::resource::{getrusage, UsageWho};
use serde::Serialize;

use super::target::Target;

/// Counters at one instant.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// INFO stats total_commands_processed (script-internal commands count).
    commands: u64,
    /// Redis main thread CPU, seconds (user + sys), summed over masters.
    redis_cpu: f64,
    /// Per master: main thread CPU (s) and run-queue wait (ns, when local).
    nodes: Vec<(f64, Option<u64>)>,
    /// command -> (calls, usec).
    cmdstats: HashMap<String, (u64, u64)>,
    /// INFO memory used_memory.
    pub used_memory: u64,
    /// This process's CPU, microseconds (user + sys, all threads).
    self_cpu_us: u64,
    /// Waited-for children's CPU, microseconds.
    children_cpu_us: u64,
    /// Time Redis's main thread spent runnable but waiting for a CPU, ns
    /// (/proc schedstat; only for a Redis on this host), summed over masters.
    redis_wait_ns: Option<u64>,
    /// The same for every thread of this process, summed.
    self_wait_ns: u64,
}

/// The run-queue wait (second field of schedstat) of a thread, ns.
fn runqueue_wait_ns(path: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The run-queue wait of every thread of this process, ns.
fn self_wait_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| runqueue_wait_ns(&format!("{}/schedstat", t.path().display())))
                .sum()
        })
        .unwrap_or(0)
}

fn cpu_us(who: UsageWho) -> u64 {
    getrusage(who)
        .map(|u| {
            let t =
                |tv: nix::sys::time::TimeVal| tv.tv_sec() as u64 * 1_000_000 + tv.tv_usec() as u64;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0)
}

impl Snapshot {
    /// Reads the counters now (one INFO call per master; a cluster's
    /// masters are summed).
    pub(crate) async fn take(target: &Target) -> Result<Snapshot> {
        let infos = futures::future::try_join_all(
            target
                .masters
                .iter()
                .map(|m| m.node.info(&["stats", "cpu", "commandstats", "memory"])),
        )
        .await?;
        let mut commands = 0u64;
        let mut redis_cpu = 0.0;
        let mut used_memory = 0u64;
        let mut nodes = Vec::with_capacity(infos.len());
        let mut cmdstats: HashMap<String, (u64, u64)> = HashMap::new();
        for (m, node) in infos.iter().zip(&target.masters) {
            let num = |k: &str| m.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            for (k, v) in m {
                let Some(cmd) = k.strip_prefix("cmdstat_") else {
                    continue;
                };
                let field = |name: &str| {
                    v.split(',')
                        .find_map(|kv| kv.strip_prefix(name))
                        .and_then(|x| x.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                let c = cmdstats.entry(cmd.to_string()).or_default();
                c.0 += field("calls=");
                c.1 += field("usec=");
            }
            let cpu = num("used_cpu_user_main_thread") + num("used_cpu_sys_main_thread");
            commands += num("total_commands_processed") as u64;
            used_memory += num("used_memory") as u64;
            redis_cpu += cpu;
            let wait = node
                .pid
                .and_then(|pid| runqueue_wait_ns(&format!("/proc/{pid}/schedstat")));
            nodes.push((cpu, wait));
        }
        let waits: Vec<u64> = nodes.iter().filter_map(|n| n.1).collect();
        Ok(Snapshot {
            commands,
            redis_cpu,
            nodes,
            cmdstats,
            used_memory,
            self_cpu_us: cpu_us(UsageWho::RUSAGE_SELF),
            children_cpu_us: cpu_us(UsageWho::RUSAGE_CHILDREN),
            redis_wait_ns: (!waits.is_empty()).then(|| waits.iter().sum()),
            self_wait_ns: self_wait_ns(),
        })
    }

    /// Commands Redis processed since `before`, less the INFO calls of the
    /// snapshots themselves.
    pub(crate) fn commands_since(&self, before: &Snapshot) -> u64 {
        let infos = self.calls("info").saturating_sub(before.calls("info"));
        self.commands
            .saturating_sub(before.commands)
            .saturating_sub(infos)
    }

    /// Calls per command since `before` (the snapshots' INFO left out).
    pub(crate) fn calls_since(&self, before: &Snapshot) -> BTreeMap<String, u64> {
        self.cmdstats
            .iter()
            .filter(|(cmd, _)| cmd.as_str() != "info")
            .map(|(cmd, c)| (cmd.clone(), c.0.saturating_sub(before.calls(cmd))))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    fn calls(&self, cmd: &str) -> u64 {
        self.cmdstats.get(cmd).map_or(0, |c| c.0)
    }

    /// Script calls since `before` and the microseconds Redis spent in them
    /// (commandstats of EVALSHA and EVAL).
    pub(crate) fn scripts_since(&self, before: &Snapshot) -> (u64, u64) {
        ["evalsha", "eval"].iter().fold((0, 0), |(c, u), cmd| {
            let (c1, u1) = self.cmdstats.get(*cmd).copied().unwrap_or((0, 0));
            let (c0, u0) = before.cmdstats.get(*cmd).copied().unwrap_or((0, 0));
            (c + c1.saturating_sub(c0), u + u1.saturating_sub(u0))
        })
    }

    /// Redis main-thread CPU since `before`, microseconds.
    pub(crate) fn redis_cpu_us_since(&self, before: &Snapshot) -> f64 {
        ((self.redis_cpu - before.redis_cpu) * 1e6).max(0.0)
    }

    /// The CPU of waited-for children since `before`, microseconds.
    pub(crate) fn children_cpu_since(&self, before: &Snapshot) -> u64 {
        self.children_cpu_us.saturating_sub(before.children_cpu_us)
    }

    /// The profile of `jobs` jobs handled between `before` and `self`.
    pub(crate) fn profile(&self, before: &Snapshot, jobs: u64, wall: Duration) -> Profile {
        let n = jobs.max(1) as f64;
        let wall_s = wall.as_secs_f64().max(1e-9);
        let redis_cpu = (self.redis_cpu - before.redis_cpu).max(0.0);
        let client_cpu = self.self_cpu_us.saturating_sub(before.self_cpu_us) as f64 / 1e6;
        let mut commands: Vec<CommandCost> = self
            .cmdstats
            .iter()
            .filter(|(cmd, _)| cmd.as_str() != "info")
            .filter_map(|(cmd, &(calls, usec))| {
                let (c0, u0) = before.cmdstats.get(cmd).copied().unwrap_or((0, 0));
                let calls = calls.saturating_sub(c0);
                (calls > 0).then(|| CommandCost {
                    cmd: cmd.clone(),
                    calls_per_job: round(calls as f64 / n, 4),
                    us_per_call: round(usec.saturating_sub(u0) as f64 / calls as f64, 2),
                    us_per_job: round(usec.saturating_sub(u0) as f64 / n, 3),
                })
            })
            .collect();
        commands.sort_by(|a, b| b.us_per_job.total_cmp(&a.us_per_job));
        commands.truncate(10);
        let scripts: u64 = ["evalsha", "eval", "evalsha_ro", "eval_ro"]
            .iter()
            .map(|c| self.calls(c).saturating_sub(before.calls(c)))
            .sum();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let redis_busy = redis_cpu / wall_s;
        let client_busy = client_cpu / wall_s;
        let redis_waiting = match (self.redis_wait_ns, before.redis_wait_ns) {
            (Some(a), Some(b)) => Some(a.saturating_sub(b) as f64 / 1e9 / wall_s),
            _ => None,
        };
        let client_waiting =
            self.self_wait_ns.saturating_sub(before.self_wait_ns) as f64 / 1e9 / wall_s;
        // Per master (one for a single Redis): busy, and busy + waiting.
        let per_node: Vec<(f64, f64)> = self
            .nodes
            .iter()
            .zip(&before.nodes)
            .map(|(a, b)| {
                let busy = (a.0 - b.0).max(0.0) / wall_s;
                let wait = match (a.1, b.1) {
                    (Some(x), Some(y)) => x.saturating_sub(y) as f64 / 1e9 / wall_s,
                    _ => 0.0,
                };
                (busy, busy + wait)
            })
            .collect();
        let busiest = per_node.iter().map(|n| n.0).fold(0.0, f64::max);
        let busiest_with_wait = per_node.iter().map(|n| n.1).fold(0.0, f64::max);
        let cluster = self.nodes.len() > 1;
        let bound = if busiest >= 0.8 {
            if cluster {
                "redis-cpu (the busiest master)"
            } else {
                "redis-cpu"
            }
        } else if busiest_with_wait >= 0.8 {
            "redis-cpu, shared (Redis waited for a core)"
        } else if redis_busy + client_busy >= 0.8 * cores {
            "cpu (all cores busy)"
        } else if client_busy >= 0.8 {
            "client-cpu"
        } else if redis_busy + redis_waiting.unwrap_or(0.0) + client_busy + client_waiting
            >= 0.8 * cores
        {
            "cpu, shared (threads waited for a core)"
        } else {
            "latency (round trips, waits)"
        };
        Profile {
            wall_s: round(wall_s, 3),
            redis_cpu_us_per_job: round(redis_cpu * 1e6 / n, 2),
            redis_busy_pct: round(100.0 * redis_busy, 1),
            redis_waiting_pct: redis_waiting.map(|w| round(100.0 * w, 1)),
            redis_masters: cluster.then_some(self.nodes.len()),
            redis_busy_by_master_pct: cluster
                .then(|| per_node.iter().map(|n| round(100.0 * n.0, 1)).collect()),
            client_cpu_us_per_job: round(client_cpu * 1e6 / n, 2),
            client_cpu_pct: round(100.0 * client_busy, 1),
            client_waiting_pct: round(100.0 * client_waiting, 1),
            redis_cmds_per_job: round(self.commands_since(before) as f64 / n, 3),
            script_calls_per_1k_jobs: round(scripts as f64 * 1000.0 / n, 2),
            bound,
            commands,
        }
    }
}

/// Where a phase's time went, per job.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Profile {
    /// Wall time measured.
    pub wall_s: f64,
    /// Redis main-thread CPU per job.
    pub redis_cpu_us_per_job: f64,
    /// Redis main-thread CPU over wall time (100: Redis saturated).
    pub redis_busy_pct: f64,
    /// Time Redis's main thread was runnable but had no core, over wall
    /// time (a shared machine; absent when Redis is on another host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_waiting_pct: Option<f64>,
    /// A cluster's masters (the Redis figures above are their sums).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_masters: Option<usize>,
    /// A cluster: each master's main-thread CPU over wall time, in the
    /// order of their addresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_busy_by_master_pct: Option<Vec<f64>>,
    /// This process's CPU per job (all threads).
    pub client_cpu_us_per_job: f64,
    /// This process's CPU over wall time (100 per core).
    pub client_cpu_pct: f64,
    /// Time this process's threads were runnable but had no core, summed,
    /// over wall time.
    pub client_waiting_pct: f64,
    /// Commands Redis ran per job, script-internal ones included.
    pub redis_cmds_per_job: f64,
    /// Script calls (EVALSHA: one round trip each) per 1,000 jobs.
    pub script_calls_per_1k_jobs: f64,
    /// A heuristic: what most likely limits the phase.
    pub bound: &'static str,
    /// The commands that cost Redis the most time, per job (EVALSHA's time
    /// includes the commands its script runs, listed on their own too).
    pub commands: Vec<CommandCost>,
}

/// One command's share.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CommandCost {
    pub cmd: String,
    pub calls_per_job: f64,
    pub us_per_call: f64,
    pub us_per_job: f64,
}

/// `x` rounded to `digits` decimals.
pub(crate) fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

impl Profile {
    /// Two lines for the text report.
    pub(crate) fn text(&self) -> String {
        let top: Vec<String> = self
            .commands
            .iter()
            .take(5)
            .map(|c| format!("{} {:.2}", c.cmd, c.us_per_job))
            .collect();
        let masters = self
            .redis_busy_by_master_pct
            .as_ref()
            .map(|b| {
                let each: Vec<String> = b.iter().map(|x| format!("{x:.0}%")).collect();
                format!(", {} masters: {}", b.len(), each.join(" "))
            })
            .unwrap_or_default();
        format!(
            "           Redis {:.2} µs/job ({:.0}% busy{}{masters}), client {:.2} µs/job ({:.0}% of a core), {:.2} commands/job, {:.1} script calls/1k jobs; bound: {}\n           Redis µs/job by command: {}",
            self.redis_cpu_us_per_job,
            self.redis_busy_pct,
            self.redis_waiting_pct
                .map(|w| format!(", {w:.0}% waiting for a core"))
                .unwrap_or_default(),
            self.client_cpu_us_per_job,
            self.client_cpu_pct,
            self.redis_cmds_per_job,
            self.script_calls_per_1k_jobs,
            self.bound,
            top.join(", ")
        )
    }
}
