//! `punctual bench`: the benchmark protocol, run by the `punctual-bench`
//! crate; this module gives it `--redis` and `--json` and turns its
//! verdicts into exit codes.

use anyhow::Result;

use crate::context::Ctx;
use crate::exit;

pub(crate) use punctual_bench::BenchArgs;

/// Runs `punctual bench`. `redis_explicit`: --redis (or its variable) was
/// given, so no private server is started when it does not answer.
pub(crate) async fn run(ctx: &Ctx, args: BenchArgs, redis_explicit: bool) -> Result<()> {
    punctual_bench::run(&ctx.global.redis_url, redis_explicit, ctx.json(), args)
        .await
        .map_err(|e| match e.downcast::<punctual_bench::Verdict>() {
            Ok(punctual_bench::Verdict::Refused(m)) => exit::invalid(m),
            Ok(punctual_bench::Verdict::Failed(m)) => exit::problem(m),
            Err(e) => e,
        })
}
