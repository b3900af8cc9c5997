"""The course as a person meets it: JupyterLab in a real browser (Debian's Chromium, headless,
driven by Selenium and chromedriver). Every notebook is opened and run with Run > Run All
Cells; the page must show errors exactly in the cells tagged to raise, and the widget
explorers must render as sliders whose output changes when a slider moves. A Chinese notebook
runs its setup cell and an exercise with a wrong answer, whose checker answers in Chinese.

JupyterLab serves a copy of the course in a temporary folder (its autosave never touches the
repository), on 127.0.0.1, a free port and a token. Screenshots of every notebook go to
build/browser-screenshots/ (or $GM_SCREENSHOTS). Without Chromium the test is skipped, unless
$GM_CI is set, as CI sets it. It takes minutes, so the default test run leaves it out (marker
``browser``); run it with ``python -m pytest -m browser``.
"""

from __future__ import annotations

import gettext
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import sync_notebooks
from course import ROOT, cells_tagged, notebook_paths, read

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SCREENSHOTS = Path(os.environ.get("GM_SCREENSHOTS", ROOT / "build" / "browser-screenshots"))
WIDGET_NOTEBOOKS = {"00_setup_check.ipynb", "01_autograd_accumulates.ipynb",
                    "03_gradient_accumulation.ipynb"}  # fmt: skip
RUN_TIMEOUT_S = 180

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:  # pragma: no cover - reported by the skip below
    webdriver = None

if not (CHROMIUM and CHROMEDRIVER and webdriver):
    reason = "needs Debian's chromium and chromium-driver, and selenium"
    if os.environ.get("GM_CI"):
        raise RuntimeError(f"GM_CI is set, but the browser test {reason}")
    pytest.skip(reason, allow_module_level=True)

NOTEBOOKS = notebook_paths()
pytestmark = pytest.mark.browser  # a step of its own: python -m pytest -m browser


