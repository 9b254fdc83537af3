from django.urls import path

from spark_tasks import views

app_name = "spark_tasks"

urlpatterns = [
    path("", views.run_list, name="run-list"),
]
