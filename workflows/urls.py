from django.urls import path

from workflows import views

app_name = "workflows"

urlpatterns = [
    path("workflows/", views.workflow_list, name="list"),
    path("audit/", views.audit, name="audit"),
]
