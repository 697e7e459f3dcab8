"""Shared by the tests: the Redis to use (PUNCTUAL_TEST_REDIS_URL, a private
redis-server started by crates/punctual-cli/tests/clients.rs; never point it
at a Redis that holds data), the punctual binary (PUNCTUAL_BIN), fresh
prefixes."""

import os
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package, without installing it

import redis  # noqa: E402

REDIS_URL = os.environ.get("PUNCTUAL_TEST_REDIS_URL")
if not REDIS_URL:
    raise SystemExit("set PUNCTUAL_TEST_REDIS_URL to a scratch Redis (the Rust test does this)")
BIN = os.environ.get("PUNCTUAL_BIN")
TESTDATA = os.path.join(HERE, "..", "..", "testdata")


def client():
    return redis.Redis.from_url(REDIS_URL)


def fresh_prefix():
    return "pytest-" + uuid.uuid4().hex[:10]
