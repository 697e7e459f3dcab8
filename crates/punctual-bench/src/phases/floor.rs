//! The `floor` phase: the machine's own yardstick. The same key layout as
//! punctual's (records in the jobs hash in punctual's record format, due
//! times in pool, ready and running sorted sets) driven by the leanest
//! scripts that still do each step's Redis work: no validation, no state
//! checks, no counters, no fencing tokens, no wake-ups, no per-job Lua
//! beyond building the variadic argument lists. They live here, in the
//! bench: they are a yardstick, not product code.
//!
//! Measured in the same run as the other phases, the floor turns every
//! figure into a ratio (Redis µs per job ÷ floor µs per job) that holds
//! from one machine to the next, where absolute figures do not.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, Result};
use redis::Script;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::harness::{payload, Left};
use crate::probe::{round, Snapshot};
use crate::target::keys_of;
use crate::{Bench, Report};

/// Jobs per call, as in the scripts phase.
const CHUNK: usize = punctual::MAX_BATCH;

/// Calls `redis.call(cmd, key, ...)` in slices, so no unpack() grows past
/// Lua's stack. Shared by the four scripts. An HSET or ZADD of 16 entries
/// or more first converts a listpack-encoded key with one argument over 64
/// bytes, removed at once, as punctual's scripts do (`variadic`, lua/includes/bulk.lua;
/// PROTOCOL.md "Bulk writes"): the leanest way to do that Redis work.
const CHUNKED: &str = r#"
local LONG = '\0' .. string.rep('-', 64)
local function chunked(cmd, key, args)
  local n = #args
  local bulk = n >= 32 and (cmd == 'HSET' or cmd == 'ZADD')
  local i = 1
  while i <= n do
    local j = i + 3999
    if j > n then j = n end
    if bulk and i == 1 and cmd == 'HSET' then
      redis.call(cmd, key, '', LONG, unpack(args, i, j))
    elseif bulk and i == 1 then
      redis.call(cmd, key, '0', LONG, unpack(args, i, j))
    else
      redis.call(cmd, key, unpack(args, i, j))
    end
    i = j + 1
  end
  if bulk and cmd == 'HSET' then redis.call('HDEL', key, '') end
  if bulk and cmd == 'ZADD' then redis.call('ZREM', key, LONG) end
end
"#;

