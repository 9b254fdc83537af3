from django.urls import path

from workflows import views

app_name = "workflows"

urlpatterns = [
    path("workflows/", views.workflow_list, name="list"),
    path("workflows/new/", views.workflow_new, name="new"),
    path("workflows/running/", views.running_panel, name="running"),
    path("workflows/driver/", views.disablement_driver, name="driver"),
    path("workflows/<int:pk>/", views.workflow_detail, name="detail"),
    path("workflows/<int:pk>/live/", views.workflow_live, name="live"),
    path("workflows/<int:pk>/approve/", views.workflow_approve, name="approve"),
    path("workflows/<int:pk>/cancel/", views.workflow_cancel, name="cancel"),
    path("workflows/<int:pk>/confirm/", views.workflow_confirm, name="confirm"),
]
