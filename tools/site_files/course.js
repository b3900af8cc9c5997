// The course site's script: typesets the formulas with the bundled KaTeX, and runs the search
// box with the bundled lunr.js over the index tools/build_site.py wrote. Nothing here reaches
// the network: the site opens from disk.
//
// The same file, under Node.js, gives tools/site_files/build_index.js the words to index and
// the tests the search itself (module.exports at the end), so the index and the queries split
// and stem words in exactly one way: lunr.js's own pipeline, on both sides, and for Chinese
// pairs of characters (and ICU's word segmentation, Intl.Segmenter, for a query's words).
"use strict";

const MATH_DELIMITERS = [
  { left: "$$", right: "$$", display: true },
  { left: "\\[", right: "\\]", display: true },
  { left: "$", right: "$", display: false },
  { left: "\\(", right: "\\)", display: false },
];

function renderFormulas(element) {
  if (typeof window.renderMathInElement !== "function") {
    return false;
  }
  window.renderMathInElement(element, {
    delimiters: MATH_DELIMITERS,
    ignoredClasses: ["jp-OutputArea"],
    throwOnError: false,
  });
  return true;
}

// ------------------------------------------------------------------------------ words
// A TeX command (\cdot, \text) is markup, not a word of the course.
const TEX_COMMAND = /\\[A-Za-z]+/g;
const NOT_A_WORD = /[^\p{L}\p{N}_]+/u;
// Chinese is written without spaces: a run of Chinese characters is one "word" here, which the
// index keeps as its overlapping pairs of characters (below) and a query splits into words.
const HAN = /\p{Script=Han}+/gu;
const ALL_HAN = /^\p{Script=Han}+$/u;

// The words of a text or a query: letters, digits and underscores, lower case; so
// "set_to_none=True" is "set_to_none" and "true", and "torch.compile" is "torch", "compile";
// a run of Chinese characters is a word of its own ("清空梯度zero_grad" is two).
function queryWords(text) {
  return text.toLowerCase().replace(HAN, " $& ").split(NOT_A_WORD).filter(Boolean);
}

function isChinese(word) {
  return ALL_HAN.test(word);
}

// A run of Chinese characters as the index holds it: each pair of neighbouring characters
// ("梯度累积": "梯度", "度累", "累积"), as Lucene's CJK analyzer and lunr-languages' Chinese
// support index it; a single character stays itself. A term typed is then found in any text
// that has it, whatever words a segmenter would cut the text into.
function characterPairs(run) {
  const chars = [...run];
  return chars.length < 2 ? chars : chars.slice(1).map((char, i) => chars[i] + char);
}

// The words of a run of Chinese characters, by ICU's word segmentation (Intl.Segmenter, in
// Node.js and in every current browser): "清空梯度的时机" is "清", "空", "梯度", "的", "时机".
// Its dictionary knows everyday words, not every term of the course ("张量" comes out as "张",
// "量"), so a query looks for the term as typed first, and by these words only if that finds
// nothing. Without Intl.Segmenter, the run is one word.
let chineseSegmenter = null;
function chineseWords(run) {
  if (typeof Intl === "undefined" || typeof Intl.Segmenter !== "function") {
    return [run];
  }
  chineseSegmenter = chineseSegmenter || new Intl.Segmenter("zh", { granularity: "word" });
  return [...chineseSegmenter.segment(run)].filter((s) => s.isWordLike).map((s) => s.segment);
}

// What is indexed: the words, and an identifier's parts too ("zero_grad" is also found by
// "zero grad"), with TeX commands left out; Chinese as pairs of characters.
function indexWords(text) {
  const words = queryWords(text.replace(TEX_COMMAND, " "));
  const parts = words
    .filter((word) => word.replace(/^_+|_+$/g, "").includes("_"))
    .flatMap((word) => word.split("_").filter(Boolean));
  return words.flatMap((word) => (isChinese(word) ? characterPairs(word) : [word]))
    .concat(parts).join(" ");
}

// ------------------------------------------------------------------------------ search
const MAX_RESULTS = 12;
const FORMULA = /\$\$[^$]*\$\$|\$[^$]*\$|\\\(.*?\\\)|\\\[.*?\\\]/g;

// Each term through lunr's pipeline, as the index's terms went (stop words out, then its
// stemmer; both leave Chinese as it is).
function pipelineTerm(lunr, word) {
  const token = lunr.stopWordFilter(new lunr.Token(word, {}));
  return token ? lunr.stemmer(token).toString() : "";
}

