"""One task in the Celery shape (`@task`, `.delay_in`)."""

from datetime import timedelta

import punctual  # was: from celery import shared_task

from .tasks import _record


@punctual.task(topic="shop", max_attempts=2, backoff=[timedelta(milliseconds=100)])
def remind(user_id, *, channel="mail"):
    _record("remind", [user_id, channel])
    if user_id == "flaky" and punctual.current_job().attempt == 1:
        raise RuntimeError("mail server busy")
