//! The client packages in `clients/` carry copies of punctual's Lua scripts,
//! written by `clients/sync-lua.sh` exactly as punctual loads them
//! (`punctual::internal::script_source`). This test fails while any copy differs, so a
//! change under `crates/punctual/lua/` cannot ship with stale clients.

use std::path::{Path, PathBuf};

/// The scripts each client uses. Keep in step with SCRIPTS in
/// `clients/sync-lua.sh`.
const SCRIPTS: &[&str] = &["enqueue", "get", "cancel", "reschedule", "unfire"];

/// The scripts the PHP package's Laravel connector consumes with
/// (`queue:work punctual`). Keep in step with PHP_CONSUMER in
/// `clients/sync-lua.sh`.
const PHP_CONSUMER: &[&str] = &["claim", "ack", "fail"];

/// The scripts the client in `dir` carries.
fn scripts(dir: &str) -> Vec<&'static str> {
    let mut all = SCRIPTS.to_vec();
    if dir == "clients/php/lua" {
        all.extend_from_slice(PHP_CONSUMER);
    }
    all
}

/// Where each client keeps its copies.
const DIRS: &[&str] = &[
    "clients/php/lua",
    "clients/python/punctual/lua",
    "clients/node/lua",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_client_copy_of_the_lua_scripts_is_current() {
    let mut stale = Vec::new();
    for dir in DIRS {
        let dir_path = root().join(dir);
        for name in scripts(dir) {
            let want = punctual::internal::script_source(name)
                .unwrap_or_else(|| panic!("{name} is not one of punctual's scripts"));
            let path = dir_path.join(format!("{name}.lua"));
            match std::fs::read(&path) {
                Ok(have) if have == want.as_bytes() => {}
                Ok(_) => stale.push(format!("{dir}/{name}.lua differs")),
                Err(e) => stale.push(format!("{dir}/{name}.lua: {e}")),
            }
        }
        // A copy of a script no client uses any more is stale too.
        for entry in std::fs::read_dir(&dir_path).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            let known = file
                .strip_suffix(".lua")
                .is_some_and(|n| scripts(dir).contains(&n));
            if !known {
                stale.push(format!("{dir}/{file} is not a copy sync-lua.sh writes"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the clients' Lua copies are out of date; run clients/sync-lua.sh and commit:\n  {}",
        stale.join("\n  ")
    );
}
