//! The Lua scripts, one per operation, loaded once and called by SHA.
//!
//! A script, `lua/NAME.lua`, starts with its `#!lua` shebang line; its
//! leading comment block names the helper files of `lua/includes/` it uses,
//! one `-- include: NAME` line each, and an include names the includes it
//! uses the same way. A script is sent as one self-contained text that Redis
//! caches under its own SHA: the shebang line, `includes/keys.lua` (the
//! KEYS and their check, first in every script, so named by none), each
//! include the script needs once, after the includes it names, then the rest
//! of the script. An include's top level runs on every call, so a script
//! names only what it uses; the tests check that every name a file uses from
//! an include is included and that every include named is used.
//!
//! An unknown include, a cycle, or an include line below the leading
//! comment block is an error: [`script_source`] panics on it, and the tests
//! assemble every script.

use std::sync::LazyLock;

use redis::Script;

/// `(name, text)` of the named files of a folder of `lua/`.
macro_rules! lua_files {
    ($dir:literal: $($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../lua/", $dir, $name, ".lua")))),*]
    };
}

/// The source of every script, by name, as files in `lua/`.
const SOURCES: &[(&str, &str)] = lua_files!("":
    "enqueue", "claim", "ack", "fail", "extend", "tick", "cancel", "reschedule", "get",
    "dead_list", "dead_replay", "dead_purge", "stats", "check", "cold_page", "layout",
    "topic_delete", "unfire", "group_limits",
);

/// The include that starts every script: the KEYS and their check.
const PRELUDE: &str = "keys";

/// The helper files a script may include, by name, as files in
/// `lua/includes/`.
const INCLUDES: &[(&str, &str)] = lua_files!("includes/":
    "keys", "args", "now_ms", "clock", "reserve_tokens", "utf8_ok", "b36", "opts_of",
    "group_of_field", "options_text", "record", "claimable", "encode", "att_of", "token_str",
    "is_live_att", "ended_att", "meta", "retry", "rate", "at_max_running", "due_of", "earliest",
    "state", "bulk", "add_retried", "drop_retried", "cold", "cold_settings", "cold_due",
    "cold_place", "cold_place_all", "cold_left", "cold_count", "index_ready", "group_count",
    "release_groups", "claim_groups",
);

const DIRECTIVE: &str = "-- include:";

/// The includes a file names, in order: the `-- include: NAME` lines of its
/// leading comment block (the lines, after a shebang line, before its first
/// line of code). An include line below that block, or a name that is not
/// one word of `[a-z0-9_]`, is an error.
fn includes_of(text: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut leading = true;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if i == 0 && t.starts_with("#!") {
            continue;
        }
        if !(t.is_empty() || t.starts_with("--")) {
            leading = false;
        }
        let Some(name) = t.strip_prefix(DIRECTIVE) else {
            continue;
        };
        if !leading {
            return Err(format!(
                "line {}: an include below the leading comments",
                i + 1
            ));
        }
        let name = name.trim();
        let word = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if name.is_empty() || !word {
            return Err(format!("line {}: include of {name:?}, not a name", i + 1));
        }
        names.push(name);
    }
    Ok(names)
}

/// Appends to `out` the includes `text` names that `out` lacks, each after
/// the includes it names in turn. `path`: the includes being resolved, to
/// refuse a cycle.
fn resolve<'a>(
    text: &'a str,
    table: &[(&'a str, &'a str)],
    out: &mut Vec<&'a str>,
    path: &mut Vec<&'a str>,
) -> Result<(), String> {
    for name in includes_of(text)? {
        if name == PRELUDE {
            return Err(format!("includes {PRELUDE:?}, which starts every script"));
        }
        if path.contains(&name) {
            return Err(format!("include cycle: {} -> {name}", path.join(" -> ")));
        }
        if out.contains(&name) {
            continue;
        }
        let Some(&(name, inc)) = table.iter().find(|(n, _)| *n == name) else {
            return Err(format!(
                "unknown include {name:?} (no lua/includes/{name}.lua)"
            ));
        };
        path.push(name);
        resolve(inc, table, out, path).map_err(|e| format!("{name}: {e}"))?;
        path.pop();
        out.push(name);
    }
    Ok(())
}

