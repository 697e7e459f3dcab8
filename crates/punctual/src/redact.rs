//! Hiding the secrets in a Redis URL before it is shown: one rule for every
//! message, log line and page.

/// The Redis URL (or comma-separated list of cluster seed URLs) with every
/// secret replaced by `***`:
///
/// - the password of `user:password@` (the user stays visible), whatever it
///   holds (`,` `?` `#` `/` `:` `@` too): the userinfo is everything between
///   `://` and the last `@` of that URL;
/// - a userinfo without a colon (`redis://secret@host`), which is a password
///   as often as a user name;
/// - the value of query parameters that carry one (`pass`, `password`,
///   and any name containing `pass`, `secret` or `token`), as in
///   `unix:///run/redis.sock?pass=...` or `redis+unix:///s?password=...`.
///
/// A list of seeds is split only at a `,` followed by a scheme
/// (`,redis://`, `,rediss://`, `,unix://`...), as the connection does (see
/// [`split_seeds`]): a `,` anywhere else belongs to the URL it is in.
///
/// Anything else is shown as given, so an operator can still tell which
/// server is meant.
///
/// ```
/// use punctual::internal::redact;
/// assert_eq!(redact("redis://app:s3cret@10.0.0.5:6379/0"), "redis://app:***@10.0.0.5:6379/0");
/// assert_eq!(redact("redis://s3cret@cache:6379"), "redis://***@cache:6379");
/// assert_eq!(redact("redis://app:pa,ss@h:6379"), "redis://app:***@h:6379");
/// assert_eq!(redact("unix:///run/redis.sock?db=2&pass=s3cret"), "unix:///run/redis.sock?db=2&pass=***");
/// assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
/// ```
pub fn redact(url: &str) -> String {
    split_urls(url)
        .into_iter()
        .map(redact_one)
        .collect::<Vec<_>>()
        .join(",")
}

/// The URLs of a comma-separated list of cluster seeds, trimmed, empty ones
/// left out: the list is split only at a `,` followed by a scheme
/// (`redis://`, `rediss://`, `unix://`, `redis+unix://`...), so a password
/// holding a `,` stays in its URL. `"redis://a:1,redis://b:2"` is two seeds;
/// `"redis://a:1,b:2"` is one (invalid) URL, not two seeds.
///
/// ```
/// use punctual::internal::split_seeds;
/// assert_eq!(
///     split_seeds("redis://u:pa,ss@10.0.0.1:7000, redis://10.0.0.2:7000"),
///     ["redis://u:pa,ss@10.0.0.1:7000", "redis://10.0.0.2:7000"]
/// );
/// assert_eq!(split_seeds("redis://a:1,b:2"), ["redis://a:1,b:2"]);
/// ```
pub fn split_seeds(url: &str) -> Vec<&str> {
    split_urls(url)
        .into_iter()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect()
}

/// Splits at each `,` that is followed (after blanks and commas) by
/// `scheme://` or by nothing.
fn split_urls(url: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, _) in url.match_indices(',') {
        let after = url[i + 1..].trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        if after.is_empty() || starts_with_scheme(after) {
            parts.push(&url[start..i]);
            start = i + 1;
        }
    }
    parts.push(&url[start..]);
    parts
}

