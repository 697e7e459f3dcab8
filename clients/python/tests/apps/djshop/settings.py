"""A minimal Django project for the --django recipe's test (client_apps.rs)."""

import os

SECRET_KEY = "test-only"
INSTALLED_APPS = []
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["DJSHOP_DB"],
                         "CONN_MAX_AGE": 0}}
USE_TZ = True
SHOP_NAME = "djshop"
