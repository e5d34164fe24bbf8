"""The README and docs/: the README stays short, every link leads somewhere, no page cites
past work, the settings page is the one gateway/ops/settingsdoc.py writes, the layout names
every module, and each agent in docs/examples/ answers through a real gateway."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.core.settings import Settings
from gateway.ops import settingsdoc
from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import SentMessage
from tests.conftest import Rig
from tests.test_approvals import button

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
EXAMPLES = DOCS / "examples"
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


# The examples, each run by a worker of its own on one rig (Redis, simulator, listener).

@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(EXAMPLES))  # as docs/agents.md says to run them
        rig = Rig(tmp_path_factory, pool="threads")
        try:
            rig.listener(wait=False)  # it gets ready while the first example's worker starts
            yield rig
        finally:
            rig.close()


def example_worker(rig: Rig, factory: str) -> GatewayProcess:
    """A worker whose agent is `factory`; killed by the test once its answer is in (the
    next example's worker must be the only one taking turns)."""
    worker = rig.fleet("worker", concurrency=1, GATEWAY_AGENT=factory)
    rig.sim.wait_connected(1, timeout_s=30)
    return worker


def reply_to(rig: Rig, chat_id: str, message_id: str, kind: str) -> SentMessage:
    found = wait_until(lambda: next((m for m in rig.sim.sent_messages(chat_id)
                                     if m.reply_to == message_id and m.msg_type == kind),
                                    None), 30, f"the {kind} reply")
    assert isinstance(found, SentMessage)
    return found


def test_the_streaming_example_answers_in_one_growing_card(rig: Rig, chat_id: str) -> None:
    worker = example_worker(rig, "shouter:factory")
    try:
        asked = rig.sim.send_text(chat_id, "make some noise")
        card = reply_to(rig, chat_id, asked, "interactive")
        view = rig.sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
        assert view.elements["answer"] == "MAKE SOME NOISE "
    finally:
        worker.kill()


def test_the_approval_example_asks_then_acts_on_the_click(rig: Rig, chat_id: str) -> None:
    worker = example_worker(rig, "careful:factory")
    try:
        asked = rig.sim.send_text(chat_id, "clean the build")
        card = reply_to(rig, chat_id, asked, "interactive")
        assert "Delete `build/`?" in card.text
        rig.sim.send_card_action(chat_id, card.message_id, "ou_user_1", button(card, "once"))
        answer = wait_until(lambda: [m.text for m in rig.sim.sent_messages(chat_id)
                                     if m.reply_to == asked and m.msg_type != "interactive"],
                            30, "the answer after the click")
        assert answer == ["Deleted build/ (pretend; allowed once)."]
    finally:
        worker.kill()
