"""Tasks using the Django ORM's connection; every connection Django opens is
counted on Redis (djshop:connections), every run recorded (djshop:ran)."""

import json
import os

import redis
from django.conf import settings
from django.db import connection
from django.db.backends.signals import connection_created

import punctual

r = redis.Redis.from_url(os.environ["SHOP_REDIS_URL"])
connection_created.connect(lambda sender, connection, **kw: r.incr("djshop:connections"), weak=False)


@punctual.task(topic="shop")
def count_rows(n):
    with connection.cursor() as c:
        c.execute("SELECT %s", [n])
        (value,) = c.fetchone()
    r.rpush("djshop:ran", json.dumps({"n": value, "shop": settings.SHOP_NAME}))
