"""No template prints its own syntax: Django's ``{# #}`` comment is one line only, so a comment
that spans lines (the Topics page had one) is output as text, and so is a ``{% %}`` or ``{{ }}``
broken over lines. Each template is read by Django's own lexer; text it leaves as text must not
hold a tag opener."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.template.base import Lexer, TokenType

OPENERS = ("{#", "{%", "{{")


def _template_files() -> list[Path]:
    dirs = [Path(d) for d in settings.TEMPLATES[0]["DIRS"]]
    dirs += [
        Path(app.path) / "templates"
        for app in apps.get_app_configs()
        if Path(app.path).is_relative_to(settings.BASE_DIR)
    ]
    return sorted(f for d in dirs if d.is_dir() for f in d.rglob("*.html"))


TEMPLATES = _template_files()


def test_the_templates_are_found():
    names = {f.name for f in TEMPLATES}
    assert {"base.html", "topics_table.html", "workflow_new.html"} <= names


@pytest.mark.parametrize("path", TEMPLATES, ids=[f.name for f in TEMPLATES])
def test_no_template_syntax_is_left_as_text(path):
    source = path.read_text()
    for token in Lexer(source).tokenize():
        if token.token_type != TokenType.TEXT:
            continue
        for opener in OPENERS:
            assert opener not in token.contents, (
                f"{path.relative_to(settings.BASE_DIR)}:{token.lineno}: {opener} is printed as "
                "text; a comment over several lines needs {% comment %}...{% endcomment %}"
            )
