//! The Lua scripts, one per operation, loaded once and called by SHA.
//!
//! Each file in `lua/` starts with its `#!lua` shebang line; `lua/lib.lua` (the
//! shared helpers and the KEYS layout) is inserted right after it, so every
//! script is one self-contained text that Redis caches under its own SHA.

use std::sync::LazyLock;

use redis::Script;

const LIB: &str = include_str!("../lua/lib.lua");

/// The source of every script, by name, as files in `lua/`.
const SOURCES: &[(&str, &str)] = &[
    ("enqueue", include_str!("../lua/enqueue.lua")),
    ("claim", include_str!("../lua/claim.lua")),
    ("ack", include_str!("../lua/ack.lua")),
    ("fail", include_str!("../lua/fail.lua")),
    ("extend", include_str!("../lua/extend.lua")),
    ("tick", include_str!("../lua/tick.lua")),
    ("cancel", include_str!("../lua/cancel.lua")),
    ("reschedule", include_str!("../lua/reschedule.lua")),
    ("get", include_str!("../lua/get.lua")),
    ("dead_list", include_str!("../lua/dead_list.lua")),
    ("dead_replay", include_str!("../lua/dead_replay.lua")),
    ("dead_purge", include_str!("../lua/dead_purge.lua")),
    ("stats", include_str!("../lua/stats.lua")),
    ("check", include_str!("../lua/check.lua")),
    ("layout", include_str!("../lua/layout.lua")),
    ("topic_delete", include_str!("../lua/topic_delete.lua")),
    ("unfire", include_str!("../lua/unfire.lua")),
    ("group_limits", include_str!("../lua/group_limits.lua")),
];

/// Puts the shared helpers after the shebang line of `body`.
fn assemble(body: &str) -> String {
    let (shebang, rest) = body.split_once('\n').unwrap_or((body, ""));
    format!("{shebang}\n{LIB}\n{rest}")
}

pub(crate) struct Scripts {
    pub enqueue: Script,
    pub claim: Script,
    pub ack: Script,
    pub fail: Script,
    pub extend: Script,
    pub tick: Script,
    pub cancel: Script,
    pub reschedule: Script,
    pub get: Script,
    pub dead_list: Script,
    pub dead_replay: Script,
    pub dead_purge: Script,
    pub stats: Script,
    pub check: Script,
    pub layout: Script,
    pub topic_delete: Script,
    pub unfire: Script,
    pub group_limits: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let s = |name: &str| Script::new(&script_source(name).expect("every script is listed"));
    Scripts {
        enqueue: s("enqueue"),
        claim: s("claim"),
        ack: s("ack"),
        fail: s("fail"),
        extend: s("extend"),
        tick: s("tick"),
        cancel: s("cancel"),
        reschedule: s("reschedule"),
        get: s("get"),
        dead_list: s("dead_list"),
        dead_replay: s("dead_replay"),
        dead_purge: s("dead_purge"),
        stats: s("stats"),
        check: s("check"),
        layout: s("layout"),
        topic_delete: s("topic_delete"),
        unfire: s("unfire"),
        group_limits: s("group_limits"),
    }
});

/// The names of punctual's scripts, for [`script_source`].
///
/// ```
/// let names: Vec<&str> = punctual::script_names().collect();
/// assert!(names.contains(&"enqueue") && names.contains(&"claim"));
/// for name in names {
///     let source = punctual::script_source(name).unwrap();
///     assert!(source.starts_with("#!lua"), "{name}");
/// }
/// ```
pub fn script_names() -> impl Iterator<Item = &'static str> {
    SOURCES.iter().map(|(name, _)| *name)
}

/// The full text of a script as punctual loads it into Redis, so that a
/// producer in another language can `SCRIPT LOAD` it and call it by SHA.
///
/// ```
/// let enqueue = punctual::script_source("enqueue").unwrap();
/// assert!(enqueue.starts_with("#!lua"));
/// assert!(punctual::script_source("nope").is_none());
/// ```
pub fn script_source(name: &str) -> Option<String> {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, body)| assemble(body))
}
