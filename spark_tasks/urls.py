from django.urls import path

from spark_tasks import views

app_name = "spark_tasks"

urlpatterns = [
    path("", views.run_list, name="run-list"),
    path("dry-run/", views.start_dry_run, name="start-dry-run"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/plan/", views.run_plan, name="run-plan"),
]
