"""The views of the Django site of tests/test_frameworks.py.

GET /work?hold=SECONDS   holds its permit that long
GET /fail                answers 503 (released as "dropped")
"""

import time

from django.http import HttpResponse, JsonResponse
from django.urls import path


def work(request):
    hold = float(request.GET.get("hold", "0"))
    time.sleep(hold)
    return JsonResponse({"held": hold})


def fail(request):
    return HttpResponse("unavailable\n", status=503)


urlpatterns = [path("work", work), path("fail", fail)]