/// KEYS pool, jobs. ARGV: triples id, due ms, record.
const ENQUEUE: &str = r#"
local hs, za = {}, {}
for i = 1, #ARGV, 3 do
  hs[#hs + 1] = ARGV[i]
  hs[#hs + 1] = ARGV[i + 2]
  za[#za + 1] = ARGV[i + 1]
  za[#za + 1] = ARGV[i]
end
chunked('HSET', KEYS[2], hs)
chunked('ZADD', KEYS[1], za)
return #za / 2
"#;

/// KEYS pool, ready. ARGV[1] batch. Moves due jobs pool -> ready. The
/// jobs read are the pool's first ones, so they leave it by rank (one walk
/// of the skiplist; a ZREM looks each up), as punctual's tick and claim do.
const PROMOTE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[1], 'WITHSCORES')
if #due == 0 then return 0 end
local ids, moves = {}, {}
for i = 1, #due, 2 do
  ids[#ids + 1] = due[i]
  moves[#moves + 1] = due[i + 1]
  moves[#moves + 1] = due[i]
end
chunked('ZADD', KEYS[2], moves)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1)
return #ids
"#;

/// KEYS ready, running, jobs. ARGV[1] k, ARGV[2] lease ms (ready's first
/// ids, which leave it by rank, as the promote's). Returns the ids
/// and their records, raw. The deadline goes to ZADD as a string made once:
/// a Lua number is formatted per argument ("%.17g"), which punctual's claim
/// does not pay either.
const CLAIM: &str = r#"
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then return {} end
local t = redis.call('TIME')
local deadline = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2]))
local recs = redis.call('HMGET', KEYS[3], unpack(ids))
local leases = {}
for i, id in ipairs(ids) do
  leases[2 * i - 1] = deadline
  leases[2 * i] = id
end
chunked('ZADD', KEYS[2], leases)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1)
return { ids, recs }
"#;

/// KEYS running, jobs. ARGV: ids. Deletes the leases and the records.
const ACK: &str = r#"
local n = redis.call('ZREM', KEYS[1], unpack(ARGV))
redis.call('HDEL', KEYS[2], unpack(ARGV))
return n
"#;

fn script(body: &str) -> Script {
    Script::new(&format!("{CHUNKED}{body}"))
}

/// The floor's id of job `i`: 12 bytes, as long as punctual's generated ids.
fn id_of(i: u64) -> String {
    format!("f{i:011}")
}

fn job_of(id: &str) -> Option<u64> {
    id.strip_prefix('f')?.parse().ok()
}

/// A record in punctual's format ("M:D:G:B:E:" + error + payload) with
/// the topic's defaults and no error, so the floor stores what punctual stores.
fn record(due_ms: i64, gap_ms: i64, payload: &[u8]) -> Vec<u8> {
    let mut r = format!(":{}:{}::0:", b36(due_ms), b36(gap_ms)).into_bytes();
    r.extend_from_slice(payload);
    r
}

fn b36(mut n: i64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n <= 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII")
}

/// Per step: (script µs per job, Redis main-thread CPU µs per job).
#[derive(Default)]
struct Steps {
    script: Map<String, Value>,
    cpu: Map<String, Value>,
}

impl Steps {
    fn add(&mut self, name: &str, before: &Snapshot, after: &Snapshot, jobs: u64) {
        let jobs = jobs.max(1) as f64;
        let (_, usec) = after.scripts_since(before);
        self.script
            .insert(name.into(), json!(round(usec as f64 / jobs, 2)));
        self.cpu.insert(
            name.into(),
            json!(round(after.redis_cpu_us_since(before) / jobs, 2)),
        );
    }
}

fn get(m: &Map<String, Value>, k: &str) -> f64 {
    m.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

/// The counts of a floor run that is not ok.
#[derive(Serialize)]
pub(crate) struct Counts {
    created: u64,
    promoted: u64,
    claimed: u64,
    doubled: u64,
    strays: u64,
    bad_records: u64,
    acked: u64,
    left: Left,
}

/// One run of the floor's four steps.
pub(crate) struct Run {
    steps: Steps,
    pub(crate) ok: bool,
    pub(crate) counts: Option<Counts>,
}

impl Run {
    /// Script µs per job of each step (per call, with one job per call).
    pub(crate) fn script_us(&self) -> &Map<String, Value> {
        &self.steps.script
    }
}

/// `floor`: N jobs (due in 50 ms) through the floor's enqueue, promote,
/// claim and ack, one call of 1,000 jobs at a time, nothing else running.
/// Every job must be claimed exactly once and acked.
pub(crate) async fn floor(b: &Bench) -> Result<Report> {
    let n = b.args.n;
    let Run { steps, ok, counts } = run(b, n, CHUNK).await?;
    let path = |m: &Map<String, Value>| get(m, "promote") + get(m, "claim") + get(m, "ack");
    let (path_us, full_us) = (
        path(&steps.script),
        path(&steps.script) + get(&steps.script, "enqueue"),
    );
    #[derive(Serialize)]
    struct Floor<'a> {
        n: u64,
        batch: u64,
        script_us_per_job: &'a Map<String, Value>,
        redis_cpu_us_per_job: &'a Map<String, Value>,
        path_us_per_job: f64,
        full_path_us_per_job: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        partitions: Option<u32>,
        ok: bool,
        #[serde(flatten)]
        counts: Option<Counts>,
    }
    let mut r = Report::of(
        "floor",
        &Floor {
            n,
            batch: CHUNK as u64,
            script_us_per_job: &steps.script,
            redis_cpu_us_per_job: &steps.cpu,
            path_us_per_job: round(path_us, 2),
            full_path_us_per_job: round(full_us, 2),
            partitions: (b.args.partitions > 1).then_some(b.args.partitions),
            ok,
            counts,
        },
    );
    let s = |k: &str| get(&steps.script, k);
    r.text = format!(
        "{:<10} the leanest scripts on the same layout (batches of {CHUNK}), Redis µs per job: enqueue {}, promote {}, claim {}, ack {}; promote + claim + ack = {:.2}, with enqueue {:.2}  {}",
        "floor",
        s("enqueue"),
        s("promote"),
        s("claim"),
        s("ack"),
        path_us,
        full_us,
        if ok { "ok" } else { "NOT OK" }
    );
    Ok(r)
}

/// The floor's enqueue, promote, claim and ack of `n` jobs (due in 50 ms),
/// `chunk` jobs per call, nothing else running: each step's Redis time per
/// job, and whether every job was claimed exactly once and acked.
pub(crate) async fn run(b: &Bench, n: u64, chunk: usize) -> Result<Run> {
    let (enqueue, promote, claim, ack) =
        (script(ENQUEUE), script(PROMOTE), script(CLAIM), script(ACK));
    let mut conn = b.target.conn();
    let parts = &b.target.parts;
    let bar = b.bar(4 * n, "floor");
    let mut steps = Steps::default();

    // Load the scripts (on the node of each partition) before measuring.
    for p in parts {
        let _: i64 = ack
            .key(keys_of(p).running())
            .key(keys_of(p).jobs())
            .arg("warm-up")
            .invoke_async(&mut conn)
            .await?;
        let _: i64 = promote
            .key(keys_of(p).pool())
            .key(keys_of(p).ready())
            .arg(1)
            .invoke_async(&mut conn)
            .await?;
        let _: redis::Value = claim
            .key(keys_of(p).ready())
            .key(keys_of(p).running())
            .key(keys_of(p).jobs())
            .arg(1)
            .arg(1)
            .invoke_async(&mut conn)
            .await?;
    }

    // Jobs are spread over the partitions in turn, a call of 1,000 at a time.
    let now = b.target.now_ms().await?;
    let due = now + 50;
    let calls: Vec<_> = (0..n)
        .step_by(chunk)
        .enumerate()
        .map(|(c, s)| {
            let part = &parts[c % parts.len()];
            let mut inv = enqueue.prepare_invoke();
            inv.key(keys_of(part).pool()).key(keys_of(part).jobs());
            for i in s..(s + chunk as u64).min(n) {
                inv.arg(id_of(i)).arg(due).arg(record(due, 50, &payload(i)));
            }
            inv
        })
        .collect();
    let before = Snapshot::take(&b.target).await?;
    let mut created = 0u64;
    for inv in &calls {
        let k: u64 = inv
            .invoke_async(&mut conn)
            .await
            .context("floor: enqueue")?;
        created += k;
        bar.inc(k);
    }
    let after = Snapshot::take(&b.target).await?;
    steps.add("enqueue", &before, &after, n);
    let wait = due - b.target.now_ms().await? + 2;
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }

    let before = Snapshot::take(&b.target).await?;
    let mut promoted = 0u64;
    for p in parts {
        loop {
            let k: u64 = promote
                .key(keys_of(p).pool())
                .key(keys_of(p).ready())
                .arg(chunk)
                .invoke_async(&mut conn)
                .await
                .context("floor: promote")?;
            promoted += k;
            bar.inc(k);
            if k < chunk as u64 {
                break;
            }
        }
    }
    let after = Snapshot::take(&b.target).await?;
    steps.add("promote", &before, &after, promoted);

    let before = Snapshot::take(&b.target).await?;
    let mut claimed: Vec<Vec<String>> = vec![Vec::new(); parts.len()];
    let mut seen: HashSet<u64> = HashSet::with_capacity(n as usize);
    let (mut doubled, mut strays, mut bad_records) = (0u64, 0u64, 0u64);
    for (p, held) in parts.iter().zip(claimed.iter_mut()) {
        loop {
            let got: Vec<Vec<Option<Vec<u8>>>> = claim
                .key(keys_of(p).ready())
                .key(keys_of(p).running())
                .key(keys_of(p).jobs())
                .arg(chunk)
                .arg(60_000)
                .invoke_async(&mut conn)
                .await
                .context("floor: claim")?;
            let (Some(ids), Some(recs)) = (got.first(), got.get(1)) else {
                break;
            };
            bar.inc(ids.len() as u64);
            for (id, rec) in ids.iter().zip(recs) {
                let id = String::from_utf8_lossy(id.as_deref().unwrap_or_default()).into_owned();
                match job_of(&id) {
                    Some(i) if i < n => {
                        if !seen.insert(i) {
                            doubled += 1;
                        }
                        if !rec.as_deref().is_some_and(|r| r.ends_with(&payload(i))) {
                            bad_records += 1;
                        }
                    }
                    _ => strays += 1,
                }
                held.push(id);
            }
        }
    }
    let n_claimed: u64 = claimed.iter().map(|c| c.len() as u64).sum();
    let after = Snapshot::take(&b.target).await?;
    steps.add("claim", &before, &after, n_claimed);

    let before = Snapshot::take(&b.target).await?;
    let mut acked = 0u64;
    for (p, held) in parts.iter().zip(&claimed) {
        for ids in held.chunks(chunk) {
            let k: u64 = ack
                .key(keys_of(p).running())
                .key(keys_of(p).jobs())
                .arg(ids)
                .invoke_async(&mut conn)
                .await
                .context("floor: ack")?;
            acked += k;
            bar.inc(ids.len() as u64);
        }
    }
    let after = Snapshot::take(&b.target).await?;
    steps.add("ack", &before, &after, acked);
    bar.finish_and_clear();

    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let ok = created == n
        && promoted == n
        && n_claimed == n
        && seen.len() as u64 == n
        && doubled == 0
        && strays == 0
        && bad_records == 0
        && acked == n
        && sets == [0; 4]
        && records == 0;
    Ok(Run {
        steps,
        ok,
        counts: (!ok).then(|| Counts {
            created,
            promoted,
            claimed: n_claimed,
            doubled,
            strays,
            bad_records,
            acked,
            left: Left::of(sets, Some(records)),
        }),
    })
}

