"""docs/settings.md, written from the parts of `Settings`: every variable, its default and its
help (the field's docstring). `python -m gateway.ops.settingsdoc > docs/settings.md` writes the
page again; tests/docs/test_docs.py fails when the page drifts from what this prints."""

from __future__ import annotations

import sys
import typing
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from gateway.core.settings import PARTS

PAGE = "docs/settings.md"

INTRO = """\
<!-- Written by `python -m gateway.ops.settingsdoc > docs/settings.md` from the docstrings
in gateway/core/settings.py and its parts (gateway/core/*_settings.py): edit those, then run
it again (tests/docs/test_docs.py checks the two agree). -->

# Settings

Every setting is an environment variable, read once at start (also from a `.env` file in
the working directory). A bad value stops start-up with one line naming the variable, e.g.
`feishu-gateway: bad setting GATEWAY_CANCEL_TIMEOUT: Input should be a valid number, ...`;
a secret's value is never printed. `feishu-gateway <command> --help` names the settings a
command reads. Each group links to the page that explains its settings at length.
"""


def variable(info: FieldInfo) -> str:
    alias = info.validation_alias
    assert isinstance(alias, str), "every setting is read from one environment variable"
    return alias


def default_of(info: FieldInfo) -> str:
    value: Any = info.default
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value == "":
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def choices_of(info: FieldInfo) -> tuple[str, ...]:
    if typing.get_origin(info.annotation) is typing.Literal:
        return tuple(str(choice) for choice in typing.get_args(info.annotation))
    return ()


def help_of(info: FieldInfo) -> str:
    text = " ".join((info.description or "").split())
    choices = choices_of(info)
    if choices:
        text += " One of " + ", ".join(f"`{choice}`" for choice in choices) + "."
    return text.replace("|", "\\|")


def render() -> str:
    """The whole page: one group per part of `Settings`, its fields in their order."""
    parts = [INTRO]
    for part in PARTS:
        title, link = part.doc_title, part.doc_link
        parts.append(f"## {title}\n")
        parts.append(f"More in [{link.split('#')[0]}]({link}).\n")
        rows = ["| variable | default | what it does |", "|---|---|---|"]
        rows += [f"| `{variable(info)}` | {default_of(info)} | {help_of(info)} |"
                 for info in part.model_fields.values()]
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
