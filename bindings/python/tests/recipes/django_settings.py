"""The least Django needs to serve django_urls.py (no database, no apps):
DJANGO_SETTINGS_MODULE=django_settings, as tests/test_frameworks.py runs
gunicorn django_wsgi:application."""

SECRET_KEY = "flowctrl-test-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "django_urls"
INSTALLED_APPS: list = []
MIDDLEWARE: list = []
DATABASES: dict = {}
USE_TZ = True
