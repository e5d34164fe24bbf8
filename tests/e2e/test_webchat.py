"""The demo's web chat in a real headless Chromium: a message round trip, a group with an
@mention, an approval card clicked, a typing reaction and a streamed answer stopped with
/stop (real listener, real workers, the simulator serving the page), then a reload that
shows the same conversation, with no error in the browser's console. Saves a screenshot.
A message no bot can take is shown as not sent, with what to start, and given back in the
input box. The bot's menu opened and clicked, a form refused with a toast then filled in and
submitted, and a +1 on the bot's answer."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator
from tests.support.agents import reactions_key
from tests.support.rig import Rig, rig_up

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chromium.webdriver import ChromiumDriver  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402

SCREENSHOT = Path(__file__).resolve().parents[2] / ".artifacts" / "webchat.png"

one_pool = pytest.mark.parametrize("pool", ["prefork"], indirect=True)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    """Looked for when the test runs (.ci/run installs it while the suite starts)."""
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.skip("NO BROWSER: the web chat is untested here (apt-get install chromium "
                    "chromium-driver; .ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu", "--window-size=1200,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(chromedriver), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def say(driver: WebDriver, text: str) -> None:
    box = driver.find_element(By.ID, "text")
    box.send_keys(text)
    box.send_keys("\n")


def texts(driver: WebDriver, selector: str) -> list[str]:
    """The text of every element `selector` finds, read in one step (the page redraws)."""
    found = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)", selector)
    return [str(t) for t in found]


def conversation(driver: WebDriver) -> list[tuple[str, str]]:
    """("you" or "bot", text) of every message shown, top to bottom."""
    found = driver.execute_script(
        "return [...document.querySelectorAll('#log .msg')].map(e => ["
        "e.classList.contains('user') ? 'you' : 'bot',"
        "(e.querySelector('.text, .body') || e).innerText])")
    return [(str(who), str(text).strip()) for who, text in found]


def console_errors(driver: WebDriver) -> list[str]:
    """What the page logged at error level (a failed load, e.g. a missing favicon)."""
    assert isinstance(driver, ChromiumDriver)
    logged = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return [str(e["message"]) for e in logged if e["level"] == "SEVERE"]


def bot_says(driver: WebDriver, text: str, timeout_s: float = 30) -> None:
    wait_until(lambda: any(text in t for t in texts(driver, ".msg.bot, .msg.card")),
               timeout_s, f"the bot's {text!r} on the page")


def click_button(driver: WebDriver, label: str) -> bool:
    for button in driver.find_elements(By.CSS_SELECTOR, ".card button"):
        try:
            if button.text == label:
                button.click()
                return True
        except StaleElementReferenceException:  # redrawn meanwhile: look again
            return False
    return False


@one_pool
def test_a_person_chats_with_the_bot_in_the_browser(
        feishu: Simulator, listener: GatewayProcess, browser: WebDriver) -> None:
    browser.get(feishu.url + "/")
    say(browser, "hello from the browser")
    bot_says(browser, "echo: hello from the browser")

    browser.find_element(By.CSS_SELECTOR, "nav button[data-chat='oc_web_team']").click()
    assert browser.find_element(By.ID, "mention").is_selected(), "@bot is on in a group"
    say(browser, "hello team")
    bot_says(browser, "echo: hello team")

    browser.find_element(By.CSS_SELECTOR, "nav button[data-chat='oc_web_dm']").click()
    say(browser, "approve 60 tool May I run the tool?")
    wait_until(lambda: click_button(browser, "Allow once"), 30, "the card's button clicked")
    bot_says(browser, "decision: once")

    say(browser, "stream 100 0.3")  # a word every 0.3 s, for 30 s
    wait_until(lambda: any("typing…" in t for t in texts(browser, ".msg.user .reactions")),
               30, "the typing reaction on the page")
    bot_says(browser, "w1")
    say(browser, "/stop")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".msg .stop-mark"), 10,
               "the stopped answer's mark, drawn by the page")
    wait_until(lambda: any("✓ done" in t for t in texts(browser, ".msg.user .reactions")),
               10, "the /stop confirmed with a reaction, drawn in words")
    assert not any("\u23f9" in t for t in texts(browser, ".msg")), \
        "no bare stop glyph (a missing-glyph box in a browser without an emoji font)"
    SCREENSHOT.parent.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT)) and SCREENSHOT.stat().st_size > 10_000

    browser.refresh()
    mine = ["hello from the browser", "approve 60 tool May I run the tool?", "stream 100 0.3",
            "/stop"]
    wait_until(lambda: [t for who, t in conversation(browser) if who == "you"] == mine, 10,
               "the user's own messages shown again after a reload")
    shown = conversation(browser)
    first = shown.index(("you", "hello from the browser"))
    assert shown[first + 1] == ("bot", "echo: hello from the browser"), shown
    assert any(who == "bot" and "decision: once" in t for who, t in shown), shown
    assert console_errors(browser) == [], "no failed load (a favicon) nor script error"


@one_pool
def test_the_gateways_cards_are_drawn_as_feishu_draws_them(
        feishu: Simulator, listener: GatewayProcess, browser: WebDriver) -> None:
    """A streaming card's current step and Stop button, a finished answer's collapsed steps
    (expanded by a click), markdown's inline styles: no [tag] placeholder for anything the
    gateway sends, no bare glyph a font may lack."""
    browser.get(feishu.url + "/")
    say(browser, "steps 3 0.8")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".card .step-mark"), 20,
               "the current step's mark, drawn")
    wait_until(lambda: any(b.text == "Stop" for b in browser.find_elements(
        By.CSS_SELECTOR, ".card button")), 10, "the streaming card's Stop button")
    bot_says(browser, "done after 3 steps")
    panel = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".card details.panel"),
                       10, "the finished answer's steps panel")
    assert isinstance(panel, list)
    panel[0].find_element(By.TAG_NAME, "summary").click()
    wait_until(lambda: any("step 1" in t for t in texts(browser, ".card details.panel[open]")),
               10, "the steps listed once expanded")
    say(browser, "table 2")  # markdown: a table, drawn as one
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#log table td"), 20,
               "the answer's table drawn")
    say(browser, "stream 100 0.2")
    bot_says(browser, "w2")
    wait_until(lambda: click_button(browser, "Stop"), 10, "the card's Stop button clicked")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".card .stop-mark"), 15,
               "the answer stopped by its button")
    assert texts(browser, "#log .unknown") == [], "every element the gateway sends is drawn"
    shown = "".join(texts(browser, "#log .msg"))
    assert "\u23f3" not in shown and "\u23f9" not in shown and "**" not in shown
    assert console_errors(browser) == []


def topic_texts(driver: WebDriver) -> list[str]:
    """The text of each topic block, top to bottom."""
    return texts(driver, "#log .topic")


@one_pool
def test_topics_of_a_topic_group_run_side_by_side_and_show_pictures(
        feishu: Simulator, listener: GatewayProcess, browser: WebDriver) -> None:
    browser.get(feishu.url + "/")
    browser.find_element(By.CSS_SELECTOR, "nav button[data-chat='oc_web_topics']").click()
    say(browser, "stream 80 0.2")  # a new topic: 16 s of words
    bot_says(browser, "w2")
    say(browser, "hello topic two")  # another new topic, while the first streams
    bot_says(browser, "echo: hello topic two")
    first, second = topic_texts(browser)[:2]
    assert "stream 80" in first and "w79" not in first, "the first topic still streams"
    assert "hello topic two" in second and "stream 80" not in second, "topics apart"
    browser.find_element(By.CSS_SELECTOR, "#log .topic .head button").click()  # reply here
    say(browser, "/stop")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".topic .stop-mark"), 15,
               "the first topic's answer stopped")
    assert "stream 80" in topic_texts(browser)[0] and "/stop" in topic_texts(browser)[0]
    Select(browser.find_element(By.ID, "topic")).select_by_value("new")
    say(browser, "media")  # a third topic: the bot answers with a picture and a file
    wait_until(lambda: browser.execute_script(
        "const i = document.querySelector('#log img.picture');"
        "return i !== null && i.complete && i.naturalWidth > 0"), 30, "the picture drawn")
    assert any("data.csv" in t for t in texts(browser, "#log a.file"))
    assert len(topic_texts(browser)) == 3 and "media" in topic_texts(browser)[2]
    assert console_errors(browser) == []
    SCREENSHOT.parent.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT.with_name("webchat-topics.png")))


def test_a_message_no_bot_can_take_is_shown_as_not_sent_and_given_back(
        simulator: Simulator, browser: WebDriver) -> None:
    simulator.delivery_timeout_s = 0.3  # no listener: the send answers 503
    browser.get(simulator.url + "/")
    say(browser, "words worth keeping")
    error = browser.find_element(By.ID, "error")
    wait_until(error.is_displayed, 10, "the error on the page")
    assert error.text == (
        "Not sent: no bot is connected to this simulator yet: start `feishu-gateway listen` "
        f"with FEISHU_DOMAIN={simulator.url} and FEISHU_APP_ID={simulator.app_id} (the "
        "export lines `feishu-gateway simulator` printed)")
    assert browser.find_element(By.ID, "text").get_property("value") == "words worth keeping"
    assert texts(browser, ".msg.user") == [], "no message shown as sent"


def act_on(driver: WebDriver, text: str, action: str) -> bool:
    """Click `action` (edit, withdraw) under the user's own message that reads `text`."""
    path = (f"//div[contains(@class, 'user')][div[@class='text' and normalize-space()='{text}']]"
            f"//div[@class='acts']/button[text()='{action}']")
    try:
        buttons = driver.find_elements(By.XPATH, path)
        if not buttons:
            return False
        buttons[0].click()
    except StaleElementReferenceException:  # redrawn meanwhile: look again
        return False
    return True


