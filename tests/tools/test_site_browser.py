"""The course site in a real browser (Debian's Chromium, headless, through Selenium), opened from
disk as a reader without a network would open it: every page loads only files of the site, its
formulas are typeset by the bundled KaTeX, every link and anchor resolves, the setup cell is
folded, the search box finds a term and follows a result, and a Chinese page searches in Chinese
and switches to its English counterpart.

Screenshots of a page with formulas, of a search and of a Chinese search go to
build/site-screenshots/ (or $GM_SITE_SCREENSHOTS). Part of the browser step (marker
``browser``): python -m pytest -m browser.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from course import ROOT
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from test_browser import start_chromium, wait_for
from test_site import build_or_skip

pytestmark = pytest.mark.browser
SCREENSHOTS = Path(os.environ.get("GM_SITE_SCREENSHOTS", ROOT / "build" / "site-screenshots"))
# The text a reader sees, less code, outputs and what KaTeX made: no TeX may be left in it.
VISIBLE_PROSE = """
const copy = document.body.cloneNode(true);
copy.querySelectorAll("pre, code, script, style, textarea, .katex, .jp-OutputArea, nav")
    .forEach((e) => e.remove());
return copy.textContent;
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build_or_skip(out)
    return out


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    driver = start_chromium(tmp_path_factory.mktemp("chromium"), record_requests=True)
    yield driver
    driver.quit()


def requests_and_errors(driver) -> tuple[set[str], list[str]]:
    """What the page asked for since the last call, and what the console reported as errors."""
    urls = set()
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.add(message["params"]["request"]["url"])
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return urls, errors


def open_page(driver, site: Path, page: str) -> None:
    driver.get((site / page).as_uri())
    wait_for(
        lambda: driver.execute_script("return document.body.dataset.formulas"), 30,
        f"{page}'s script to run",
    )  # fmt: skip


def assert_offline(driver, page: str) -> None:
    urls, errors = requests_and_errors(driver)
    remote = sorted(u for u in urls if urlparse(u).scheme in ("http", "https", "ws", "wss"))
    assert remote == [], f"{page} asked the network for {remote}"
    assert errors == [], f"{page}'s console: {errors}"


def test_every_page_opens_offline_with_formulas_typeset_and_every_link_resolving(site, chromium):
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    ids, links, formulas = {}, {}, {}
    requests_and_errors(chromium)  # start from a clean log
    for page in pages:
        open_page(chromium, site, page)
        assert chromium.execute_script("return document.body.dataset.formulas") == "typeset"
        assert_offline(chromium, page)
        errors = chromium.find_elements(By.CSS_SELECTOR, ".katex-error")
        assert errors == [], f"{page}: KaTeX could not typeset {[e.text for e in errors][:3]}"
        prose = chromium.execute_script(VISIBLE_PROSE)
        raw = re.findall(r"\$[^$\s][^$]*?\$|\\\(.+?\\\)", prose)
        assert raw == [], f"{page} still shows TeX: {raw[:3]}"
        formulas[page] = len(chromium.find_elements(By.CSS_SELECTOR, ".katex"))
        ids[page] = set(chromium.execute_script(
            "return [...document.querySelectorAll('[id]')].map((e) => e.id)"))  # fmt: skip
        links[page] = chromium.execute_script(
            "return [...document.querySelectorAll('a[href]')].map((a) => a.href)"
        )
    assert formulas["01_autograd_accumulates.html"] >= 20 and formulas["glossary.html"] == 2
    assert sum(formulas.values()) > 100, formulas
    checked = 0
    for page, hrefs in links.items():
        for href in hrefs:
            url = urlparse(href)
            if url.scheme != "file":
                assert url.scheme == "https", f"{page}: {href}"
                continue
            target = Path(unquote(url.path))
            assert target.is_relative_to(site) and target.is_file(), f"{page} links to {href}"
            if url.fragment and target.suffix == ".html":
                known = ids[target.relative_to(site).as_posix()]  # nbconvert writes a heading's
                # id percent-encoded
                assert url.fragment in known or unquote(url.fragment) in known, (
                    f"{page}: {href} has no target"
                )
            checked += 1
    assert checked > 400


def test_a_page_with_formulas_shows_them_typeset(site, chromium):
    open_page(chromium, site, "03_gradient_accumulation.html")
    formula = chromium.find_element(By.CSS_SELECTOR, ".jp-RenderedMarkdown .katex")
    assert formula.find_elements(By.CSS_SELECTOR, ".katex-html"), "KaTeX's rendered output"
    assert "∑" in formula.find_element(By.XPATH, "./ancestor::p").text
    chromium.execute_script("arguments[0].scrollIntoView({block: 'center'});", formula)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    chromium.save_screenshot(str(SCREENSHOTS / "formulas.png"))