/// Whether `s` begins with `scheme://` (RFC 3986: a letter, then letters,
/// digits, `+`, `-` or `.`).
fn starts_with_scheme(s: &str) -> bool {
    let Some(end) = s.find("://") else {
        return false;
    };
    let scheme = &s[..end];
    let mut chars = scheme.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn redact_one(url: &str) -> String {
    // The userinfo runs from "://" to the last '@' (a password may hold
    // '?', '#', '/', ':' or '@'); unix:///path has no authority, so an '@'
    // there is in the path. Without "://", anything before an '@' is hidden.
    let (head, rest) = match url.find("://") {
        Some(s) => url.split_at(s + 3),
        None => ("", url),
    };
    let (mut out, tail) = match rest.rfind('@') {
        // "redis://h/0?password=a@b": the '@' may be in a secret query
        // value as well as in a password; both are hidden, nothing shown.
        Some(at) if !rest.starts_with('/') && ambiguous(&rest[..at]) => {
            return format!("{head}***")
        }
        Some(at) if !rest.starts_with('/') => {
            let shown = match rest[..at].split_once(':') {
                Some((user, _)) if !head.is_empty() => format!("{user}:***"),
                _ => "***".to_string(),
            };
            (format!("{head}{shown}"), &rest[at..])
        }
        _ => (head.to_string(), rest),
    };
    // The query (if any) of what follows is masked parameter by parameter.
    let (base, query) = match tail.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (tail, None),
    };
    out.push_str(base);
    if let Some(q) = query {
        out.push('?');
        let params: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if secret_param(k) => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

/// Whether text before the last '@' holds a query with a secret parameter.
fn ambiguous(before_at: &str) -> bool {
    before_at.split_once('?').is_some_and(|(_, q)| {
        q.split(['&', '?'])
            .any(|kv| kv.split_once('=').is_some_and(|(k, _)| secret_param(k)))
    })
}

fn secret_param(name: &str) -> bool {
    let n = name.trim().to_ascii_lowercase();
    n.contains("pass") || n.contains("secret") || n.contains("token")
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn every_url_form_hides_its_secrets() {
        let cases = [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("redis://h:1/0", "redis://h:1/0"),
            ("redis://user:pw@h:1/0", "redis://user:***@h:1/0"),
            ("redis://:pw@h:1", "redis://:***@h:1"),
            ("redis://pw@h:1", "redis://***@h:1"),
            ("rediss://user:pw@h:6380/2", "rediss://user:***@h:6380/2"),
            ("rediss://pw@h:6380", "rediss://***@h:6380"),
            // A password holding '@' or ':' is hidden whole.
            ("redis://u:p@ss:w@h:1", "redis://u:***@h:1"),
            ("unix:///run/redis.sock", "unix:///run/redis.sock"),
            (
                "unix:///run/redis.sock?pass=pw",
                "unix:///run/redis.sock?pass=***",
            ),
            (
                "unix:///run/redis.sock?db=1&pass=pw&user=app",
                "unix:///run/redis.sock?db=1&pass=***&user=app",
            ),
            (
                "redis+unix:///run/redis.sock?password=pw",
                "redis+unix:///run/redis.sock?password=***",
            ),
            ("unix:///tmp/a@b.sock", "unix:///tmp/a@b.sock"),
            (
                "redis://u:pw1@a:7000,redis://u:pw2@b:7001,redis://c:7002",
                "redis://u:***@a:7000,redis://u:***@b:7001,redis://c:7002",
            ),
            (
                "redis://pw@a:7000,rediss://:pw@b:7001",
                "redis://***@a:7000,rediss://:***@b:7001",
            ),
            (
                "redis://h:1/0?protocol=resp3",
                "redis://h:1/0?protocol=resp3",
            ),
            // A password holding ',' or '?' (the reviewer's cases), '#',
            // '/', ':' or '@' is hidden whole, the host stays visible.
            ("redis://app:pa,ss@h:6379", "redis://app:***@h:6379"),
            ("redis://app:pa?ss@h:6379", "redis://app:***@h:6379"),
            ("redis://app:pa#ss@h:6379", "redis://app:***@h:6379"),
            ("redis://app:pa/ss@h:6379/0", "redis://app:***@h:6379/0"),
            ("redis://app:pa:ss@h:6379", "redis://app:***@h:6379"),
            ("redis://app:pa@ss@h:6379", "redis://app:***@h:6379"),
            ("redis://pa,ss@h:6379", "redis://***@h:6379"),
            ("redis://pa?ss@h:6379", "redis://***@h:6379"),
            (
                "rediss://app:p,?#/:@ss@h:6380/1",
                "rediss://app:***@h:6380/1",
            ),
            (
                "redis://app:pa,ss@a:7000,redis://app:pa?ss@b:7001",
                "redis://app:***@a:7000,redis://app:***@b:7001",
            ),
            (
                "redis://app:pa,ss@a:7000, rediss://pa,ss@b:7001",
                "redis://app:***@a:7000, rediss://***@b:7001",
            ),
            // A ',' not followed by a scheme does not start a seed (as in
            // `split_seeds`): the rest is part of the URL, and hidden with it.
            ("redis://a:7000,b:7001", "redis://a:7000,b:7001"),
            ("redis://u:pw@a:7000,u:pw@b:7001", "redis://u:***@b:7001"),
            // Secrets in the query of a unix URL, whatever they hold.
            (
                "unix:///run/redis.sock?pass=pa,ss",
                "unix:///run/redis.sock?pass=***",
            ),
            (
                "unix:///run/redis.sock?pass=pa?ss&db=1",
                "unix:///run/redis.sock?pass=***&db=1",
            ),
            (
                "unix:///run/redis.sock?db=1&password=pa@ss",
                "unix:///run/redis.sock?db=1&password=***",
            ),
            (
                "redis+unix:///run/redis.sock?db=1&password=pa,ss,redis://h:1",
                "redis+unix:///run/redis.sock?db=1&password=***,redis://h:1",
            ),
            (
                "unix:///tmp/a@b.sock?password=pw",
                "unix:///tmp/a@b.sock?password=***",
            ),
            // Query secrets of a TCP URL, next to a userinfo or not.
            ("redis://h:1/0?password=pw", "redis://h:1/0?password=***"),
            ("redis://u:pw@h:1/0?pass=pw", "redis://u:***@h:1/0?pass=***"),
            ("redis://h:1/0?password=pa@ss", "redis://***"),
            // No scheme: what precedes an '@' is hidden all the same.
            ("u:pw@h:1", "***@h:1"),
            ("not a url", "not a url"),
            ("", ""),
        ];
        for (given, shown) in cases {
            assert_eq!(redact(given), shown, "{given}");
            for secret in [
                "pw", "pa,", "pa?", "pa#", "pa/", "pa:", "pa@", "p@ss", "@ss", ",ss", "?ss", "#ss",
            ] {
                assert!(!shown.contains(secret), "{given}: {shown}");
            }
        }
    }

    #[test]
    fn seeds_split_only_before_a_scheme() {
        assert_eq!(
            super::split_seeds(
                "redis://a:1, redis://u:pa,ss@b:2,,rediss://c:3,unix:///s,redis+unix:///t"
            ),
            [
                "redis://a:1",
                "redis://u:pa,ss@b:2",
                "rediss://c:3",
                "unix:///s",
                "redis+unix:///t"
            ]
        );
        assert_eq!(super::split_seeds("redis://a:1,b:2"), ["redis://a:1,b:2"]);
        assert_eq!(super::split_seeds("redis://a:1,"), ["redis://a:1"]);
        assert_eq!(super::split_seeds(" , "), Vec::<&str>::new());
    }
}
