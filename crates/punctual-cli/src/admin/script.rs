//! `punctual script [NAME]`: the Lua scripts, for producers in other
//! languages.

use anyhow::Result;
use serde_json::json;

use crate::context::Ctx;
use crate::exit;
use crate::output::{emit, emit_json, Table};
use clap::Args;

/// Arguments of `script`.
#[derive(Debug, Args)]
pub(crate) struct ScriptArgs {
    /// The script to print (see the list without NAME), e.g. `enqueue`.
    pub name: Option<String>,
}

/// The SHA1 Redis caches a script under (what EVALSHA takes).
fn sha1(source: &str) -> String {
    redis::Script::new(source).get_hash().to_string()
}

/// Lists the scripts, or prints one exactly as punctual loads it.
pub(crate) fn run(ctx: &Ctx, args: ScriptArgs) -> Result<()> {
    let Some(name) = args.name else {
        let scripts: Vec<(&str, String)> = punctual::internal::script_names()
            .filter_map(|n| Some((n, sha1(&source(n)?))))
            .collect();
        if ctx.json() {
            let list: Vec<_> = scripts
                .iter()
                .map(|(n, sha)| json!({"name": n, "sha1": sha}))
                .collect();
            return emit_json(&list);
        }
        let mut t = Table::new(&["NAME", "SHA1"]);
        for (n, sha) in scripts {
            t.row(vec![n.to_string(), sha]);
        }
        return emit(&t.render());
    };
    let Some(src) = source(&name) else {
        let known: Vec<&str> = punctual::internal::script_names().collect();
        return Err(exit::invalid(format!(
            "unknown script {name:?}; the scripts are: {} (run `punctual script` to list them)",
            known.join(", ")
        )));
    };
    if ctx.json() {
        return emit_json(&json!({"name": name, "sha1": sha1(&src), "source": src}));
    }
    emit(&src)
}

fn source(name: &str) -> Option<String> {
    punctual::internal::script_source(name)
}
