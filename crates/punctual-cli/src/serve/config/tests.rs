//! The configuration file's tests: what parses, what is refused and why.

use super::topic::{parse_size, DEFAULT_MAX_JOBS};
use super::*;

fn parse(text: &str) -> Result<Config> {
    Config::parse(text, "test.toml", &Overrides::default(), &[])
}

#[test]
fn the_minimal_form_from_the_issue_parses() {
    let c = parse(
        r#"
redis = "redis://127.0.0.1:6379"
workers = 4          # worker processes
concurrency = 16     # jobs at once per worker process

[topics.orders]
exec = ["php", "close_order.php"]
timeout = "30s"
max_attempts = 6

[topics.coupons]
http = { url = "http://127.0.0.1:8080/hooks/coupon", timeout = "10s" }
"#,
    )
    .unwrap();
    assert_eq!(c.workers, 4);
    assert_eq!(
        c.topics["coupons"].http.as_ref().unwrap().timeout,
        Some(Duration::from_secs(10))
    );
    assert_eq!(c.ladder("orders").unwrap()[3], Duration::from_secs(120));
}

#[test]
fn promote_grace_defaults_to_the_schedulers_and_is_bounded() {
    let c = parse("[topics.a]\nexec = [\"true\"]\n").unwrap();
    assert_eq!(
        c.promote_grace,
        punctual::SchedulerConfig::default().promote_grace
    );
    let c = parse("promote_grace = \"0s\"\n[topics.a]\nexec = [\"true\"]\n").unwrap();
    assert_eq!(c.promote_grace, Duration::ZERO);
    // The example file says the default.
    let c = parse(include_str!("../../../../../punctual.example.toml")).unwrap();
    assert_eq!(c.promote_grace, Duration::from_millis(20));
    for (bad, says) in [
        ("promote_grace = \"61s\"", "promote_grace"),
        // The overdue signal must not fire on jobs the grace keeps in
        // the pool on purpose.
        (
            "promote_grace = \"5s\"\noverdue_alert = \"5s\"",
            "overdue_alert",
        ),
    ] {
        let e = format!(
            "{:#}",
            parse(&format!("{bad}\n[topics.a]\nexec = [\"true\"]\n")).unwrap_err()
        );
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn topic_limits_parse_and_bad_ones_name_the_topic() {
    let c = parse(
            "[topics.a]\nexec = [\"true\"]\nrate = \"200/s\"\nburst = 20\nmax_running = 50\n[topics.b]\nexec = [\"true\"]\n",
        )
        .unwrap();
    let l = c.limits("a").unwrap().unwrap();
    assert_eq!(l.to_string(), "rate 200/s, burst 20, max running 50");
    assert!(c.limits("b").unwrap().is_none());
    for (bad, says) in [
        ("rate = \"fast\"", "rate"),
        ("rate = \"0/s\"", "rate"),
        ("burst = 3", "burst needs a rate"),
        ("max_running = 0", "max running"),
    ] {
        let e = parse(&format!("[topics.a]\nexec = [\"true\"]\n{bad}\n")).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("[topics.a]") && msg.contains(says),
            "{bad}: {msg}"
        );
    }
}

#[test]
fn otel_is_off_by_default_and_its_endpoint_must_be_a_url() {
    let c = parse("[topics.a]\nexec = [\"true\"]\n").unwrap();
    assert!(c.otel.endpoint.is_none());
    let c = parse("[otel]\nendpoint = \"http://127.0.0.1:4318\"\n[topics.a]\nexec = [\"true\"]\n")
        .unwrap();
    assert_eq!(c.otel.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
    let e = parse("[otel]\nendpoint = \"127.0.0.1:4318\"\n[topics.a]\nexec = [\"true\"]\n")
        .unwrap_err();
    assert!(format!("{e:#}").contains("[otel] endpoint"), "{e:#}");
    let e = parse("[otel]\nendpont = \"x\"\n[topics.a]\nexec = [\"true\"]\n").unwrap_err();
    assert!(format!("{e:#}").contains("endpont"), "{e:#}");
}

#[test]
fn group_limits_parse_and_bad_ones_name_the_topic() {
    let c = parse(
            "[topics.a]\nexec = [\"true\"]\ngroup_rate = \"10/s\"\ngroup_max_running = 2\n[topics.b]\nexec = [\"true\"]\nrate = \"5/s\"\n",
        )
        .unwrap();
    let l = c.group_limits("a").unwrap().unwrap();
    assert_eq!(l.to_string(), "rate 10/s, burst 1 (default), max running 2");
    assert!(c.limits("a").unwrap().is_none());
    assert!(c.group_limits("b").unwrap().is_none());
    for (bad, says) in [
        ("group_rate = \"fast\"", "group_rate"),
        ("group_burst = 3", "burst needs a rate"),
        ("group_max_running = 0", "max running"),
    ] {
        let e = parse(&format!("[topics.a]\nexec = [\"true\"]\n{bad}\n")).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("[topics.a]") && msg.contains(says),
            "{bad}: {msg}"
        );
    }
}

#[test]
fn unknown_keys_and_bad_values_name_the_key_and_line() {
    let e = parse("workers = 2\nworkerz = 3\n[topics.a]\nexec = [\"true\"]\n").unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("workerz") && msg.contains("line 2"), "{msg}");

    let e = parse("[topics.a]\nexec = [\"true\"]\ntimeout = \"soon\"\n").unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("timeout") && msg.contains("line 3") && msg.contains("soon"),
        "{msg}"
    );

    let e = parse("[topics.\"a{b}\"]\nexec = [\"true\"]\n").unwrap_err();
    assert!(format!("{e:#}").contains("braces"));

    let e = parse("[topics.a]\ntimeout = \"1s\"\n").unwrap_err();
    assert!(format!("{e:#}").contains("no handler"));

    let e = parse("concurrency = 0\n[topics.a]\nexec = [\"true\"]\n").unwrap_err();
    assert!(format!("{e:#}").contains("concurrency = 0"));

    let e = parse("[topics.a]\nexec = [\"true\"]\nbackoff = [\"1s\", \"x\"]\n").unwrap_err();
    assert!(format!("{e:#}").contains("backoff step \"x\""));
}

