//! What readers get back about jobs: where a job is ([`State`]), a job as
//! stored ([`JobInfo`]) and as a listing shows it.

use serde::Serialize;

/// Where a job is.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::State;
/// if let Some(job) = queue.get("orders", "order:1").await? {
///     match job.state {
///         State::Pool | State::Ready => println!("waiting"),
///         State::Running => println!("running, attempt {}", job.attempts),
///         State::Dead => println!("dead: {:?}", job.last_error),
///         _ => println!("{}", job.state),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum State {
    /// Waiting for its due time.
    Pool,
    /// Due, waiting for a worker.
    Ready,
    /// Leased by a worker.
    Running,
    /// In the dead-letter set.
    Dead,
    /// A record in no set: a broken invariant that `check` reports.
    Orphan,
}

impl State {
    /// The lowercase name.
    ///
    /// ```
    /// assert_eq!(punctual::State::Pool.as_str(), "pool");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            State::Pool => "pool",
            State::Ready => "ready",
            State::Running => "running",
            State::Dead => "dead",
            State::Orphan => "orphan",
        }
    }
}

/// Parses the lowercase name ([`State::as_str`]).
///
/// ```
/// let s: punctual::State = "running".parse()?;
/// assert_eq!(s, punctual::State::Running);
/// assert!("Running".parse::<punctual::State>().is_err());
/// # Ok::<(), punctual::Error>(())
/// ```
impl std::str::FromStr for State {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<State> {
        Ok(match s {
            "pool" => State::Pool,
            "ready" => State::Ready,
            "running" => State::Running,
            "dead" => State::Dead,
            "orphan" => State::Orphan,
            _ => {
                return Err(crate::Error::invalid(format!(
                    "unknown state {s:?}: give pool, ready, running, dead or orphan"
                )))
            }
        })
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job as stored, from [`crate::Queue::get`] or the dead list.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// if let Some(job) = queue.get("orders", "order:1").await? {
///     let wait_ms = job.due_ms - job.now_ms;
///     println!("{} in {}, due in {wait_ms} ms", job.id, job.state);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct JobInfo {
    /// The id.
    pub id: String,
    /// Where it is.
    pub state: State,
    /// Deliveries so far (attempts count at claim time).
    pub attempts: u32,
    /// Deliveries allowed before dead.
    pub max_attempts: u32,
    /// Due time, epoch ms (Redis clock).
    pub due_ms: i64,
    /// Creation time, epoch ms (Redis clock).
    pub created_ms: i64,
    /// Lease deadline (running) or time of death (dead), epoch ms.
    pub state_since_ms: Option<i64>,
    /// The last error, if an attempt failed.
    pub last_error: Option<String>,
    /// The payload.
    #[serde(serialize_with = "ser_payload")]
    pub payload: Vec<u8>,
    /// Redis's clock when this was read, epoch ms.
    pub now_ms: i64,
    /// The expiry deadline ([`Job::expire`](crate::Job::expire)): the job may
    /// start only until then, epoch ms.
    pub deadline_ms: Option<i64>,
    /// The handler timeout of this job ([`Job::timeout`](crate::Job::timeout)),
    /// ms.
    pub timeout_ms: Option<u64>,
    /// The job's group ([`Job::group`](crate::Job::group)).
    pub group: Option<String>,
    /// The producer's trace context
    /// ([`Job::traceparent`](crate::Job::traceparent)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Its tracestate ([`Job::tracestate`](crate::Job::tracestate)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

fn ser_payload<S: serde::Serializer>(p: &[u8], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(p))
}

/// A job as a listing shows it ([`crate::Queue::list`],
/// [`crate::Queue::peek`]): its id and its score in the state's set, epoch
/// ms (pool and ready: due time; running: lease deadline; dead: time of
/// death).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// for punctual::Listed { id, at_ms, .. } in queue.peek("orders", punctual::State::Pool, 10).await? {
///     println!("{id} is due at {at_ms}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Listed {
    /// The job id.
    pub id: String,
    /// Its score in the state's set, epoch ms (for a job in the cold pool,
    /// its record's due time).
    pub at_ms: i64,
}

/// One page of [`crate::Queue::list`]: ids with their score in the state's
/// set (pool: due time; ready: due time; running: lease deadline; dead: time
/// of death; epoch ms), sorted by it, and the cursor of the next page.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// let page = queue.list("orders", punctual::State::Dead, "", None, 100).await?;
/// for job in &page.jobs {
///     println!("{} died at {}", job.id, job.at_ms);
/// }
/// if page.cursor.is_some() {
///     println!("more on the next page");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ListPage {
    /// Ids and scores (ms), lowest score first within the page.
    pub jobs: Vec<Listed>,
    /// Pass it back for the next page; `None`: the listing is complete.
    pub cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enqueued::EnqueueStatus;

    #[test]
    fn names_of_states_and_statuses_round_trip_as_serde_writes_them() {
        for s in [
            State::Pool,
            State::Ready,
            State::Running,
            State::Dead,
            State::Orphan,
        ] {
            assert_eq!(s.as_str().parse::<State>().unwrap(), s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        let err = "Pool".parse::<State>().unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert!(
            err.to_string().contains("pool, ready, running, dead"),
            "{err}"
        );
        for s in [
            EnqueueStatus::Created,
            EnqueueStatus::Duplicate,
            EnqueueStatus::Replaced,
            EnqueueStatus::Dead,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(s.to_string(), s.as_str());
        }
    }
}