/// The includes a script's text gets, in order: the prelude, then what it
/// names (see [`resolve`]).
fn closure<'a>(body: &'a str, table: &[(&'a str, &'a str)]) -> Result<Vec<&'a str>, String> {
    let mut out = vec![PRELUDE];
    resolve(body, table, &mut out, &mut Vec::new())?;
    Ok(out)
}

/// A script's text as sent: its shebang line, its includes, then the rest.
fn assemble(body: &str, table: &[(&str, &str)]) -> Result<String, String> {
    let (shebang, rest) = body.split_once('\n').unwrap_or((body, ""));
    let text = |name: &str| table.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);
    let mut lib = String::new();
    for name in closure(body, table)? {
        lib.push_str(text(name).ok_or_else(|| format!("no include {name:?}"))?);
    }
    Ok(format!("{shebang}\n{lib}\n{rest}"))
}

/// Every script, assembled once.
static ASSEMBLED: LazyLock<Vec<(&str, String)>> = LazyLock::new(|| {
    SOURCES
        .iter()
        .map(|(name, body)| {
            let text = assemble(body, INCLUDES).unwrap_or_else(|e| panic!("lua/{name}.lua: {e}"));
            (*name, text)
        })
        .collect()
});

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
    pub cold_page: Script,
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
        cold_page: s("cold_page"),
        layout: s("layout"),
        topic_delete: s("topic_delete"),
        unfire: s("unfire"),
        group_limits: s("group_limits"),
    }
});

