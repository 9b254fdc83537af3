"""Strata's URLs: pages per app, auth, the admin and the JSON API under /api/v1/."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from config.api import api

urlpatterns = [
    path("", include("console.urls")),
    path("", include("workflows.urls")),
    path("", include("audit.urls")),
    path("", include("accounts.urls")),
    path("spark/", include("spark_tasks.urls")),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
