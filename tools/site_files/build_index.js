// Build the course site's search index with lunr.js itself, the library the pages search it
// with, so that the words are split and stemmed the same way on both sides.
//   node build_index.js LUNR_JS COURSE_JS < sections.json > index.json
// sections.json: [{"title": ..., "text": ...}, ...]; a section's ref is its place in the list.
"use strict";

const fs = require("fs");
const lunr = require(process.argv[2]);
const { indexWords } = require(process.argv[3]);

const sections = JSON.parse(fs.readFileSync(0, "utf8"));
const index = lunr(function build() {
  // The words come split and lower-cased (indexWords); lunr's trimmer, which strips what is
  // not an ASCII letter or digit from a word's ends, would strip Chinese, "β" or "é" whole or
  // in part, where the queries do not: the stop words and the stemmer stay.
  this.pipeline.remove(lunr.trimmer);
  this.ref("id");
  this.field("title", { boost: 10 });
  this.field("body");
  sections.forEach((section, i) => {
    this.add({ id: String(i), title: indexWords(section.title), body: indexWords(section.text) });
  });
});
process.stdout.write(JSON.stringify(index));
