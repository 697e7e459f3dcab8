//! Hiding the secrets in a Redis URL before it is shown: one rule for every
//! message, log line and page.

/// The Redis URL (or comma-separated list of cluster seed URLs) with every
/// secret replaced by `***`:
///
/// - the password of `user:password@` (the user stays visible);
/// - a userinfo without a colon (`redis://secret@host`), which is a password
///   as often as a user name;
/// - the value of query parameters that carry one (`pass`, `password`,
///   and any name containing `pass`, `secret` or `token`), as in
///   `unix:///run/redis.sock?pass=...` or `redis+unix:///s?password=...`.
///
/// Anything else is shown as given, so an operator can still tell which
/// server is meant.
///
/// ```
/// use punctual::redact;
/// assert_eq!(redact("redis://app:s3cret@10.0.0.5:6379/0"), "redis://app:***@10.0.0.5:6379/0");
/// assert_eq!(redact("redis://s3cret@cache:6379"), "redis://***@cache:6379");
/// assert_eq!(redact("unix:///run/redis.sock?db=2&pass=s3cret"), "unix:///run/redis.sock?db=2&pass=***");
/// assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
/// ```
pub fn redact(url: &str) -> String {
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    // The query (if any) is masked on its own; the rest may hold userinfo.
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match base.find("://") {
        Some(s) => {
            let rest = &base[s + 3..];
            match rest.rfind('@') {
                // unix:///path has no authority: an '@' is in the path.
                Some(at) if !rest.starts_with('/') && at > 0 => {
                    let info = &rest[..at];
                    let shown = match info.split_once(':') {
                        Some((user, _)) => format!("{user}:***"),
                        None => "***".to_string(),
                    };
                    format!("{}{shown}{}", &base[..s + 3], &rest[at..])
                }
                _ => base.to_string(),
            }
        }
        None => base.to_string(),
    };
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
            ("not a url", "not a url"),
            ("", ""),
        ];
        for (given, shown) in cases {
            assert_eq!(redact(given), shown, "{given}");
            assert!(!shown.contains("pw") && !shown.contains("p@ss"), "{given}");
        }
    }
}
