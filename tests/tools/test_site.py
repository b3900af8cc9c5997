"""The course site (tools/build_site.py), read as files: every page and link is there, nothing is
loaded from the network, the notebooks' launch links and folded setup cells, the bundled KaTeX
and lunr.js, the search index (English and Chinese), and the Chinese edition's pages with their
language switch. tests/tools/test_site_browser.py opens the same site in Chromium.

The build fetches KaTeX and lunr.js with npm once (into build/site-assets/); where npm or the
registry cannot be reached these tests are skipped, unless $GM_CI is set, as CI sets it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import build_site
import build_workshop
import pytest
import site_assets
import site_search
import sync_notebooks
import translate_notebooks
from bs4 import BeautifulSoup
from course import cells_tagged, chinese_notebook_paths, launch_links, notebook_paths, read, title

NOTEBOOKS = notebook_paths()
CHINESE_NOTEBOOKS = chinese_notebook_paths()
MARKDOWN_PAGES = (
    "index.html",
    "instructor-guide.html",
    "setup.html",
    "glossary.html",
    "loop-auditor.html",  # loop_auditor/README.md, which the README links to
)
REMOTE = re.compile(r"^(https?:)?//", re.IGNORECASE)


def build_or_skip(out: Path) -> list[Path]:
    try:
        return build_site.build(out)
    except RuntimeError as error:  # npm missing, or the registry out of reach
        if os.environ.get("GM_CI") or "integrity" in str(error):
            raise
        pytest.skip(f"the site's bundled scripts could not be fetched: {error}")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build_or_skip(out)
    return out


@functools.cache
def soup(site: Path, page: str) -> BeautifulSoup:
    """``page`` of the site, parsed once for all the tests (which only read the tree)."""
    return BeautifulSoup((site / page).read_text(encoding="utf-8"), "html.parser")


def pages(site: Path) -> list[str]:
    """Every page, as its path from the site's root: ``index.html``, ``zh-CN/03_x.html``."""
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))


def resolve(page: str, href: str) -> str:
    """The page (from the site's root) that ``href`` on ``page`` points to, without anchor."""
    target = href.partition("#")[0]
    return os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page


def test_the_site_has_every_page(site):
    chinese = {f"zh-CN/{p.stem}.html" for p in CHINESE_NOTEBOOKS} | {"zh-CN/index.html"}
    chinese |= set(build_site.chinese_documents().values())  # zh-CN/index.html, zh-CN/setup.html
    assert len(CHINESE_NOTEBOOKS) == len(NOTEBOOKS)
    english = {f"{p.stem}.html" for p in NOTEBOOKS} | set(MARKDOWN_PAGES)
    assert english | chinese == set(pages(site))
    page = (site / "06_loop_auditor.html").read_text(encoding="utf-8")
    assert 'href="05_pitfalls.html"' in page and 'href="07_accumulation_at_scale.html"' in page
    assert "No findings (" in page, "outputs included"
    assert "data:image/png;base64" in (site / "01_autograd_accumulates.html").read_text()


def test_every_local_link_reaches_a_file_and_its_anchor(site):
    ids = {page: {tag["id"] for tag in soup(site, page).find_all(id=True)} for page in pages(site)}
    checked = 0
    for page in pages(site):
        for link in soup(site, page).find_all("a", href=True):
            href = link["href"]
            if re.match(r"[a-z]+:", href):
                continue
            anchor = href.partition("#")[2]
            target = resolve(page, href)
            assert (site / target).is_file(), f"{page} links to {href}, which is not in the site"
            if link.has_attr("download"):
                assert target.endswith(".ipynb")
                continue
            assert not target.endswith((".ipynb", ".md")), f"{page}: {href} is not a page"
            if anchor:
                assert anchor in ids[target] or unquote(anchor) in ids[target], (
                    f"{page} links to {href}: {target} has no id {anchor!r}"
                )
            checked += 1
    assert checked > 100


