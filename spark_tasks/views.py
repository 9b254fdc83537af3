from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def run_list(request: HttpRequest) -> HttpResponse:
    return render(request, "spark_tasks/run_list.html", {"runs": []})