def search_for(driver, text: str) -> list:
    box = driver.find_element(By.CSS_SELECTOR, ".course-search input")
    box.clear()
    box.click()
    box.send_keys(text)

    def results_for_all_of_it():  # not for the first letters, shown while the rest was typed
        shown = driver.find_element(By.CSS_SELECTOR, ".course-search-results")
        if shown.get_attribute("hidden") is None and shown.get_attribute("data-query") == text:
            return shown.find_elements(By.TAG_NAME, "li")
        return None

    return wait_for(results_for_all_of_it, 30, f"results for {text!r}")


def test_search_finds_a_term_across_the_course_and_follows_a_result(site, chromium):
    open_page(chromium, site, "05_pitfalls.html")
    requests_and_errors(chromium)
    results = search_for(chromium, "no_sync")
    hrefs = [r.find_element(By.TAG_NAME, "a").get_attribute("href") for r in results]
    found = {Path(urlparse(h).path).name for h in hrefs}
    assert {"glossary.html", "instructor-guide.html"} <= found, found
    assert {"07_accumulation_at_scale.html", "08_training_stacks.html"} <= found, found
    assert all("no_sync" in r.text.lower() for r in results), "each snippet shows the term"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    chromium.save_screenshot(str(SCREENSHOTS / "search.png"))
    assert_offline(chromium, "the search")
    entry = next(r for r in results if "glossary.html#" in r.find_element(By.TAG_NAME, "a")
                 .get_attribute("href"))  # fmt: skip
    entry.find_element(By.TAG_NAME, "a").click()
    wait_for(lambda: chromium.current_url.endswith("glossary.html#no_sync"), 15,
             "the glossary entry to open")  # fmt: skip
    target = chromium.find_element(By.ID, "no_sync")
    assert target.text.startswith("no_sync:")
    top = chromium.execute_script("return arguments[0].getBoundingClientRect().top", target)
    assert -2 <= top < 200, "the page scrolled to the entry"


def test_enter_follows_the_first_result_and_a_code_term_is_found(site, chromium):
    open_page(chromium, site, "index.html")
    results = search_for(chromium, "set_to_none=False")
    hrefs = [r.find_element(By.TAG_NAME, "a").get_attribute("href") for r in results]
    assert any("02_zero_grad_internals.html#" in h for h in hrefs), "code is searched too"
    first = hrefs[0]
    chromium.find_element(By.CSS_SELECTOR, ".course-search input").send_keys(Keys.ENTER)
    wait_for(lambda: chromium.current_url == first, 15, "Enter to follow the first result")
    section = chromium.find_element(By.ID, unquote(urlparse(first).fragment))
    assert section.tag_name in ("h1", "h2", "h3", "h4", "p"), "a section or a glossary entry"
    assert "set_to_none" in section.text


def test_a_term_found_nowhere_says_so(site, chromium):
    open_page(chromium, site, "glossary.html")
    [none] = search_for(chromium, "qwertyuiop")
    assert "No section has" in none.text and "qwertyuiop" in none.text


def test_the_setup_cell_is_folded_until_asked_for(site, chromium):
    open_page(chromium, site, "01_autograd_accumulates.html")
    folded = chromium.find_element(By.CSS_SELECTOR, "details.course-folded")
    code = folded.find_element(By.CSS_SELECTOR, ".jp-InputArea-editor")
    assert not code.is_displayed()
    assert folded.find_element(By.TAG_NAME, "summary").text.startswith("Course setup")
    folded.find_element(By.TAG_NAME, "summary").click()
    wait_for(code.is_displayed, 5, "the setup code to unfold")
    assert "COURSE_REPO" in code.text
    launch = [a.text for a in chromium.find_elements(By.CSS_SELECTOR, ".course-launch a")]
    assert launch == ["Open in Colab", "Launch Binder", "Download .ipynb"]


def test_escape_closes_the_results_and_enter_then_opens_nothing(site, chromium):
    open_page(chromium, site, "04_several_losses.html")
    here = chromium.current_url
    search_for(chromium, "no_sync")
    box = chromium.find_element(By.CSS_SELECTOR, ".course-search input")
    box.send_keys(Keys.ESCAPE)
    results = chromium.find_element(By.CSS_SELECTOR, ".course-search-results")
    assert not results.is_displayed()
    box.send_keys(Keys.ENTER)
    assert chromium.current_url == here, "Enter followed a result the reader had closed"
    box.send_keys(Keys.ARROW_DOWN)
    assert results.is_displayed(), "an arrow key opens the list again"