def test_no_page_loads_anything_from_the_network(site):
    """No script, style sheet, font, image or frame from a URL: offline, the site is whole."""
    for page in pages(site):
        tree = soup(site, page)
        for tag in tree.find_all(["script", "img", "iframe", "source", "audio", "video", "embed"]):
            assert not REMOTE.match(tag.get("src", "")), f"{page}: {tag}"
        for tag in tree.find_all("link"):
            assert not REMOTE.match(tag.get("href", "")), f"{page}: {tag}"
        for style in [*tree.find_all("style"), *tree.find_all(style=True)]:
            css = style.string or style.get("style", "") or ""
            assert not re.search(r"url\(\s*['\"]?(https?:)?//|@import", css), f"{page}: {css[:200]}"
        for script in tree.find_all("script"):
            assert not re.search(r"""import\(\s*["'](https?:)?//""", script.string or ""), page
        assert not tree.find(class_="jp-Mermaid"), f"{page}: a mermaid diagram needs mermaid.js"
    for css in (site / "_static").rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", css.read_text()), css.name


def test_the_bundled_scripts_are_the_pinned_packages(site):
    static = site / "_static"
    for name in ("katex.min.js", "katex.min.css", "auto-render.min.js", "LICENSE"):
        assert (static / "katex" / name).is_file()
    assert len(list((static / "katex" / "fonts").glob("*.woff2"))) == 20
    css = (static / "katex" / "katex.min.css").read_text()
    for font in re.findall(r"url\((fonts/[^)]+)\)", css):
        assert (static / "katex" / font).is_file(), f"katex.min.css needs {font}"
    assert (static / "lunr" / "lunr.min.js").is_file() and (static / "lunr" / "LICENSE").is_file()
    header = (static / "lunr" / "lunr.min.js").read_text().splitlines()[1]
    assert header.startswith(" * lunr - ") and header.endswith(f" - {site_assets.LUNR.version}")
    assert (
        f'version:"{site_assets.KATEX.version}"' in (static / "katex" / "katex.min.js").read_text()
    )
    for package in site_assets.PACKAGES:
        tarball = site_assets.CACHE / package.tarball
        assert site_assets.integrity_of(tarball) == package.integrity


def test_a_tarball_that_is_not_the_pinned_one_is_refused(tmp_path):
    (tmp_path / site_assets.LUNR.tarball).write_bytes(b"not lunr")
    with pytest.raises(RuntimeError, match="not the pinned sha512-"):
        site_assets.fetch(site_assets.LUNR, cache=tmp_path)


def test_without_npm_the_build_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"npm is not installed: install Node\.js and npm"):
        site_assets.fetch(site_assets.KATEX, cache=tmp_path)


@pytest.mark.parametrize(
    "path",
    NOTEBOOKS + CHINESE_NOTEBOOKS,
    ids=[f"{p.parent.name}/{p.name}" for p in NOTEBOOKS + CHINESE_NOTEBOOKS],
)
def test_each_notebook_page_launches_the_notebook_and_folds_its_setup_cell(site, path):
    chinese = path in CHINESE_NOTEBOOKS
    page = f"zh-CN/{path.stem}.html" if chinese else f"{path.stem}.html"
    tree = soup(site, page)
    [bar] = tree.select(".course-launch")
    links = {a.get_text(): a["href"] for a in bar.find_all("a")}
    folder = translate_notebooks.FOLDER if chinese else "notebooks"
    launch = launch_links(path.name, folder=folder)
    if chinese:  # the names the Chinese notebook's own link cell gives them
        launch = {translate_notebooks.LINK_NAMES[name]: url for name, url in launch.items()}
    download = "下载 .ipynb" if chinese else "Download .ipynb"
    assert links == {**launch, download: path.name}
    # not the notebook's 在线运行: a download does not run online
    assert bar.strong.get_text() == ("运行方式：" if chinese else "Run it:")
    badges = read(path).cells[cells_tagged(read(path), sync_notebooks.BADGES_TAG)[0]].source
    for href in launch.values():
        assert f"({href})" in badges, "the page and the notebook's links come from one setting"
    assert (site / page).with_suffix(".ipynb").read_bytes() == path.read_bytes()
    assert not tree.select("img[src^='http']"), "a badge image shows as broken alt text offline"
    [folded] = tree.select("details.course-folded")
    setup_title = translate_notebooks.SETUP_TITLE if chinese else sync_notebooks.SETUP_TITLE
    assert folded.summary.get_text() == setup_title
    assert "COURSE_REPO" in folded.get_text(), "the fold holds the setup cell's code"
    assert "open" not in folded.attrs, "folded until asked for"
    assert tree.html["lang"] == ("zh-CN" if chinese else "en")
    assert tree.title.get_text() == title(read(path))