/// The names of punctual's scripts, for [`script_source`].
///
/// ```
/// let names: Vec<&str> = punctual::internal::script_names().collect();
/// assert!(names.contains(&"enqueue") && names.contains(&"claim"));
/// for name in names {
///     let source = punctual::internal::script_source(name).unwrap();
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
/// let enqueue = punctual::internal::script_source("enqueue").unwrap();
/// assert!(enqueue.starts_with("#!lua"));
/// assert!(punctual::internal::script_source("nope").is_none());
/// ```
pub fn script_source(name: &str) -> Option<String> {
    ASSEMBLED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| text.clone())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashSet};

    use super::*;

    /// The first word of a line that starts a top-level statement: at
    /// column 0, a word other than `end`, `else`, `elseif` or `until`
    /// (the scripts' style: code inside a block is indented).
    fn statement_word(line: &str) -> Option<&str> {
        let word = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .next()?;
        let starts_word = word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        (starts_word && !matches!(word, "end" | "else" | "elseif" | "until")).then_some(word)
    }

    /// The names a file defines at its top level: `local function f`
    /// defines f, `local A, B = ...` (or `local A`) A and B.
    fn defines(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for line in text.lines().filter(|l| statement_word(l).is_some()) {
            let Some(rest) = line.strip_prefix("local ") else {
                continue;
            };
            if let Some(f) = rest.trim_start().strip_prefix("function ") {
                out.extend(f.split('(').next().map(str::trim));
                continue;
            }
            let names = rest.split('=').next().unwrap_or(rest);
            let names = names.split("--").next().unwrap_or(names);
            out.extend(names.split(',').map(str::trim));
        }
        out
    }

    /// The names Lua code uses: identifiers (and keywords) outside comments
    /// and string literals, but not a field (`t.name`, `t:name`) nor a key
    /// in a table constructor (`{ name = v }`). A number's letters (`0xC2`,
    /// `1e5`) are not identifiers.
    fn identifiers(code: &str) -> HashSet<&str> {
        let b = code.as_bytes();
        let mut out = HashSet::new();
        let (mut i, mut braces) = (0, 0usize);
        while i < b.len() {
            let c = b[i];
            if c == b'-' && b.get(i + 1) == Some(&b'-') {
                i = match long_bracket(b, i + 2) {
                    Some(level) => close_long_bracket(b, i + 2, level),
                    None => b[i..]
                        .iter()
                        .position(|&x| x == b'\n')
                        .map_or(b.len(), |p| i + p),
                };
            } else if let Some(level) = long_bracket(b, i) {
                i = close_long_bracket(b, i, level);
            } else if c == b'\'' || c == b'"' {
                i += 1;
                while i < b.len() && b[i] != c && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            } else if c.is_ascii_alphanumeric() || c == b'_' {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let field = start > 0
                    && (b[start - 1] == b':'
                        || (b[start - 1] == b'.' && (start < 2 || b[start - 2] != b'.')));
                let after = code[i..].trim_start();
                let key = braces > 0 && after.starts_with('=') && !after.starts_with("==");
                if !c.is_ascii_digit() && !field && !key {
                    out.insert(&code[start..i]);
                }
            } else {
                match c {
                    b'{' => braces += 1,
                    b'}' => braces = braces.saturating_sub(1),
                    _ => {}
                }
                i += 1;
            }
        }
        out
    }

    /// The level of a long bracket (`[[`, `[=[`, ...) opening at `i`, if one does.
    fn long_bracket(b: &[u8], i: usize) -> Option<usize> {
        if b.get(i) != Some(&b'[') {
            return None;
        }
        let level = b[i + 1..].iter().take_while(|&&x| x == b'=').count();
        (b.get(i + 1 + level) == Some(&b'[')).then_some(level)
    }

    /// Where the long bracket of `level` opened at `i` ends (past its `]=*]`).
    fn close_long_bracket(b: &[u8], i: usize, level: usize) -> usize {
        let close: Vec<u8> = [b"]".as_slice(), &vec![b'='; level], b"]"].concat();
        let from = i + level + 2;
        b[from..]
            .windows(close.len())
            .position(|w| w == close)
            .map_or(b.len(), |p| from + p + close.len())
    }

    /// The include that defines `name`, if one does.
    fn definer(name: &str) -> Option<&'static str> {
        INCLUDES
            .iter()
            .find(|(_, text)| defines(text).contains(&name))
            .map(|(n, _)| *n)
    }

    fn include(name: &str) -> &'static str {
        INCLUDES.iter().find(|(n, _)| *n == name).unwrap().1
    }

    /// Every file: the scripts and the includes, by their path in `lua/`.
    fn files() -> Vec<(String, &'static str)> {
        let scripts = SOURCES.iter().map(|(n, t)| (format!("{n}.lua"), *t));
        let includes = INCLUDES
            .iter()
            .map(|(n, t)| (format!("includes/{n}.lua"), *t));
        scripts.chain(includes).collect()
    }

    #[test]
    fn the_lists_name_every_file_in_lua() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let lua_files = |d: &std::path::Path| -> BTreeSet<String> {
            std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter_map(|f| f.strip_suffix(".lua").map(String::from))
                .collect()
        };
        let listed = |t: &[(&str, &str)]| t.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(lua_files(&dir), listed(SOURCES));
        assert_eq!(lua_files(&dir.join("includes")), listed(INCLUDES));
    }

    #[test]
    fn every_script_assembles_with_its_includes_once_each_after_theirs() {
        for (name, body) in SOURCES {
            let order = closure(body, INCLUDES).unwrap();
            assert_eq!(order[0], PRELUDE);
            let text = script_source(name).unwrap();
            let (shebang, rest) = body.split_once('\n').unwrap();
            assert!(text.starts_with(&format!("{shebang}\n{}", include(PRELUDE))));
            assert!(text.ends_with(&format!("\n{rest}")), "{name}");
            for (i, inc) in order.iter().enumerate() {
                assert_eq!(text.matches(include(inc)).count(), 1, "{name}: {inc}");
                for dep in includes_of(include(inc)).unwrap() {
                    let at = order.iter().position(|n| *n == dep).unwrap();
                    assert!(at < i, "{name}: {dep} after {inc}");
                }
            }
        }
    }

    /// A name a file uses that an include defines is defined where the file
    /// can see it: in the file itself, or in an include the file includes
    /// (directly or not). Else the script would read a global, an error in
    /// Redis. And no name is defined twice.
    #[test]
    fn every_name_a_file_uses_from_an_include_is_included() {
        let mut seen = HashSet::new();
        for (name, text) in INCLUDES {
            for n in defines(text) {
                assert!(
                    seen.insert(n),
                    "{n} defined twice (again in includes/{name}.lua)"
                );
            }
        }
        for (file, text) in files() {
            let included = closure(text, INCLUDES).unwrap();
            let own = defines(text);
            for n in identifiers(text) {
                if let Some(inc) = definer(n) {
                    assert!(
                        own.contains(&n) || included.contains(&inc),
                        "{file} uses {n} of includes/{inc}.lua without including it"
                    );
                }
            }
            if file.starts_with("includes/") {
                continue;
            }
            for n in own {
                assert!(definer(n).is_none(), "{file} defines {n} again");
            }
        }
    }

    /// Every include a file names defines a name the file uses, and every
    /// include is part of some script.
    #[test]
    fn no_include_is_unused() {
        let mut used = BTreeSet::from([PRELUDE]);
        for (file, text) in files() {
            let names = identifiers(text);
            for inc in includes_of(text).unwrap() {
                let defined = defines(include(inc));
                assert!(
                    defined.iter().any(|n| names.contains(n)),
                    "{file} includes {inc} and uses none of {defined:?}"
                );
            }
        }
        for (_, body) in SOURCES {
            used.extend(closure(body, INCLUDES).unwrap());
        }
        let all: BTreeSet<&str> = INCLUDES.iter().map(|(n, _)| *n).collect();
        assert_eq!(used, all);
    }

    const FIXTURE: &[(&str, &str)] = &[
        ("keys", "-- keys\n"),
        ("a", "-- a\nlocal A = 1\n"),
        ("b", "-- b\n-- include: a\nlocal B = A\n"),
        ("c", "-- c\n-- include: b\n-- include: a\nlocal C = A + B\n"),
        ("loop", "-- include: loop2\n"),
        ("loop2", "-- include: loop\n"),
    ];

    #[test]
    fn includes_come_once_each_after_those_they_include() {
        let body = "#!lua\n-- s\n-- include: c\n-- include: b\nreturn C\n";
        assert_eq!(closure(body, FIXTURE).unwrap(), ["keys", "a", "b", "c"]);
        assert_eq!(
            assemble(body, FIXTURE).unwrap(),
            "#!lua\n-- keys\n-- a\nlocal A = 1\n-- b\n-- include: a\nlocal B = A\n\
             -- c\n-- include: b\n-- include: a\nlocal C = A + B\n\
             \n-- s\n-- include: c\n-- include: b\nreturn C\n"
        );
    }

    #[test]
    fn a_bad_include_fails_loudly() {
        let err = |body: &str| assemble(body, FIXTURE).unwrap_err();
        assert!(err("#!lua\n-- include: nope\nreturn 1\n").contains("unknown include \"nope\""));
        assert!(err("#!lua\n-- include: b\n-- include: nope\n").contains("nope"));
        assert!(err("#!lua\n-- include: loop\n").contains("include cycle: loop -> loop2 -> loop"));
        assert!(err("#!lua\n-- include: keys\n").contains("starts every script"));
        assert!(err("#!lua\n-- include: A\n").contains("not a name"));
        let below = "#!lua\n-- include: a\nreturn A\n-- include: b\n";
        assert!(err(below).contains("line 4: an include below the leading comments"));
        // A missing include in a real file: a name of `record` used alone.
        let body = "#!lua\n-- include: args\nreturn decode(ARGV[1])\n";
        assert!(closure(body, INCLUDES)
            .unwrap()
            .iter()
            .all(|n| *n != "record"));
        assert_eq!(definer("decode"), Some("record"));
    }

    #[test]
    fn identifiers_skip_comments_strings_numbers_fields_and_keys() {
        let code = "a.b(c) -- d\n'e\\'f' \"g\" [=[h]] ]=] 0x1F 1e5 i_2 --[[j\nk]] l \
                    m:n() o .. p { q = r, s == t }";
        let mut got: Vec<_> = identifiers(code).into_iter().collect();
        got.sort_unstable();
        assert_eq!(got, ["a", "c", "i_2", "l", "m", "o", "p", "r", "s", "t"]);
    }

    #[test]
    fn defines_reads_top_level_locals_only() {
        let code =
            "local A, B = 1, 2 -- x\nlocal function f(x)\n  local y = 1\nend\nlocal C\nreturn A\n";
        assert_eq!(defines(code), ["A", "B", "f", "C"]);
    }
}