/// The scripts phase's ratios to a floor's script µs per job (`floor`):
/// each step, the path (promote, claim, ack), the full path (with
/// enqueue), the claim from the pool against the floor's promote and claim,
/// and the steady flow's full path (enqueue, claim from the pool, ack)
/// against the floor's full path.
pub(crate) fn path_ratios(
    mine: &Map<String, Value>,
    floor: &Map<String, Value>,
) -> Map<String, Value> {
    let ratio = |x: f64, f: f64| (f > 0.0 && x > 0.0).then(|| round(x / f, 2));
    let mut out = Map::new();
    for k in ["enqueue", "promote", "claim", "ack"] {
        if let Some(x) = ratio(get(mine, k), get(floor, k)) {
            out.insert(k.into(), json!(x));
        }
    }
    let path = |m: &Map<String, Value>| get(m, "promote") + get(m, "claim") + get(m, "ack");
    let full = |m: &Map<String, Value>| path(m) + get(m, "enqueue");
    if let Some(x) = ratio(path(mine), path(floor)) {
        out.insert("path".into(), json!(x));
    }
    if let Some(x) = ratio(full(mine), full(floor)) {
        out.insert("full_path".into(), json!(x));
    }
    // The steady flow's path: a due job goes pool -> running in one claim,
    // where the floor promotes it and then claims it. Against the floor's
    // promote + claim, and the whole path against the floor's whole path.
    let fpc = get(floor, "promote") + get(floor, "claim");
    if let Some(x) = ratio(get(mine, "claim_pool"), fpc) {
        out.insert("claim_pool".into(), json!(x));
    }
    let steady = get(mine, "enqueue") + get(mine, "claim_pool") + get(mine, "ack");
    if mine.contains_key("claim_pool") {
        if let Some(x) = ratio(steady, full(floor)) {
            out.insert("steady_full_path".into(), json!(x));
        }
    }
    out
}