def test_chinese_pages_have_chinese_navigation(site):
    tree = soup(site, "zh-CN/03_gradient_accumulation.html")
    nav = {a.get_text(): a["href"] for a in tree.select("nav.course > a")}
    assert nav["课程概览"] == "index.html"
    assert nav["← 02 · 剖析 zero_grad"] == "02_zero_grad_internals.html"
    assert nav["04 · 多个损失，一次反向传播 →"] == "04_several_losses.html"
    chinese = set(build_site.chinese_documents().values())
    for label, page in (("环境配置", "setup.html"), ("讲师指南", "instructor-guide.html"),
                        ("术语表", "glossary.html")):  # fmt: skip
        if f"zh-CN/{page}" in chinese:
            assert nav[label] == page
        else:  # an English page, and the link says so
            assert nav[f"{label}（英文）"] == f"../{page}"
    search = tree.select_one(".course-search input")
    assert search["placeholder"] == "搜索课程" == search["aria-label"]
    if not tree.select(".course-widget"):
        tree = soup(site, "zh-CN/01_autograd_accumulates.html")
    widget = tree.select_one(".course-widget").get_text()
    assert "交互控件" in widget and "“运行方式”" in widget, "it names the launch bar's label"
    home = soup(site, "zh-CN/index.html")
    assert home.html["lang"] == "zh-CN"
    linked = {resolve("zh-CN/index.html", a["href"]) for a in home.select("main a[href]")}
    assert {f"zh-CN/{p.stem}.html" for p in CHINESE_NOTEBOOKS} <= linked


def test_every_page_switches_to_its_counterpart_or_says_it_has_none(site):
    all_pages = set(pages(site))
    for page in all_pages:
        [switch] = soup(site, page).select("nav.course a.course-language")
        target = resolve(page, switch["href"])
        other = page.removeprefix("zh-CN/") if page.startswith("zh-CN/") else f"zh-CN/{page}"
        if other in all_pages:
            assert target == other, page
            assert switch["data-counterpart"] == "true"
            assert switch.get_text() == ("English" if page.startswith("zh-CN/") else "中文")
        else:  # the other language's home page, and the link says that is where it goes
            assert target == ("index.html" if page.startswith("zh-CN/") else "zh-CN/index.html")
            assert switch["data-counterpart"] == "false"
            assert switch.get_text() in ("English home", "中文版首页"), page
            assert "本页暂无中文版" in switch["title"] or "no English version" in switch["title"]
        assert switch["hreflang"] == switch["lang"] == soup(site, target).html["lang"], page
    for path in NOTEBOOKS:  # every notebook has its Chinese edition: no page goes home instead
        [switch] = soup(site, f"{path.stem}.html").select("a.course-language")
        assert switch["href"] == f"zh-CN/{path.stem}.html"


