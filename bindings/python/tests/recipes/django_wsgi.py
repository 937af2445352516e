"""A Django site behind flowctrl.wsgi.RateLimitMiddleware, as
tests/test_frameworks.py runs it:

    DJANGO_SETTINGS_MODULE=django_settings gunicorn --timeout 2 django_wsgi:application

The setup is the two lines of docs/guide/middleware.md: the import and the
wrapped ``application`` (what Django's generated wsgi.py holds). Every
request takes a permit of the task "django" of the table named by
RECIPE_TABLE, which the test sets up.
"""

import os

import flowctrl
from django.core.wsgi import get_wsgi_application
from flowctrl.wsgi import RateLimitMiddleware

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_settings")
table = flowctrl.Table(os.environ["RECIPE_TABLE"])

application = RateLimitMiddleware(get_wsgi_application(), task=table.task("django"))