// The terms a query requires. An English word is one term. Chinese is looked for by its pairs
// of characters: the whole run as typed (byWords false), or each of its words apart (byWords
// true), where a word of one character is any pair that has it.
function queryTerms(lunr, text, byWords) {
  const terms = [];
  for (const word of queryWords(text)) {
    if (!isChinese(word)) {
      terms.push({ term: pipelineTerm(lunr, word), chinese: false, single: false });
      continue;
    }
    for (const piece of byWords ? chineseWords(word) : [word]) {
      const single = [...piece].length === 1;
      characterPairs(piece).forEach((pair) => {
        terms.push({ term: pipelineTerm(lunr, pair), chinese: true, single });
      });
    }
  }
  return terms.filter((t) => t.term);
}

// Every word is required; the last may also be the start of a word, so results follow the
// typing. A whole-word match of the last word, and the words in a section's title, rank
// higher. Chinese is looked for as typed, then by its words (chineseWords) if that finds
// nothing. When nothing matches, a word may be one letter off ("acumulation"), as a typo often
// is. ``lang``, the page's language: sections in it come first, in lunr's order, then the rest.
function search(lunr, engine, text, lang) {
  const asTyped = queryTerms(lunr, text, false);
  if (!asTyped.length) {
    return [];
  }
  const W = lunr.Query.wildcard;
  const exact = (terms) => (query) => {
    const last = terms.length - 1;
    terms.forEach(({ term, chinese, single }, i) => {
      let wildcard = i === last && !chinese ? W.TRAILING : W.NONE;
      if (single) {
        wildcard = W.LEADING | W.TRAILING; // a lone character: in any pair
      }
      query.term(term, { usePipeline: false, presence: lunr.Query.presence.REQUIRED, wildcard });
    });
    if (!terms[last].single) {
      query.term(terms[last].term, { usePipeline: false, boost: 10 });
    }
    const whole = terms.filter((t) => !t.single).map((t) => t.term);
    query.term(whole, { usePipeline: false, fields: ["title"], boost: 30 });
  };
  const oneLetterOff = (query) => {
    asTyped.forEach(({ term, chinese }) => {
      query.term(term, {
        usePipeline: false,
        presence: lunr.Query.presence.REQUIRED,
        editDistance: !chinese && term.length >= 5 ? 1 : 0,
      });
    });
  };
  let found = engine.index.query(exact(asTyped));
  if (!found.length && asTyped.some((t) => t.chinese)) {
    const byWords = queryTerms(lunr, text, true);
    // The run's own pairs still rank the sections that have the term as typed first.
    found = engine.index.query((query) => {
      exact(byWords)(query);
      asTyped.forEach(({ term }) => query.term(term, { usePipeline: false, boost: 5 }));
    });
  }
  if (!found.length) {
    found = engine.index.query(oneLetterOff);
  }
  let sections = found.map((result) => engine.sections[Number(result.ref)]);
  if (lang) {
    sections = sections.filter((s) => s.lang === lang)
      .concat(sections.filter((s) => s.lang !== lang));
  }
  return sections.slice(0, MAX_RESULTS);
}

// The words a result's snippet marks in ``text``: the query's words, and where ``text`` lacks a
// Chinese run of the query as typed, that run's words; the longest first.
function markedWords(query, text) {
  const lower = text.toLowerCase();
  const words = queryWords(query).flatMap((word) => {
    if (!isChinese(word) || lower.includes(word)) {
      return [word];
    }
    return chineseWords(word).filter((w) => [...w].length > 1);
  });
  return [...new Set(words)].sort((a, b) => b.length - a.length);
}

// About 160 characters of the section around the first word of the query it contains, never
// cutting a formula in two (the results list typesets them).
function snippetText(text, words) {
  const lower = text.toLowerCase();
  const hits = words.map((w) => lower.indexOf(w)).filter((i) => i >= 0);
  let start = hits.length ? Math.max(0, Math.min(...hits) - 60) : 0;
  let end = Math.min(text.length, start + 160);
  for (const formula of text.matchAll(FORMULA)) {
    const from = formula.index;
    const to = from + formula[0].length;
    if (from < start && start < to) {
      start = from;
    }
    if (from < end && end < to) {
      end = to;
    }
  }
  return (start > 0 ? "… " : "") + text.slice(start, end) + (end < text.length ? " …" : "");
}

if (typeof module !== "undefined") {
  module.exports = { indexWords, queryWords, chineseWords, markedWords, search, snippetText };
}

// ------------------------------------------------------------------------------ the page
// The site's root as this page reaches it ("" or "../" from zh-CN/): this script's own src,
// less "_static/course.js". The index's pages are relative to the root.
const SITE_ROOT = typeof document !== "undefined" && document.currentScript
  ? document.currentScript.getAttribute("src").replace(/_static\/course\.js$/, "")
  : "";
const SEARCH_SCRIPTS = [`${SITE_ROOT}_static/lunr/lunr.min.js`, `${SITE_ROOT}search-index.js`];
// What the search box says, in the page's language (<html lang>).
const SAY = {
  en: {
    none: (text) => `No section has “${text}”.`,
    failed: (message) => `The search index did not load: ${message}`,
  },
  "zh-CN": {
    none: (text) => `没有找到包含“${text}”的小节。`,
    failed: (message) => `搜索索引加载失败：${message}`,
  },
};
let searchReady = null;

