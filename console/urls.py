from django.urls import path

from console import views

app_name = "console"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("status/", views.system_status, name="system-status"),
    path("topics/", views.topics, name="topics"),
    path("brokers/", views.brokers, name="brokers"),
    path("topology/", views.topology, name="topology"),
]