/// `path_ratios` as text: "enqueue 1.2, promote 1.0, ...".
pub(crate) fn ratios_text(out: &Map<String, Value>) -> String {
    let text: Vec<String> = [
        "enqueue",
        "promote",
        "claim",
        "ack",
        "path",
        "full_path",
        "claim_pool",
        "steady_full_path",
    ]
    .iter()
    .filter_map(|k| out.get(*k).map(|v| format!("{k} {v}")))
    .collect();
    text.join(", ")
}

/// The mean of floor runs' script µs per job, step by step.
pub(crate) fn mean_script_us(runs: &[&Run]) -> Map<String, Value> {
    let mut out = Map::new();
    for k in ["enqueue", "promote", "claim", "ack"] {
        let sum: f64 = runs.iter().map(|r| get(r.script_us(), k)).sum();
        out.insert(k.into(), json!(round(sum / runs.len().max(1) as f64, 2)));
    }
    out
}

/// Adds to a report its ratios to the floor measured in the same run:
/// Redis µs per job ÷ floor µs per job (1.0: punctual costs Redis no more
/// than the leanest scripts doing the same work).
pub(crate) fn add_ratios(r: &mut Report, floor: &Report) {
    let fmap = |k: &str| match floor.get(k) {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let (fscript, fcpu) = (fmap("script_us_per_job"), fmap("redis_cpu_us_per_job"));
    let ratio = |x: f64, f: f64| (f > 0.0 && x > 0.0).then(|| round(x / f, 2));
    if r.phase() == "scripts" {
        let Some(Value::Object(mine)) = r.get("script_us_per_job").cloned() else {
            return;
        };
        let out = path_ratios(&mine, &fscript);
        let path = |m: &Map<String, Value>| get(m, "promote") + get(m, "claim") + get(m, "ack");
        let full = |m: &Map<String, Value>| path(m) + get(m, "enqueue");
        r.text
            .push_str(&format!("\n           × floor: {}", ratios_text(&out)));
        #[derive(Serialize)]
        struct Ratios {
            full_path_us_per_job: f64,
            floor_ratio: Map<String, Value>,
        }
        r.extend(&Ratios {
            full_path_us_per_job: round(full(&mine), 2),
            floor_ratio: out,
        });
        return;
    }
    if r.phase() == "groups" {
        // Each case's claim (EVALSHA's time per job) over the floor's claim.
        let Some(Value::Object(claim)) = r.get("claim_us_per_job").cloned() else {
            return;
        };
        let f = get(&fscript, "claim");
        let mut out = Map::new();
        for (case, us) in &claim {
            if let Some(x) = ratio(us.as_f64().unwrap_or(0.0), f) {
                out.insert(case.clone(), json!(x));
            }
        }
        let text: Vec<String> = out.iter().map(|(k, v)| format!("{k} {v}")).collect();
        r.text.push_str(&format!(
            "\n           claim × the floor's claim ({f} µs per job): {}",
            text.join(", ")
        ));
        #[derive(Serialize)]
        struct Ratios {
            claim_x_floor: Map<String, Value>,
        }
        r.extend(&Ratios { claim_x_floor: out });
        return;
    }
    // Throughput phases: Redis main-thread CPU per job against the floor's
    // for the same steps.
    let steps: &[&str] = match r.phase() {
        "enqueue" => &["enqueue"],
        "promote" => &["promote"],
        // drain and consume load jobs already due: enqueue puts them in
        // ready, no promote. serve enqueues inside its window.
        "drain" | "consume" => &["claim", "ack"],
        "serve" => &["enqueue", "claim", "ack"],
        _ => return,
    };
    let f: f64 = steps.iter().map(|k| get(&fcpu, k)).sum();
    let mine = r
        .get("profile")
        .and_then(|p| p.get("redis_cpu_us_per_job"))
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    if let Some(x) = ratio(mine, f) {
        #[derive(Serialize)]
        struct Ratio {
            floor_ratio: f64,
        }
        r.extend(&Ratio { floor_ratio: x });
        r.text.push_str(&format!(
            "\n           × floor: {x} (Redis CPU per job against the floor's {})",
            steps.join(" + ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_records_look_like_punctuals() {
        assert_eq!(id_of(7).len(), 12);
        assert_eq!(job_of(&id_of(1_999_999)), Some(1_999_999));
        assert_eq!(job_of("x"), None);
        assert_eq!(b36(0), "0");
        assert_eq!(b36(36 * 36 + 35), "10z");
        let r = record(36, 50, b"{}");
        assert_eq!(r, b":10:1e::0:{}");
    }

    #[test]
    fn ratios_are_per_step_and_for_the_path() {
        #[derive(Serialize)]
        struct Steps {
            script_us_per_job: Value,
            redis_cpu_us_per_job: Value,
        }
        let floor = Report::of(
            "floor",
            &Steps {
                script_us_per_job: json!({"enqueue": 2.0, "promote": 1.0, "claim": 2.0, "ack": 1.0}),
                redis_cpu_us_per_job: json!({"enqueue": 4.0, "promote": 1.0, "claim": 2.0, "ack": 1.0}),
            },
        );
        #[derive(Serialize)]
        struct Scripts {
            script_us_per_job: Value,
        }
        let mut s = Report::of(
            "scripts",
            &Scripts {
                script_us_per_job: json!({"enqueue": 3.0, "promote": 1.0, "claim": 4.0, "ack": 3.0, "claim_pool": 4.5}),
            },
        );
        add_ratios(&mut s, &floor);
        let f = s.get("floor_ratio").unwrap();
        assert_eq!(f["enqueue"], 1.5);
        assert_eq!(f["claim"], 2.0);
        assert_eq!(f["path"], 2.0);
        assert_eq!(f["full_path"], 1.83);
        // claim_pool against the floor's promote + claim (3.0); the steady
        // path (enqueue + claim_pool + ack = 10.5) against the floor's 6.0.
        assert_eq!(f["claim_pool"], 1.5);
        assert_eq!(f["steady_full_path"], 1.75);
        #[derive(Serialize)]
        struct Drain {
            profile: Value,
        }
        let mut d = Report::of(
            "drain",
            &Drain {
                profile: json!({"redis_cpu_us_per_job": 6.0}),
            },
        );
        add_ratios(&mut d, &floor);
        assert_eq!(d.get("floor_ratio").unwrap(), 2.0);
    }
}