function pageLanguage() {
  return document.documentElement.lang || "en";
}

function say() {
  return SAY[pageLanguage()] || SAY.en;
}

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = src;
    script.onload = resolve;
    script.onerror = () => reject(new Error(`could not load ${src}`));
    document.head.appendChild(script);
  });
}

function loadSearch() {
  if (!searchReady) {
    searchReady = SEARCH_SCRIPTS.reduce((done, src) => done.then(() => loadScript(src)),
                                        Promise.resolve())
      .then(() => ({
        index: window.lunr.Index.load(window.courseSearchIndex.index),
        sections: window.courseSearchIndex.sections,
      }));
  }
  return searchReady;
}

function escapeHtml(text) {
  const div = document.createElement("div");
  div.textContent = text;
  return div.innerHTML;
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

// The snippet with the query's words marked, except inside formulas (KaTeX typesets those).
function snippetHtml(text, words) {
  const marks = words.length ? new RegExp(`(${words.map(escapeRegExp).join("|")})`, "gi") : null;
  return snippetText(text, words).split(new RegExp(`(${FORMULA.source})`)).map((part, i) => {
    if (i % 2 === 1 || !marks) {
      return escapeHtml(part);
    }
    return part.split(marks).map((piece, j) =>
      j % 2 === 1 ? `<mark>${escapeHtml(piece)}</mark>` : escapeHtml(piece)).join("");
  }).join("");
}

function showResults(list, found, text) {
  list.innerHTML = "";
  if (!found.length) {
    list.innerHTML = `<li class="course-search-none">${say().none(escapeHtml(text))}</li>`;
  }
  found.forEach((section, i) => {
    const item = document.createElement("li");
    const page = SITE_ROOT + section.page;
    const href = section.anchor ? `${page}#${section.anchor}` : page;
    const where = section.title === section.pageTitle ? "" : section.pageTitle;
    item.innerHTML =
      `<a href="${escapeHtml(href)}">${escapeHtml(section.title)}</a> ` +
      `<span class="course-search-page">${escapeHtml(where)}</span>` +
      `<p class="course-search-snippet">` +
      `${snippetHtml(section.text, markedWords(text, section.text))}</p>`;
    if (i === 0) {
      item.classList.add("course-search-active");
    }
    list.appendChild(item);
  });
  renderFormulas(list);
  list.dataset.query = text;  // what the list shows results for (the tests wait for it)
  list.hidden = false;
}

function moveActive(list, step) {
  const items = [...list.querySelectorAll("li")].filter((li) => li.querySelector("a"));
  if (!items.length) {
    return;
  }
  const now = items.findIndex((li) => li.classList.contains("course-search-active"));
  const next = (now + step + items.length) % items.length;
  items.forEach((li) => li.classList.remove("course-search-active"));
  items[next].classList.add("course-search-active");
  items[next].scrollIntoView({ block: "nearest" });
}

function setUpSearch(box) {
  const input = box.querySelector("input");
  const list = box.querySelector("ol");
  let pending = null;
  input.addEventListener("focus", () => loadSearch().catch(() => {}));
  input.addEventListener("input", () => {
    clearTimeout(pending);
    pending = setTimeout(() => {
      const text = input.value.trim();
      if (!text) {
        list.hidden = true;
        return;
      }
      loadSearch()
        .then((engine) => {
          showResults(list, search(window.lunr, engine, text, pageLanguage()), text);
        })
        .catch((error) => {
          list.innerHTML = `<li>${say().failed(escapeHtml(error.message))}</li>`;
          list.hidden = false;
        });
    }, 120);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      if (list.hidden) {  // Escape closed it: the arrows open it again, as it was
        list.hidden = !list.querySelector("li");
        return;
      }
      moveActive(list, event.key === "ArrowDown" ? 1 : -1);
    } else if (event.key === "Enter") {
      event.preventDefault();
      const link = list.hidden ? null : list.querySelector("li.course-search-active a");
      if (link) {
        list.hidden = true;
        window.location.href = link.getAttribute("href");
      }
    } else if (event.key === "Escape") {
      list.hidden = true;
    }
  });
  list.addEventListener("click", (event) => {
    if (event.target.closest("a")) {
      list.hidden = true;
    }
  });
  document.addEventListener("click", (event) => {
    if (!box.contains(event.target)) {
      list.hidden = true;
    }
  });
}

if (typeof document !== "undefined") {
  document.addEventListener("DOMContentLoaded", () => {
    document.body.dataset.formulas = renderFormulas(document.body) ? "typeset" : "katex-missing";
    document.querySelectorAll(".course-search").forEach(setUpSearch);
  });
}
