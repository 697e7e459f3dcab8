//! The Lua scripts, one per operation, loaded once and called by SHA.
//!
//! Each file in `lua/` starts with its `#!lua` shebang line; the chunks of
//! `lua/lib.lua` (the shared helpers and the KEYS layout) that the script
//! uses are inserted right after it, so every script is one self-contained
//! text that Redis caches under its own SHA. lib.lua's top level runs on
//! every call, so a script carries only what it uses (see [`shake`]).

use std::collections::HashSet;
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
    ("cold_page", include_str!("../lua/cold_page.lua")),
    ("layout", include_str!("../lua/layout.lua")),
    ("topic_delete", include_str!("../lua/topic_delete.lua")),
    ("unfire", include_str!("../lua/unfire.lua")),
    ("group_limits", include_str!("../lua/group_limits.lua")),
];

/// Puts the chunks of lib.lua that `body` uses after its shebang line.
fn assemble(body: &str) -> String {
    let (shebang, rest) = body.split_once('\n').unwrap_or((body, ""));
    let keep = shake(&LIB_CHUNKS, rest);
    let lib: String = LIB_CHUNKS
        .iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(c, _)| c.text)
        .collect();
    format!("{shebang}\n{lib}\n{rest}")
}

/// Every script, assembled once.
static ASSEMBLED: LazyLock<Vec<(&str, String)>> = LazyLock::new(|| {
    SOURCES
        .iter()
        .map(|(name, body)| (*name, assemble(body)))
        .collect()
});

static LIB_CHUNKS: LazyLock<Vec<Chunk<'static>>> = LazyLock::new(|| chunks(LIB));

/// A top-level chunk of lib.lua: a statement with the comment lines before
/// it, its text exactly as in the file, the names it defines (`local
/// function f`, `local A, B = ...`; none for a statement such as the KEYS
/// check) and the identifiers its code mentions.
#[derive(Debug)]
struct Chunk<'a> {
    text: &'a str,
    defines: Vec<&'a str>,
    uses: HashSet<&'a str>,
}

/// Splits Lua source written in lib.lua's style into its top-level chunks:
/// a top-level statement starts at column 0 with a word other than `end`,
/// `else`, `elseif` or `until` (lines inside a function or table are
/// indented; closing lines start with `end`, `}` or `)`), and runs until the
/// next one; the comment and blank lines just before a statement belong to
/// it. The chunks' texts, joined, are `src`.
fn chunks(src: &str) -> Vec<Chunk<'_>> {
    let mut lines = Vec::new();
    let mut at = 0;
    for line in src.split_inclusive('\n') {
        lines.push((at, line));
        at += line.len();
    }
    let mut cuts = Vec::new();
    let mut after_prev = 0;
    for (i, (_, line)) in lines.iter().enumerate() {
        if statement_word(line).is_none() {
            continue;
        }
        let mut first = i;
        while first > after_prev && is_comment_or_blank(lines[first - 1].1) {
            first -= 1;
        }
        cuts.push(if cuts.is_empty() { 0 } else { lines[first].0 });
        after_prev = i + 1;
    }
    if cuts.is_empty() {
        cuts.push(0);
    }
    cuts.push(src.len());
    cuts.windows(2)
        .map(|w| {
            let text = &src[w[0]..w[1]];
            Chunk {
                text,
                defines: defines(text),
                uses: identifiers(text),
            }
        })
        .collect()
}

/// The first word of a line that starts a top-level statement.
fn statement_word(line: &str) -> Option<&str> {
    let word = line
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .next()?;
    let starts_word = word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
    (starts_word && !matches!(word, "end" | "else" | "elseif" | "until")).then_some(word)
}

fn is_comment_or_blank(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with("--")
}

/// The names a chunk's statement defines: `local function f` defines f,
/// `local A, B = ...` (or `local A`) A and B; any other statement none.
fn defines(chunk: &str) -> Vec<&str> {
    let Some(line) = chunk.lines().find(|l| statement_word(l).is_some()) else {
        return Vec::new();
    };
    let Some(rest) = line.strip_prefix("local ") else {
        return Vec::new();
    };
    if let Some(f) = rest.trim_start().strip_prefix("function ") {
        return f.split('(').next().map(str::trim).into_iter().collect();
    }
    let names = rest.split('=').next().unwrap_or(rest);
    let names = names.split("--").next().unwrap_or(names);
    names.split(',').map(str::trim).collect()
}

/// The identifiers (and keywords) of Lua code, outside comments and string
/// literals. A number's letters (`0xC2`, `1e5`) are not identifiers.
fn identifiers(code: &str) -> HashSet<&str> {
    let b = code.as_bytes();
    let mut out = HashSet::new();
    let mut i = 0;
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
        } else if c.is_ascii_alphabetic() || c == b'_' || c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            if !c.is_ascii_digit() {
                out.insert(&code[start..i]);
            }
        } else {
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

/// Which of `chunks` a script whose body is `body` needs: every statement
/// chunk (it defines nothing, e.g. the KEYS check), and every chunk that
/// defines a name the body or another kept chunk mentions (an identifier
/// outside comments and strings). Keeping a chunk that is not needed costs
/// only time; leaving out one that is would be a runtime error, so a name
/// only ever counts as used.
fn shake<'a>(chunks: &[Chunk<'a>], body: &'a str) -> Vec<bool> {
    let mut used = identifiers(body);
    let mut keep = vec![false; chunks.len()];
    loop {
        let mut more = false;
        for (c, k) in chunks.iter().zip(keep.iter_mut()) {
            if !*k && (c.defines.is_empty() || c.defines.iter().any(|n| used.contains(n))) {
                *k = true;
                used.extend(c.uses.iter().copied());
                more = true;
            }
        }
        if !more {
            return keep;
        }
    }
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
    ASSEMBLED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| text.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "\
-- The header.
if not KEYS[1] then
  return 'no keys'