@one_pool
def test_a_person_edits_and_withdraws_waiting_messages_in_the_browser(
        feishu: Simulator, listener: GatewayProcess, browser: WebDriver) -> None:
    browser.get(feishu.url + "/")  # the direct chat
    say(browser, "sleep 3")
    say(browser, "to be edited")
    say(browser, "to be withdrawn")
    wait_until(lambda: act_on(browser, "to be edited", "edit"), 10, "the edit button")
    alert = browser.switch_to.alert
    alert.send_keys("edited in the browser")
    alert.accept()
    wait_until(lambda: act_on(browser, "to be withdrawn", "withdraw"), 10, "withdraw")
    bot_says(browser, "echo: edited in the browser")
    bot_says(browser, "echo: sleep 3")
    shown = conversation(browser)
    assert ("you", "to be withdrawn") not in shown and ("you", "edited in the browser") in shown
    assert not any(who == "bot" and "to be withdrawn" in t for who, t in shown), shown


@pytest.fixture
def menu_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A gateway whose bot has a menu (FEISHU_MENU, and the simulator's console menu)."""
    with rig_up(tmp_path_factory, FEISHU_MENU=json.dumps({"hi": "menu says hi"})) as rig:
        rig.sim.menu = [("hi", "Say hi")]
        yield rig


def fill(driver: WebDriver, selector: str, act: Callable[[Any], None]) -> bool:
    """`act` on the field `selector` finds (False when the page redrew it meanwhile)."""
    try:
        act(driver.find_element(By.CSS_SELECTOR, selector))
    except (StaleElementReferenceException, NoSuchElementException):
        return False
    return True


def test_a_person_opens_the_menu_fills_a_form_and_reacts_in_the_browser(
        menu_rig: Rig, browser: WebDriver) -> None:
    sim, form = menu_rig.sim, ".card form.fields"
    browser.get(sim.url + "/")
    browser.find_element(By.ID, "menu-button").click()
    item = "#menu button[data-key='hi']"
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, item), 10, "the menu's items")
    browser.find_element(By.CSS_SELECTOR, item).click()
    bot_says(browser, "☰ menu says hi")
    bot_says(browser, "echo: menu says hi")

    say(browser, "form 120")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, f"{form} input[name='name']"),
               30, "the form drawn")
    wait_until(lambda: click_button(browser, "Submit"), 10, "an empty form submitted")
    wait_until(lambda: browser.find_element(By.ID, "toast").text == "Please fill in: Your name",
               10, "the refusal's toast")
    wait_until(lambda: fill(browser, f"{form} input[name='name']", lambda e: e.send_keys("Ann")),
               10, "the name typed")
    wait_until(lambda: fill(browser, f"{form} select[name='level']",
                            lambda e: Select(e).select_by_value("medium")), 10, "a level chosen")
    wait_until(lambda: fill(browser, f"{form} input[name='notify']", lambda e: e.click()), 10,
               "the box ticked")
    wait_until(lambda: click_button(browser, "Submit"), 10, "the form submitted")
    bot_says(browser, 'form: submitted {"level": "medium", "name": "Ann", "notify": true}')

    dm = sim.p2p_chat_of("ou_user_1")
    assert dm == "oc_web_dm", "the menu's echo went to the page's direct chat"
    plus_one = "#log .msg.bot .feedback button[data-emoji='THUMBSUP']"
    wait_until(lambda: fill(browser, plus_one, lambda e: e.click()), 10, "+1 clicked")
    wait_until(lambda: menu_rig.client().llen(reactions_key(dm)) == 1, 30,
               "the reaction handed to the agent's hook")
    wait_until(lambda: any("+1" in t for t in texts(browser, "#log .msg.bot .reactions")), 10,
               "the +1 drawn under the bot's message")
    assert texts(browser, "#log .unknown") == []
    assert console_errors(browser) == []
