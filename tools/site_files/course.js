// The course site's script: typesets the formulas with the bundled KaTeX, and runs the search
// box with the bundled lunr.js over the index tools/build_site.py wrote. Nothing here reaches
// the network: the site opens from disk.
"use strict";

function renderFormulas() {
  if (typeof window.renderMathInElement !== "function") {
    document.body.dataset.formulas = "katex-missing";
    return;
  }
  window.renderMathInElement(document.body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "\\[", right: "\\]", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
    ],
    ignoredClasses: ["jp-OutputArea", "course-search"],
    throwOnError: false,
  });
  document.body.dataset.formulas = "typeset";
}

// ------------------------------------------------------------------------------ search
const SEARCH_SCRIPTS = ["_static/lunr/lunr.min.js", "search-index.js"];
const MAX_RESULTS = 12;
let searchReady = null;

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

// The words of a query, split as tools/site_search.py split the text it indexed.
function queryWords(text) {
  return text.toLowerCase().split(/[^\p{L}\p{N}_]+/u).filter(Boolean);
}

// Each word through the index's own pipeline (stop words out, then the stemmer); every word
// is required, and the last one may be a prefix, so results follow as a word is typed.
function search(engine, text) {
  const terms = queryWords(text)
    .map((word) => window.lunr.stopWordFilter(new window.lunr.Token(word, {})))
    .filter(Boolean)
    .map((token) => window.lunr.stemmer(token).toString());
  if (!terms.length) {
    return [];
  }
  return engine.index.query((query) => {
    terms.forEach((term, i) => {
      query.term(term, {
        usePipeline: false,
        presence: window.lunr.Query.presence.REQUIRED,
        wildcard: i === terms.length - 1 ? window.lunr.Query.wildcard.TRAILING
                                         : window.lunr.Query.wildcard.NONE,
      });
    });
  }).slice(0, MAX_RESULTS).map((result) => engine.sections[Number(result.ref)]);
}

function escapeHtml(text) {
  const div = document.createElement("div");
  div.textContent = text;
  return div.innerHTML;
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

// About 160 characters of the section around the first word of the query it contains.
function snippet(text, words) {
  const lower = text.toLowerCase();
  const at = Math.min(...words.map((w) => lower.indexOf(w)).filter((i) => i >= 0), text.length);
  const start = at === text.length ? 0 : Math.max(0, at - 60);
  let piece = (start > 0 ? "… " : "") + text.slice(start, start + 160);
  if (start + 160 < text.length) {
    piece += " …";
  }
  let html = escapeHtml(piece);
  if (words.length) {
    const pattern = new RegExp(`(${words.map(escapeRegExp).join("|")})`, "gi");
    html = html.replace(pattern, "<mark>$1</mark>");
  }
  return html;
}

function showResults(list, found, text) {
  const words = queryWords(text);
  list.innerHTML = "";
  if (!found.length) {
    list.innerHTML = `<li class="course-search-none">No section has “${escapeHtml(text)}”.</li>`;
  }
  found.forEach((section, i) => {
    const item = document.createElement("li");
    const href = section.anchor ? `${section.page}#${section.anchor}` : section.page;
    const where = section.title === section.pageTitle ? "" : section.pageTitle;
    item.innerHTML =
      `<a href="${escapeHtml(href)}">${escapeHtml(section.title)}</a> ` +
      `<span class="course-search-page">${escapeHtml(where)}</span>` +
      `<p class="course-search-snippet">${snippet(section.text, words)}</p>`;
    if (i === 0) {
      item.classList.add("course-search-active");
    }
    list.appendChild(item);
  });
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
        .then((engine) => showResults(list, search(engine, text), text))
        .catch((error) => {
          list.innerHTML = `<li>The search index did not load: ${escapeHtml(error.message)}</li>`;
          list.hidden = false;
        });
    }, 120);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      moveActive(list, event.key === "ArrowDown" ? 1 : -1);
      event.preventDefault();
    } else if (event.key === "Enter") {
      const link = list.querySelector("li.course-search-active a");
      if (link) {
        window.location.href = link.getAttribute("href");
        list.hidden = true;
      }
      event.preventDefault();
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

document.addEventListener("DOMContentLoaded", () => {
  renderFormulas();
  document.querySelectorAll(".course-search").forEach(setUpSearch);
});
