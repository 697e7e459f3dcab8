"""``python -m punctual APP [APP ...]``: the resident program that runs the
@punctual.task functions of the app's modules under ``punctual serve``::

    [topics.orders]
    resident = ["/srv/app/.venv/bin/python", "-m", "punctual", "myproject.tasks"]
    cwd = "/srv/app"

Options: ``--inflight N`` runs up to N jobs at once on asyncio (for
``async def`` tasks); ``--lookahead N`` (0 to 64, default 16) is how many
jobs a one-at-a-time program is written ahead (docs/RESIDENT.md,
"Look-ahead"); ``--django SETTINGS`` sets DJANGO_SETTINGS_MODULE, runs
``django.setup()`` before importing the app, and closes the database
connections that are unusable or past CONN_MAX_AGE before and after each job
(``django.db.close_old_connections``, as Django's request cycle does).
"""

import argparse
import asyncio
import os
import sys

from . import run, run_async


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m punctual", description=__doc__.split("\n\n")[0])
    ap.add_argument("app", nargs="+", help="module(s) defining the @punctual.task functions, e.g. myproject.tasks")
    ap.add_argument("--inflight", type=int, default=0,
                    help="run up to N jobs at once on asyncio (async def tasks); default: one at a time")
    ap.add_argument("--lookahead", type=int, default=16,
                    help="jobs written ahead of the one running, one at a time (0 to 64; default 16)")
    ap.add_argument("--django", metavar="SETTINGS",
                    help="a Django settings module: django.setup() first, close_old_connections around each job")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.getcwd())  # the app, as `python -m` from its directory would find it
    hooks = {}
    if args.django:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", args.django)
        import django
        django.setup()
        from django.db import close_old_connections
        hooks = {"before_job": close_old_connections, "after_job": close_old_connections}
    if args.inflight:
        asyncio.run(run_async(app=args.app, inflight=args.inflight, **hooks))
    else:
        run(app=args.app, lookahead=args.lookahead, **hooks)


if __name__ == "__main__":
    main()
