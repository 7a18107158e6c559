"""A one-file Django project for tests/test_serve.py, served over ASGI.

Each interpreter of the server imports it, so each configures Django itself.
"""

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="only-for-tests",
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=[],
        INSTALLED_APPS=[],
    )
django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402 - after setup()
from django.http import HttpResponse, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

import aiosubinterp  # noqa: E402


def hello(request):  # a sync view: Django runs it on asgiref's thread
    return HttpResponse("Hello from Django")


async def info(request):
    return JsonResponse(
        {
            "interpreter": aiosubinterp.get_current().id,
            "method": request.method,
            "q": request.GET.get("q", ""),
            "body": request.body.decode(),
        }
    )


urlpatterns = [path("", hello), path("info", info)]
application = get_asgi_application()
