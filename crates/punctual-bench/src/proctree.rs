//! CPU time of a process tree from /proc (Linux): `punctual serve`'s own
//! processes (the supervisor, its workers and schedulers: this executable)
//! apart from its handlers' (exec'd programs, resident programs).

use std::collections::HashMap;

/// CPU time of a tree, µs, at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TreeCpu {
    /// Processes running this executable (serve's own).
    pub serve_us: u64,
    /// Every other process of the tree, plus the children serve's
    /// processes reaped (an exec handler's processes, a recycled resident).
    pub handlers_us: u64,
    /// serve's processes seen.
    pub serve_processes: u64,
}

impl TreeCpu {
    /// What was spent between `before` and `self`.
    pub(crate) fn since(&self, before: &TreeCpu) -> TreeCpu {
        TreeCpu {
            serve_us: self.serve_us.saturating_sub(before.serve_us),
            handlers_us: self.handlers_us.saturating_sub(before.handlers_us),
            serve_processes: self.serve_processes,
        }
    }
}

/// One line of /proc/PID/stat: (ppid, utime + stime, cutime + cstime) in
/// clock ticks.
fn stat(pid: u32) -> Option<(u32, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The fields after the command name (which may hold spaces and
/// parentheses): state, ppid (4th field), ..., utime, stime, cutime, cstime
/// (14th to 17th).
fn parse_stat(text: &str) -> Option<(u32, u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some((n(1)? as u32, n(11)? + n(12)?, n(13)? + n(14)?))
}

/// The CPU time of `root` and its descendants now, or None without /proc.
pub(crate) fn tree_cpu(root: u32) -> Option<TreeCpu> {
    let me = std::fs::read_link("/proc/self/exe").ok()?;
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .unwrap_or(100) as u64;
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut stats: HashMap<u32, (u64, u64)> = HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some((ppid, own, reaped)) = stat(pid) {
            children.entry(ppid).or_default().push(pid);
            stats.insert(pid, (own, reaped));
        }
    }
    let mut out = TreeCpu::default();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        let Some(&(own, reaped)) = stats.get(&pid) else {
            continue;
        };
        let serve = std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == me);
        if serve {
            out.serve_us += own * 1_000_000 / tick;
            out.serve_processes += 1;
        } else {
            out.handlers_us += own * 1_000_000 / tick;
        }
        out.handlers_us += reaped * 1_000_000 / tick;
        todo.extend(children.get(&pid).into_iter().flatten());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_spaces_and_parentheses_in_its_name_parses() {
        let line =
            "4242 (php (x) y) S 4240 4242 1 0 -1 4194304 100 0 0 0 37 5 2 1 20 0 1 0 99 1000 50";
        assert_eq!(parse_stat(line), Some((4240, 42, 3)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_tree_is_found_and_counted_as_serve() {
        let t = tree_cpu(std::process::id()).expect("/proc on Linux");
        assert!(t.serve_processes >= 1, "{t:?}");
    }
}