def test_chinese_documents_are_found_where_the_conventions_put_them(tmp_path, monkeypatch):
    assert build_site.chinese_documents(tmp_path) == {}
    (tmp_path / "workshop" / "zh-CN").mkdir(parents=True)
    (tmp_path / "README.zh-CN.md").write_text("# 课程\n", encoding="utf-8")
    (tmp_path / "workshop" / "zh-CN" / "setup.md").write_text("# 环境\n", encoding="utf-8")
    # the Chinese instructor guide, which tools/build_workshop.py writes
    guide = tmp_path / "workshop" / "zh-CN" / "instructor-guide.md"
    guide.write_text("# 讲师指南\n", encoding="utf-8")
    assert build_site.chinese_documents(tmp_path) == {
        tmp_path / "README.zh-CN.md": "zh-CN/index.html",
        guide: "zh-CN/instructor-guide.html",
        tmp_path / "workshop" / "zh-CN" / "setup.md": "zh-CN/setup.html",
    }
    assert guide.relative_to(tmp_path).as_posix() == build_workshop.CHINESE_GUIDE
    # The Chinese notebooks' list of counterparts, where it names one, wins.
    monkeypatch.setitem(translate_notebooks.COUNTERPARTS, "workshop/glossary.md", "docs/术语表.md")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "术语表.md").write_text("# 术语表\n", encoding="utf-8")
    assert build_site.chinese_documents(tmp_path)[tmp_path / "docs" / "术语表.md"] == (
        "zh-CN/glossary.html"
    )
    assert build_site.markdown_title("前言\n# 梯度力学 #\n", "x") == "梯度力学"


def test_a_chinese_document_gets_the_switch_and_the_chinese_navigation():
    """With README.zh-CN.md and workshop/zh-CN/setup.md there, the English pages switch to
    them and the Chinese pages' navigation stays in Chinese (no second build needed)."""
    pages = {"index.html", "setup.html", "glossary.html", "03_x.html", "zh-CN/03_x.html",
             "zh-CN/index.html", "zh-CN/setup.html", "instructor-guide.html",
             "zh-CN/instructor-guide.html"}  # fmt: skip
    assert build_site.counterpart("setup.html", pages) == ("zh-CN/setup.html", True)
    assert build_site.counterpart("glossary.html", pages) == ("zh-CN/index.html", False)
    assert build_site.counterpart("zh-CN/setup.html", pages) == ("setup.html", True)
    for page in ("instructor-guide.html", "zh-CN/instructor-guide.html"):
        other = page.removeprefix("zh-CN/") if "/" in page else f"zh-CN/{page}"
        assert build_site.counterpart(page, pages) == (other, True)
    nav = BeautifulSoup(build_site._nav("zh-CN/setup.html", pages), "html.parser")
    links = {a.get_text(): a["href"] for a in nav.find_all("a")}
    assert links["环境配置"] == "setup.html" and links["术语表（英文）"] == "../glossary.html"
    assert links["讲师指南"] == "instructor-guide.html"
    assert links["English"] == "../setup.html"


def test_the_chinese_guide_page_links_to_the_chinese_pages_and_switches_to_the_english_guide():
    """workshop/zh-CN/instructor-guide.md (tools/build_workshop.py writes it once every Chinese
    note is there) as a page: its links, two folders down, reach the Chinese notebooks' pages."""
    chinese = build_site.ROOT / build_workshop.CHINESE_GUIDE
    by_source = {
        chinese: "zh-CN/instructor-guide.html",
        build_workshop.GUIDE: "instructor-guide.html",
        build_site.ROOT / "workshop" / "zh-CN" / "setup.md": "zh-CN/setup.html",
        CHINESE_NOTEBOOKS[1]: f"zh-CN/{CHINESE_NOTEBOOKS[1].stem}.html",
    }
    text = (
        "# 讲师指南\n\nEnglish: [instructor-guide.md](../instructor-guide.md)\n\n"
        f"[01](../../notebooks/zh-CN/{CHINESE_NOTEBOOKS[1].name}) 1. 计算图；[设置](setup.md)\n"
    )
    resolved = {path.resolve(): page for path, page in by_source.items()}
    pages = set(by_source.values())
    tree = build_site._markdown_page(text, chinese, by_source[chinese], "讲师指南", pages, resolved)
    links = [a["href"] for a in tree.select("main a[href]")]
    assert links == ["../instructor-guide.html", f"{CHINESE_NOTEBOOKS[1].stem}.html", "setup.html"]
    [switch] = tree.select("nav.course a.course-language")
    assert (switch["href"], switch["data-counterpart"]) == ("../instructor-guide.html", "true")
    assert tree.html["lang"] == "zh-CN" and tree.h1["id"] == "讲师指南"