#[test]
fn resident_topics_parse_and_their_keys_are_checked() {
    let c = parse(
            "[topics.o]\nresident = [\"php\", \"w.php\"]\nprocesses = 4\nmax_memory = \"512MiB\"\nstart_timeout = \"5s\"\n",
        )
        .unwrap();
    let r = c.resident("o").unwrap();
    assert_eq!(
        (r.processes, r.max_jobs, r.max_memory, r.start_timeout),
        (4, DEFAULT_MAX_JOBS, Some(512 << 20), Duration::from_secs(5))
    );
    let bad = |text: &str, want: &str| {
        let msg = format!("{:#}", parse(text).unwrap_err());
        assert!(msg.contains(want), "{want:?} not in {msg}");
    };
    bad(
        "[topics.o]\nexec = [\"true\"]\nprocesses = 2\n",
        "processes applies to resident handlers only",
    );
    bad(
        "[topics.o]\nresident = [\"x\"]\nexec = [\"true\"]\n",
        "not several",
    );
    bad(
        "[topics.o]\nresident = []\n",
        "resident must name a program",
    );
    bad(
        "[topics.o]\nresident = [\"x\"]\nprocesses = 0\n",
        "processes = 0",
    );
    bad(
        "[topics.o]\nresident = [\"x\"]\nmax_memory = \"lots\"\n",
        "max_memory = \"lots\"",
    );
    bad(
        "[topics.o]\nresident = [\"x\"]\nstart_timeout = \"0s\"\n",
        "start_timeout must be",
    );
    assert_eq!(
        r.lookahead_budget,
        crate::serve::config::topic::DEFAULT_LOOKAHEAD_BUDGET
    );
    let c = parse("[topics.o]\nresident = [\"x\"]\nlookahead_budget = \"50ms\"\n").unwrap();
    assert_eq!(
        c.resident("o").unwrap().lookahead_budget,
        Duration::from_millis(50)
    );
    bad(
        "[topics.o]\nresident = [\"x\"]\nlookahead_budget = \"2m\"\n",
        "lookahead_budget must be 0s to 60s",
    );
    bad(
        "[topics.o]\nexec = [\"true\"]\nlookahead_budget = \"5ms\"\n",
        "lookahead_budget applies to resident handlers only",
    );
    assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
    assert_eq!(parse_size("800K").unwrap(), 800_000);
}

#[test]
fn overrides_win_over_the_file() {
    let o = Overrides {
        workers: Some(7),
        redis: Some("redis://10.0.0.1:6380".into()),
        ..Overrides::default()
    };
    let c = Config::parse("workers = 2\n[topics.a]\nexec = [\"true\"]\n", "t", &o, &[]).unwrap();
    assert_eq!((c.workers, c.redis.as_str()), (7, "redis://10.0.0.1:6380"));
}

#[test]
fn security_keys_are_checked() {
    let c = parse("[topics.a]\nexec = [\"true\"]\n").unwrap();
    assert_eq!(c.max_retry_delay, Duration::from_secs(86_400));
    assert_eq!(c.http_header_timeout, Duration::from_secs(30));
    assert!(!c.require_token_for_reads);
    let c = parse("max_retry_delay = \"1h\"\napi_allowed_hosts = [\"q.example\"]\n[topics.a]\nexec = [\"true\"]\n").unwrap();
    assert_eq!(c.max_retry_delay, Duration::from_secs(3600));
    for (bad, says) in [
        ("max_retry_delay = \"0s\"", "max_retry_delay"),
        ("http_header_timeout = \"10ms\"", "http_header_timeout"),
        (
            "api_token = \"0123456789abcdef\"\napi_token_file = \"/t\"",
            "not both",
        ),
        (
            "api_allowed_hosts = [\"http://q.example/\"]",
            "not a host name",
        ),
    ] {
        let e = parse(&format!("{bad}\n[topics.a]\nexec = [\"true\"]\n")).unwrap_err();
        assert!(format!("{e:#}").contains(says), "{bad}: {e:#}");
    }
}
