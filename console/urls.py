from django.urls import path
from django.views.generic import RedirectView

from console import views, webhooks

app_name = "console"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("status/", views.system_status, name="system-status"),
    path("clusters/<slug:cluster>/", views.cluster_detail, name="cluster-detail"),
    path("topics/", views.topics, name="topics"),
    path("topics/<slug:cluster>/<str:topic>/", views.topic_detail, name="topic-detail"),
    path("brokers/", views.brokers, name="brokers"),
    path("topology/", views.topology, name="topology"),
]

# Machine endpoints (exempt from the login redirect; they authenticate themselves).
urlpatterns += [
    path("metrics", views.metrics, name="metrics"),
    path("favicon.ico", RedirectView.as_view(url="/static/console/favicon.svg"), name="favicon"),
    path("agent-events/", webhooks.agent_events, name="agent-events"),
    path("agent-events/<slug:cluster>/", webhooks.agent_events, name="agent-events-cluster"),
]