def test_formulas_reach_the_page_as_tex_for_katex(site):
    glossary = (site / "glossary.html").read_text(encoding="utf-8")
    assert r"\(b_t = \beta\, b_{t-1} + (1 - \text{dampening})\, g_t\)" in glossary
    assert r"\text{weight\_decay}" in glossary, "markdown escapes must not eat TeX"
    page = (site / "01_autograd_accumulates.html").read_text(encoding="utf-8")
    assert r"$\eta\,\lambda &lt; 4$" in page
    for name in pages(site):
        head = soup(site, name).head
        scripts = [s.get("src") for s in head.find_all("script", src=True)]
        root = "../" * name.count("/")  # the Chinese pages are in zh-CN/
        assert scripts == [
            f"{root}_static/katex/katex.min.js",
            f"{root}_static/katex/auto-render.min.js",
            f"{root}_static/course.js",
        ], name
        assert all(resolve(name, src).startswith("_static/") for src in scripts), name


# ------------------------------------------------------------------------------- search
# The pages' own search (the site's course.js and lunr.js) on the site's index, under Node.js, as
# a page in the language ``lang`` runs it. Loading the index is most of a run's time, so one
# run answers every query the tests below make (QUERIES); a query not listed costs a run of its own.
NODE_SEARCH = """
const [lunrJs, indexJs, courseJs, queries] = process.argv.slice(1);
const lunr = require(lunrJs);
require(indexJs);
const course = require(courseJs);
const engine = {index: lunr.Index.load(globalThis.courseSearchIndex.index),
                sections: globalThis.courseSearchIndex.sections};
const found = {};
for (const [lang, asked] of Object.entries(JSON.parse(queries))) {
  found[lang] = {};
  for (const query of asked) {
    found[lang][query] = course.search(lunr, engine, query, lang)
      .map((s) => ({page: s.page, anchor: s.anchor, title: s.title, text: s.text}));
  }
}
console.log(JSON.stringify(found));
"""
QUERIES = {
    "en": ["no_sync", "_foreach_zero_", "retain_grad", "retain", "torch.compile", "weight decay",
           "weight_decay", "Key points", "today", "try", "gradient accumulation", "zero_grad",
           "cdot", "why", "the", "梯度累积", "acumulation", "gradeint accumulation",
           "DistribuedSampler", "qwertyuiop"],
    "zh-CN": ["梯度累积", "优化器", "叶子张量", "反向传播", "张量", "量", "梯度 累积",
              "优化器的学习率", "优化器学习率调度", "no_sync"],
}  # fmt: skip
_searched: dict[tuple[Path, str], dict[str, list[dict]]] = {}