def free_port() -> int:
    from helpers.processes.run_ranks import free_port as port

    return port()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of the course; yields (base URL, token)."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    settings = root / ".settings"
    for plugin, values in {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
    }.items():
        (settings / plugin).parent.mkdir(parents=True, exist_ok=True)
        (settings / plugin).write_text(json.dumps(values))
    port, token = free_port(), "course-browser-test"
    env = dict(
        os.environ,
        GM_DEVICE="cpu",
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(root / ".workspaces"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0", "--allow-root"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("JupyterLab did not start within 60 s") from None
            time.sleep(0.5)
    yield base, token
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()


def start_chromium(user_data_dir: Path, record_requests: bool = False):
    """Headless Chromium through chromedriver; ``record_requests`` keeps its network and
    console logs (``driver.get_log("performance")``, ``driver.get_log("browser")``)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                 f"--user-data-dir={user_data_dir}"):  # fmt: skip
        options.add_argument(flag)
    if record_requests:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_chromium(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = condition()
        except Exception:  # the page is still changing under us
            result = None
        if result:
            return result
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def cells(driver):
    return driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell")


def run_all(driver) -> None:
    menu = next(e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item")
                if e.text.strip() == "Run")  # fmt: skip
    menu.click()
    item = wait_for(
        lambda: next(
            e
            for e in driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-item")
            if e.text.startswith("Run All Cells")
        ),
        10,
        "the Run All Cells menu item",
    )
    item.click()


def prompts(driver) -> list[str]:
    """The code cells' prompts: ``[ ]:`` not run, ``[*]:`` running or queued, ``[3]:`` run."""
    return [
        p.text.strip()
        for p in driver.find_elements(
            By.CSS_SELECTOR,
            ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputArea-prompt",
        )
    ]


def all_cells_ran(driver, n_code: int) -> bool:
    shown = prompts(driver)
    return len(shown) == n_code and all(re.fullmatch(r"\[\d+\]:", p) for p in shown)


def run_all_until_it_starts(driver, attempts: int = 3) -> None:
    """Run > Run All Cells, again if no cell has started within 20 s: on a loaded machine a
    click can land while the menu is still being laid out, and then nothing runs."""
    for attempt in range(1, attempts + 1):
        run_all(driver)
        try:
            wait_for(lambda: any(p != "[ ]:" for p in prompts(driver)), 20, "a cell to start")
            return
        except AssertionError:
            if attempt == attempts:
                raise AssertionError(f"Run All Cells started nothing in {attempts} tries") from None


def open_in_lab(browser, lab, path):
    """Open notebook ``path`` in JupyterLab and wait for its cells and an idle kernel; its
    notebook as read from disk."""
    base, token = lab
    nb = read(path)
    browser.get(f"{base}/lab/tree/{path.relative_to(ROOT).as_posix()}?token={token}")
    wait_for(lambda: len(cells(browser)) == len(nb.cells), 60, "the notebook's cells")
    wait_for(
        lambda: "Idle" in browser.find_element(By.CSS_SELECTOR, ".jp-Notebook-ExecutionIndicator")
        .get_attribute("data-status").capitalize(),
        60,
        "the kernel to be ready",
    )  # fmt: skip
    return nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_in_jupyterlab_in_a_real_browser(lab, browser, path):
    nb = open_in_lab(browser, lab, path)
    check_the_setup_cell_is_folded_under_its_title(browser, nb, path)
    started = time.monotonic()
    run_all_until_it_starts(browser)
    # A folded cell shows no prompt: count the others, and see the setup cell ran first.
    n_code = sum(
        cell.cell_type == "code" and not cell.metadata.get("jupyter", {}).get("source_hidden")
        for cell in nb.cells
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        wait_for(lambda: all_cells_ran(browser, n_code), RUN_TIMEOUT_S, f"{path.name} to run")
    except AssertionError as error:
        browser.save_screenshot(str(SCREENSHOTS / f"{path.stem}-timed-out.png"))
        raise AssertionError(f"{error}; the prompts: {prompts(browser)}") from None
    seconds = time.monotonic() - started
    browser.save_screenshot(str(SCREENSHOTS / f"{path.stem}.png"))
    assert prompts(browser)[0] == "[2]:", "the folded setup cell did not run first, as [1]"
    erroring = {
        index
        for index, cell in enumerate(cells(browser))
        if cell.find_elements(
            By.CSS_SELECTOR,
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]',
        )
    }
    assert erroring == set(cells_tagged(nb, "raises-exception")), (
        f"error or stderr output in cells {sorted(erroring)}, expected only in the cells tagged "
        f"raises-exception {cells_tagged(nb, 'raises-exception')}"
    )
    if path.name in WIDGET_NOTEBOOKS:
        check_a_slider_moves_its_output(browser, path)
    print(f"{path.name}: ran in {seconds:.1f} s in the browser")
    shut_down_kernels(*lab)


def check_the_setup_cell_is_folded_under_its_title(driver, nb, path) -> None:
    """JupyterLab shows the setup cell as one line, its title, with the code folded away."""
    [index] = cells_tagged(nb, sync_notebooks.SETUP_TAG)
    setup = cells(driver)[index]
    placeholder = setup.find_elements(By.CSS_SELECTOR, ".jp-InputPlaceholder")
    assert placeholder, "the setup cell's code is not folded"
    assert "Course setup" in placeholder[0].text, placeholder[0].text
    assert not setup.find_elements(By.CSS_SELECTOR, ".jp-InputArea-editor .cm-content"), (
        "the setup cell's code is on the page"
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{path.stem}-setup-folded.png"))


def shut_down_kernels(base: str, token: str) -> None:
    """Free each notebook's kernel before the next one starts."""
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}") as response:
        sessions = json.load(response)
    for session in sessions:
        request = urllib.request.Request(
            f"{base}/api/sessions/{session['id']}?token={token}", method="DELETE"
        )
        urllib.request.urlopen(request).close()


def check_a_slider_moves_its_output(driver, path) -> None:
    handles = driver.find_elements(
        By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .widget-slider .noUi-handle"
    )
    assert handles, f"{path.name}: no slider rendered (widgets show as text?)"
    interact = handles[0].find_element(
        By.XPATH, "./ancestor::div[contains(@class, 'widget-interact')]"
    )
    output = interact.find_element(By.CSS_SELECTOR, ".widget-output")
    before = output.text
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", handles[0])
    handles[0].click()
    handles[0].send_keys(Keys.ARROW_RIGHT)
    wait_for(lambda: output.text != before and output.text.strip(), 30,
             f"{path.name}: the output to follow the slider")  # fmt: skip
    driver.save_screenshot(str(SCREENSHOTS / f"{path.stem}-slider-moved.png"))


def test_a_chinese_notebook_answers_a_wrong_answer_with_a_chinese_hint(lab, browser):
    """The Chinese edition in JupyterLab, as a learner meets it: the setup cell, folded under
    its Chinese title, runs first (it sets GM_LANG=zh_CN); then an exercise given a wrong
    answer gets its checker's verdict and hint in Chinese."""
    path = ROOT / "notebooks" / "zh-CN" / "01_autograd_accumulates.ipynb"
    nb = open_in_lab(browser, lab, path)
    [setup] = cells_tagged(nb, sync_notebooks.SETUP_TAG)
    placeholder = cells(browser)[setup].find_element(By.CSS_SELECTOR, ".jp-InputPlaceholder")
    assert "课程设置" in placeholder.text, placeholder.text
    # The setup cell: a click on its prompt selects it (and unfolds it), Shift+Enter runs it.
    # (From the cell above, the arrow keys step over a folded cell.)
    target = cells(browser)[setup]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", target)
    target.find_element(By.CSS_SELECTOR, ".jp-InputPrompt").click()
    wait_for(lambda: "jp-mod-active" in cells(browser)[setup].get_attribute("class"), 10,
             "the setup cell to be selected")  # fmt: skip
    ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
    # Exercise 01.1 answered 5: only the last backward's gradient, a wrong answer with a hint.
    exercise = next(i for i, cell in enumerate(nb.cells)
                    if "check_grad_prediction(answer)" in cell.source)  # fmt: skip
    cell = cells(browser)[exercise]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", cell)
    cell.find_element(By.CSS_SELECTOR, ".jp-InputArea-editor .cm-content").click()
    ActionChains(browser).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).perform()
    ActionChains(browser).send_keys(
        "from helpers.autograd_accumulates.checkers_01 import check_grad_prediction",
        Keys.ENTER,
        "check_grad_prediction(5)",
    ).perform()
    ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
    zh = gettext.translation("helpers", ROOT / "helpers" / "locale", languages=["zh_CN"])
    not_yet = zh.gettext("❌ Not yet")
    assert not_yet != "❌ Not yet", "the Chinese catalog is compiled"

    def verdict() -> str:
        shown = cells(browser)[exercise].find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")
        return " ".join(o.text for o in shown if o.text.strip())

    try:
        shown = wait_for(verdict, 90, "the checker's verdict")
    finally:
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", cell)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SCREENSHOTS / "zh-CN-notebook-hint.png"))
    assert shown.startswith(not_yet), shown
    hint = shown.removeprefix(not_yet)
    assert len(re.findall(r"[\u4e00-\u9fff]", hint)) > 10, f"the hint is not Chinese: {shown}"
    assert "backward" in hint and "That is" not in hint, shown
    shut_down_kernels(*lab)