end

-- A constant.
local A, B = 1, 2
local function uses_a()
  return A
end
-- Mentions uses_a only in this comment.
local function unused()
  return 'uses_a'
end
--[[ uses_a, in a long comment ]]
local function outer()
  return uses_a() + 0xB
end
";

    /// The chunks of FIXTURE kept for `body`, by the first name each defines
    /// ("" for the statement).
    fn kept(body: &str) -> Vec<&'static str> {
        let chunks = chunks(FIXTURE);
        let keep = shake(&chunks, body);
        chunks
            .iter()
            .zip(keep)
            .filter(|(_, k)| *k)
            .map(|(c, _)| c.defines.first().copied().unwrap_or(""))
            .collect()
    }

    #[test]
    fn the_chunks_are_the_statements_with_their_comments_and_join_to_the_source() {
        let c = chunks(FIXTURE);
        let defines: Vec<_> = c.iter().map(|c| c.defines.clone()).collect();
        assert_eq!(
            defines,
            [
                vec![],
                vec!["A", "B"],
                vec!["uses_a"],
                vec!["unused"],
                vec!["outer"]
            ]
        );
        assert!(c[0].text.starts_with("-- The header.\nif not KEYS"));
        assert!(c[1].text.starts_with("\n-- A constant.\nlocal A, B"));
        assert!(c[3].text.starts_with("-- Mentions uses_a"));
        assert_eq!(c.iter().map(|c| c.text).collect::<String>(), FIXTURE);
    }

    #[test]
    fn an_unreferenced_function_is_dropped() {
        assert_eq!(kept("return uses_a()"), ["", "A", "uses_a"]);
    }

    #[test]
    fn a_transitive_dependency_is_kept() {
        assert_eq!(kept("return outer()"), ["", "A", "uses_a", "outer"]);
    }

    #[test]
    fn a_statement_chunk_is_kept() {
        assert_eq!(kept("return 1"), [""]);
    }

    #[test]
    fn comments_and_strings_do_not_count_as_references() {
        let body = "-- outer()\n--[==[ unused()\n]==] return 'outer', \"unused\", [[B]]";
        assert_eq!(kept(body), [""]);
        assert_eq!(kept("return B"), ["", "A"]);
    }

    #[test]
    fn identifiers_skip_comments_strings_and_numbers() {
        let code = "a.b(c) -- d\n'e\\'f' \"g\" [=[h]] ]=] 0x1F 1e5 i_2 --[[j\nk]] l";
        let mut got: Vec<_> = identifiers(code).into_iter().collect();
        got.sort_unstable();
        assert_eq!(got, ["a", "b", "c", "i_2", "l"]);
    }

    #[test]
    fn lib_splits_into_statements_that_join_to_it() {
        let c = chunks(LIB);
        assert_eq!(c.iter().map(|c| c.text).collect::<String>(), LIB);
        for chunk in &c {
            for name in &chunk.defines {
                assert!(
                    !name.is_empty() && identifiers(name).contains(name),
                    "{name:?} in {}",
                    chunk.text
                );
            }
        }
        // The statements that define nothing: the KEYS check.
        let statements = c.iter().filter(|c| c.defines.is_empty()).count();
        assert_eq!(statements, 2, "{c:#?}");
    }

    /// A body that mentions every name of lib.lua gets all of it.
    #[test]
    fn a_script_using_everything_carries_the_whole_lib() {
        let every: Vec<&str> = chunks(LIB).iter().flat_map(|c| c.defines.clone()).collect();
        let body = format!("#!lua\nreturn {{ {} }}\n", every.join(", "));
        let text = assemble(&body);
        assert_eq!(
            text,
            format!("#!lua\n{LIB}\nreturn {{ {} }}\n", every.join(", "))
        );
    }

    /// No name that a left-out chunk of lib.lua defines appears in a
    /// script's code (outside comments and strings): every name it uses is
    /// defined.
    #[test]
    fn every_script_carries_every_lib_chunk_it_mentions() {
        let lib = chunks(LIB);
        for (name, _) in SOURCES {
            let text = script_source(name).unwrap();
            let used = identifiers(&text);
            for chunk in lib.iter().filter(|c| !text.contains(c.text)) {
                for n in &chunk.defines {
                    assert!(!used.contains(n), "{name} uses {n}, left out");
                }
            }
        }
        // And the scripts do leave chunks out: enqueue claims nothing.
        let enqueue = script_source("enqueue").unwrap();
        assert!(!enqueue.contains("local function claim_groups"));
        assert!(enqueue.contains("local function int_arg"));
    }
}
