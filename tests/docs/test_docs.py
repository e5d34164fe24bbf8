"""The README and docs/: the README stays short, every link leads somewhere, no page cites
past work, the settings page is the one gateway/ops/settingsdoc.py writes, the layout names
every module. (Each agent in docs/examples/ answering through a real gateway:
e2e/test_examples.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.core.settings import Settings
from gateway.ops import settingsdoc

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_BYTES = 12 * 1024
PAGES = [README, *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PAST_WORK = re.compile(r"\bissues? \d+|#\d+\b|\bbefore/after\b|\bitem \d+", re.IGNORECASE)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings."""
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_the_readme_fits_on_a_few_screens() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail into docs/"


def test_the_readme_keeps_the_two_commands_ci_runs() -> None:
    readme = README.read_text()
    run = ("python3 -m venv .venv && .venv/bin/pip install -e . && "
           ".venv/bin/feishu-gateway demo")
    test = ("python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && "
            ".venv/bin/python -m pytest")
    assert run in readme and test in readme
    assert test in (REPO / ".ci" / "run").read_text(), "CI runs the README's test command"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        missing_anchor = anchor and linked.suffix == ".md" and anchor not in anchors(linked)
        if not linked.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page.name}: links to nothing: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_no_page_cites_past_work(page: Path) -> None:
    cited = [m.group(0) for m in PAST_WORK.finditer(page.read_text())]
    assert not cited, f"{page.name} describes the product as it is, not its history: {cited}"


def test_every_setting_has_help_and_the_settings_page_is_current() -> None:
    undocumented = [name for name, info in Settings.model_fields.items() if not info.description]
    assert not undocumented, \
        f"give these fields a docstring in gateway/core/settings.py: {undocumented}"
    page = (REPO / settingsdoc.PAGE).read_text()
    for info in Settings.model_fields.values():
        assert f"| `{info.validation_alias}` |" in page, f"{info.validation_alias} is missing"
    assert page == settingsdoc.render(), (
        "docs/settings.md drifted: run `python -m gateway.ops.settingsdoc > docs/settings.md`")


def test_the_layout_names_every_module_and_folder() -> None:
    layout = (DOCS / "design.md").read_text().split("## Layout", 1)[1]
    parts = [p for p in (REPO / "gateway").iterdir()
             if not p.name.startswith(("_", ".")) and (
                 p.suffix == ".py" or (p.is_dir() and any(p.rglob("*.py"))))]
    # a folder of bytecode alone is what a module that moved left behind in a checkout
    named = [f"gateway/{p.name}{'/' if p.is_dir() else ''}" for p in sorted(parts)]
    missing = [name for name in named if name not in layout]
    assert not missing, f"docs/design.md's layout does not name {missing}"
    for folder in ("tasks/", "bench/", "docker/", "tests/", "docs/"):
        assert folder in layout


def test_the_layout_names_every_module_in_its_folders_entry() -> None:
    """Each module of a gateway/ folder (its subfolders' too) is named, as a word, in the
    Layout's entry for that folder."""
    layout = (DOCS / "design.md").read_text().split("## Layout", 1)[1].split("```")[1]
    entries: dict[str, str] = {}
    current = ""
    for line in layout.splitlines():
        if line.startswith("gateway/"):
            current = line.split()[0]
        if current:
            entries[current] = entries.get(current, "") + " " + line
    missing = []
    for module in sorted((REPO / "gateway").rglob("*.py")):
        relative = module.relative_to(REPO / "gateway")
        if len(relative.parts) < 2 or module.name == "__init__.py":
            continue
        entry = entries.get(f"gateway/{relative.parts[0]}/", "")
        if not re.search(rf"\b{re.escape(module.stem)}\b", entry):
            missing.append(str(relative))
    assert not missing, f"docs/design.md's layout does not name {missing}"
