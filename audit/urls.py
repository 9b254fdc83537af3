from django.urls import path

from audit import views

app_name = "audit"

urlpatterns = [
    path("audit/", views.audit, name="list"),
    path("audit/<int:seq>/", views.audit_detail, name="detail"),
    path("audit/verify/", views.verify_request, name="verify"),
    path("audit/verify/<int:pk>/", views.verify_status, name="verify-status"),
    path("audit/export.csv", views.audit_export, {"fmt": "csv"}, name="export-csv"),
    path("audit/export.jsonl", views.audit_export, {"fmt": "jsonl"}, name="export-jsonl"),
]