def _run_search(site: Path, queries: dict[str, list[str]]) -> dict[str, dict[str, list[dict]]]:
    static = site / "_static"
    done = subprocess.run(
        ["node", "-e", NODE_SEARCH, str(static / "lunr" / "lunr.min.js"),
         str(site / "search-index.js"), str(static / "course.js"), json.dumps(queries)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def search(site: Path, *queries: str, lang: str = "en") -> dict[str, list[dict]]:
    """Each query's results, as a page in ``lang`` lists them."""
    if (site, lang) not in _searched:
        for language, found in _run_search(site, QUERIES).items():
            _searched[site, language] = found
    known = _searched[site, lang]
    missing = [query for query in queries if query not in known]
    if missing:
        known.update(_run_search(site, {lang: missing})[lang])
    return {query: known[query] for query in queries}


def sections_of(site: Path) -> list[dict]:
    text = (site / "search-index.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("=") + 1 :].strip().rstrip(";"))["sections"]


def test_the_index_has_a_section_for_every_heading_and_glossary_entry(site):
    by_page: dict[str, set[str]] = {}
    for section in sections_of(site):
        by_page.setdefault(section["page"], set()).add(section["anchor"])
    assert set(by_page) == set(pages(site))
    for page in pages(site):
        tree = soup(site, page)
        headings = {h["id"] for h in tree.find_all(site_search.HEADINGS, id=True)}
        assert headings <= by_page[page], f"{page}: sections missing {headings - by_page[page]}"
    glossary = soup(site, "glossary.html")
    terms = {p["id"] for p in glossary.find_all("p", id=True)}
    assert len(terms) > 50 and terms <= by_page["glossary.html"]


def test_search_finds_prose_code_the_guide_and_the_glossary(site):
    found = search(site, "no_sync", "_foreach_zero_", "retain_grad", "retain", "torch.compile")

    def pages_for(query: str) -> set[str]:
        return {result["page"] for result in found[query]}

    assert {"glossary.html", "instructor-guide.html", "07_accumulation_at_scale.html"} <= (
        pages_for("no_sync")
    )
    assert "02_zero_grad_internals.html" in pages_for("_foreach_zero_"), "code is indexed"
    assert "01_autograd_accumulates.html" in pages_for("retain_grad"), "identifiers, whole"
    assert "01_autograd_accumulates.html" in pages_for("retain"), "and by their parts"
    assert "08_training_stacks.html" in pages_for("torch.compile")


def test_every_word_is_stemmed_alike_in_the_index_and_the_query(site):
    """lunr.py and lunr.js stem some words differently (decay, key, today): one library
    builds and searches the index, so each is found."""
    queries = ("weight decay", "weight_decay", "Key points", "today", "try")
    found = search(site, *queries)
    assert all(found[query] for query in queries), {q: len(found[q]) for q in queries}
    titles = [result["title"] for result in found["Key points"]]
    assert titles.count("Key points") == len(NOTEBOOKS), titles


def test_the_whole_last_word_ranks_above_words_it_begins(site):
    found = search(site, "gradient accumulation", "zero_grad")
    top = [(r["page"], r["title"]) for r in found["gradient accumulation"][:3]]
    assert ("glossary.html", "gradient accumulation") in top, top
    assert any(page.startswith("03_") for page, _ in top), top
    assert found["zero_grad"][0]["page"] in ("glossary.html", "02_zero_grad_internals.html")


def test_tex_commands_and_stop_words_find_nothing(site):
    found = search(site, "cdot", "why", "the")
    assert found == {"cdot": [], "why": [], "the": []}


def test_the_index_leaves_out_solutions_the_setup_cell_and_the_generated_cells(site):
    def flat(text: str) -> str:
        return " ".join(text.split())

    sections = [s for s in sections_of(site) if s["page"][:2].isdigit()]
    text = flat(" ".join(s["text"] for s in sections))
    assert "Solution (click to reveal)" not in text
    assert "COURSE_REPO" not in text, "the setup cell is not indexed"
    assert "Run it online" not in text and "Next:" not in text
    for path in NOTEBOOKS:
        nb = read(path)
        for index in cells_tagged(nb, "solution"):
            code = flat(nb.cells[index].source.split("```python", 1)[1].split("```", 1)[0])
            assert code not in text, f"{path.name}: a folded solution is in the search index"


def test_index_words_split_as_queries_do(site):
    done = subprocess.run(
        ["node", "-e", "const c = require(process.argv[1]);"
         "console.log(JSON.stringify(process.argv.slice(2).map(c.indexWords)))",
         str(site / "_static" / "course.js"), "set_to_none=True, (zero_grad)",
         r"__init__ β=0.9 $\frac{1}{4} \cdot x$"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == [
        "set_to_none true zero_grad set to none zero grad",
        "__init__ β 0 9 1 4 x",
    ]


def test_chinese_is_indexed_as_pairs_of_characters_and_a_query_split_into_words(site):
    done = subprocess.run(
        ["node", "-e", "const c = require(process.argv[1]);"
         "console.log(JSON.stringify([c.indexWords(process.argv[2]), c.queryWords(process.argv[2]),"
         " c.chineseWords(process.argv[3]), c.markedWords('梯度累积', '梯度累积，累积的梯度'),"
         " c.markedWords('梯度累积', '累积的梯度')]))",
         str(site / "_static" / "course.js"), "清空梯度zero_grad，再调用 step() 的",
         "清空梯度的时机"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    index, query, words, marked_whole, marked_words = json.loads(done.stdout)
    assert index == "清空 空梯 梯度 zero_grad 再调 调用 step 的 zero grad"
    assert query == ["清空梯度", "zero_grad", "再调用", "step", "的"]
    assert "".join(words) == "清空梯度的时机" and "梯度" in words, "ICU's words (Intl.Segmenter)"
    assert marked_whole == ["梯度累积"], "a snippet marks the term as typed where it has it"
    assert marked_words == ["梯度", "累积"], "else the term's words"


def test_chinese_terms_find_the_chinese_pages_sections(site):
    terms = ("梯度累积", "优化器", "叶子张量", "反向传播", "张量")
    found = search(site, *terms, lang="zh-CN")
    for term in terms:
        assert found[term], term
        for result in found[term][:5]:
            assert result["page"].startswith("zh-CN/"), (term, result["page"])
            assert term in result["title"] + result["text"], (term, result["title"])
    top = [(r["page"], r["title"]) for r in found["梯度累积"][:3]]
    assert ("zh-CN/03_gradient_accumulation.html", "03 · 有意为之的梯度累积") in top, top
    assert found["叶子张量"][0]["title"] == "1. 计算图：叶子张量与非叶子张量"


def test_a_term_the_segmenter_does_not_know_is_found_by_its_characters(site):
    """ICU's dictionary cuts 叶子张量 into 叶子, 张, 量 and 优化器 into 优, 化, 器: the index's
    pairs of characters find each as typed, and one character finds the words that have it."""
    found = search(site, "叶子张量", "优化器", "量", "梯度 累积", lang="zh-CN")
    assert {"zh-CN/01_autograd_accumulates.html", "zh-CN/05_pitfalls.html"} <= {
        r["page"] for r in found["叶子张量"]
    }
    assert all("优化器" in r["title"] + r["text"] for r in found["优化器"])
    assert found["量"] and all("量" in r["title"] + r["text"] for r in found["量"])
    assert found["梯度 累积"], "two words, each found"


def test_a_chinese_query_not_in_any_text_as_typed_is_found_by_its_words(site):
    found = search(site, "优化器的学习率", "优化器学习率调度", lang="zh-CN")
    for query in found:
        assert found[query], query
        for result in found[query]:
            text = result["title"] + result["text"]
            assert query not in text and all(c in text for c in query.replace("的", "")), query


def test_a_page_lists_the_sections_in_its_own_language_first(site):
    english = search(site, "no_sync", "梯度累积", lang="en")
    chinese = search(site, "no_sync", "梯度累积", lang="zh-CN")
    assert not any(r["page"].startswith("zh-CN/") for r in english["no_sync"])
    assert chinese["no_sync"][0]["page"].startswith("zh-CN/")  # the Chinese glossary or 08
    assert any(r["page"].startswith("zh-CN/08_") for r in chinese["no_sync"])
    assert english["梯度累积"][0]["page"] == "glossary.html", "the glossary's Chinese terms"
    assert any(r["page"].startswith("zh-CN/") for r in english["梯度累积"])
    assert all(r["page"].startswith("zh-CN/") for r in chinese["梯度累积"])


def test_a_widget_output_says_where_it_runs_instead_of_printing_its_repr(site):
    for path in NOTEBOOKS:
        widgets = sum(
            "application/vnd.jupyter.widget-view+json" in output.get("data", {})
            for cell in read(path).cells
            if cell.cell_type == "code"
            for output in cell.outputs
        )
        tree = soup(site, f"{path.stem}.html")
        assert len(tree.select(".course-widget")) == widgets, path.name
        outputs = " ".join(o.get_text() for o in tree.select(".jp-OutputArea"))
        assert "interactive(children=" not in outputs, path.name


def test_a_word_one_letter_off_is_found_when_nothing_matches_exactly(site):
    found = search(site, "acumulation", "gradeint accumulation", "DistribuedSampler", "qwertyuiop")
    assert found["acumulation"][0]["title"] == "gradient accumulation"
    assert ("glossary.html", "gradient accumulation") in [
        (r["page"], r["title"]) for r in found["gradeint accumulation"][:3]
    ]
    assert found["DistribuedSampler"][0]["title"] == "DistributedSampler"
    assert found["qwertyuiop"] == []