def test_formulas_in_search_results_are_typeset(site, chromium):
    open_page(chromium, site, "index.html")
    results = search_for(chromium, "dampening")
    snippets = [r.find_element(By.CSS_SELECTOR, ".course-search-snippet") for r in results]
    assert any(s.find_elements(By.CSS_SELECTOR, ".katex") for s in snippets)
    shown = " ".join(s.text for s in snippets)
    assert "\\text" not in shown and "\\(" not in shown and "$" not in shown, shown


@pytest.mark.parametrize("page", ["index.html", "glossary.html", "05_pitfalls.html"])
def test_a_phone_wide_screen_needs_no_sideways_scrolling(site, chromium, page):
    chromium.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 420, "height": 800, "deviceScaleFactor": 1, "mobile": True},
    )
    try:
        open_page(chromium, site, page)
        wide = chromium.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert wide[0] <= wide[1] + 1, f"{page} is {wide[0]} px wide on a {wide[1]} px screen"
        nav = chromium.find_element(By.CSS_SELECTOR, "nav.course").size["height"]
        assert nav < 160, f"the navigation takes {nav} px before the page starts"
        if page == "05_pitfalls.html":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            chromium.save_screenshot(str(SCREENSHOTS / "narrow-screen.png"))
    finally:
        chromium.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_a_chinese_page_searches_in_chinese_and_switches_to_its_english_page(site, chromium):
    page = "zh-CN/03_gradient_accumulation.html"
    open_page(chromium, site, page)
    requests_and_errors(chromium)
    box = chromium.find_element(By.CSS_SELECTOR, ".course-search input")
    assert box.get_attribute("placeholder") == "搜索课程"
    results = search_for(chromium, "梯度累积")
    hrefs = [r.find_element(By.TAG_NAME, "a").get_attribute("href") for r in results]
    assert all("/zh-CN/" in h for h in hrefs), "the Chinese pages' sections, and only them"
    assert any(h.split("#")[0].endswith(page) for h in hrefs)
    snippets = [r.find_element(By.CSS_SELECTOR, ".course-search-snippet") for r in results]
    whole = [s for s in snippets if "梯度累积" in s.text]
    assert whole, "a snippet shows the term"
    for snippet in whole:  # the term marked whole, not its words apart
        marks = [m.text for m in snippet.find_elements(By.TAG_NAME, "mark")]
        assert marks and set(marks) == {"梯度累积"}, marks
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    chromium.save_screenshot(str(SCREENSHOTS / "zh-search.png"))
    assert_offline(chromium, "the Chinese search")
    # A term ICU's dictionary does not know (叶子 | 张 | 量), found by its characters.
    results = search_for(chromium, "叶子张量")
    assert "叶子张量" in results[0].text and "01_autograd_accumulates.html" in results[
        0
    ].find_element(By.TAG_NAME, "a").get_attribute("href")
    first = results[0].find_element(By.TAG_NAME, "a").get_attribute("href")
    box.send_keys(Keys.ENTER)
    wait_for(lambda: chromium.current_url == first, 15, "Enter to follow the first result")
    fragment = urlparse(first).fragment  # nbconvert writes a Chinese heading's id percent-encoded
    [section] = chromium.find_elements(By.ID, fragment) or chromium.find_elements(
        By.ID, unquote(fragment)
    )
    assert "叶子张量" in section.text
    top = chromium.execute_script("return arguments[0].getBoundingClientRect().top", section)
    assert -2 <= top < 200, "the page scrolled to the section"
    [none] = search_for(chromium, "蛋白质折叠")
    assert none.text == "没有找到包含“蛋白质折叠”的小节。"
    switch = chromium.find_element(By.CSS_SELECTOR, "nav.course a.course-language")
    assert switch.text == "English"
    switch.click()
    wait_for(lambda: chromium.current_url.endswith("/01_autograd_accumulates.html"), 15,
             "the English page")  # fmt: skip
    assert "/zh-CN/" not in chromium.current_url
    english = chromium.find_element(By.CSS_SELECTOR, "nav.course a.course-language")
    assert english.text == "中文" and english.get_attribute("href").endswith(
        "/zh-CN/01_autograd_accumulates.html"
    )
    assert_offline(chromium, "the switch")
