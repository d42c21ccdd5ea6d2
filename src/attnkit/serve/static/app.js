// attnkit explorer: plain JavaScript, no libraries. Every piece of data reaches
// the page through textContent or attributes (never parsed as HTML), so a token that
// spells <script> is shown as text. Each text takes its own direction (dir="auto"): a
// Hebrew or Arabic sentence reads right to left, its final full stop on the left.
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) {
    node.textContent = String(text);
    node.dir = "auto";
  }
  return node;
}

// The server's JSON answer to `path`, or an Error saying what went wrong in words a
// class can act on (the browser's own "Failed to fetch" names neither server nor cause).
// Paths are relative to the page, so it also works behind a proxy that serves it under
// a sub-path (at /attnkit/, say).
async function askServer(path, init) {
  let response;
  try {
    response = await fetch(path, init);
  } catch {  // no HTTP answer at all: the server was stopped or the connection dropped
    throw new Error(`no answer from the server at ${location.origin}: ` +
      "is attnkit serve still running?");
  }
  const text = await response.text();
  let data;
  try {
    data = JSON.parse(text);
  } catch {  // e.g. a proxy's HTML error page
    throw new Error(`the server answered ${response.status} ${response.statusText}, not JSON`);
  }
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function postJSON(path, body) {
  return askServer(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

// A form's submit handler that shows only the answer to its latest request: an earlier
// request answering late (a slower run, a longer text) must not replace it. The handler
// gets `current()`, false once a later request was sent, to check after each await.
function latestOnly(handler) {
  let latest = 0;
  return (event) => {
    event.preventDefault();
    const mine = ++latest;
    return handler(() => mine === latest);
  };
}

// ---------------------------------------------------------------- tabs

function showTab(id) {
  for (const tab of document.querySelectorAll(".tab")) {
    tab.classList.toggle("active", tab.dataset.tab === id);
    tab.setAttribute("aria-pressed", String(tab.dataset.tab === id));  // not by colour alone
  }
  for (const panel of document.querySelectorAll(".panel")) panel.hidden = panel.id !== id;
}

// ---------------------------------------------------------------- matrices

// One (R, C) matrix from (L, H, R, C): a layer and a head, or the head mean.
function pick(weights, layer, head) {
  const heads = weights[layer];
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, r) =>
    row.map((_, c) => heads.reduce((sum, h) => sum + h[r][c], 0) / heads.length));
}

// The matrix a sentence shows now, with its row (query) and column (key) labels.
// averaged: the matrix is a mean of several heads' softmaxes (not one softmax of scores).
function chosen(s, view, layer, head) {
  const heads = s.views.cross[0].length;
  if (view === "alignment") {  // "search" averages every head; a guided run names its own
    const from = s.weights_from || "search";
    const averaged = /mean of \d+ models/.test(from) || (heads > 1 && !/\bhead \d/.test(from));
    return { m: s.weights, rows: s.tgt_tokens, cols: s.src_tokens, averaged };
  }
  const m = pick(s.views[view], layer, head);
  const averaged = head === "mean" && s.views[view][0].length > 1;
  if (view === "encoder") return { m, rows: s.src_tokens, cols: s.src_tokens, averaged };
  if (view === "decoder") {  // causal: a query never sees a later key
    const masked = (i, j) => j > i;
    return { m, rows: s.views.decoder_inputs, cols: s.views.decoder_inputs, masked, averaged };
  }
  return { m, rows: s.tgt_tokens, cols: s.src_tokens, averaged };
}

const shade = (w) => `rgba(30, 90, 200, ${Math.max(0, Math.min(1, w)).toFixed(4)})`;
// the text on a shade: black up to 0.85, white above, each at least 4.5:1 on its shade
// (WCAG AA); switching at 0.55 left white on mid-blue at 2.5:1 for weights 0.56-0.83
const ink = (w) => (w > 0.85 ? "#fff" : "#000");

function paint(node, w) {
  node.style.backgroundColor = shade(w);
  node.style.color = ink(w);
  node.dataset.weight = String(w);
}

function clearPaint(nodes) {
  for (const node of nodes) {
    node.style.backgroundColor = "";
    node.style.color = "";
    delete node.dataset.weight;
    node.classList.remove("focus");
  }
}

// ---------------------------------------------------------------- one sentence

// `languages` ({source: "de", target: "en"}, null for a toy task) marks each text's
// language, so that a screen reader reads a German source with a German voice.
function sentenceCard(s, languages) {
  const card = el("div", { class: "sentence" });
  const lang = (side) => (languages ? { lang: languages[side] } : {});
  card.append(el("h3", { class: "source", ...lang("source") }, s.source));
  if (s.truncated_from !== null) {
    card.append(el("p", { class: "warning" },
      `The source had ${s.truncated_from} tokens and was cut to the model's limit.`));
  }
  if (s.weights === null) {
    card.append(el("p", { class: "empty" }, "(empty line: nothing to translate)"));
    return card;
  }
  // a model that outputs </s> first translates to "": say so rather than show nothing
  const said = (text) => text || "(empty: the model ended at once)";
  const list = el("ol", { class: "hypotheses" });
  for (const h of s.hypotheses) {
    const item = el("li");
    item.append(el("span", { class: "hyp-text", ...lang("target") }, said(h.translation)),
      el("span", { class: "score" }, ` score ${h.score.toFixed(4)}`));
    list.append(item);
  }
  card.append(el("p", { class: "translation", ...lang("target") }, said(s.translation)), list);
  card.append(viewControls(s, card));
  // each row one Tab stop (a toolbar: the arrow keys move along it), not one per token
  const row = (kind) => el("div", { class: `${kind} tokens`, role: "toolbar", "aria-label": kind });
  card.append(row("keys"), row("queries"));
  card.append(el("div", { class: "heatmap" }), el("div", { class: "step" }));
  // says that a step opened, below the heatmap, out of a screen reader's sight
  card.append(el("p", { class: "step-said sr-only", role: "status" }));
  render(s, card);
  return card;
}

function viewControls(s, card) {
  const box = el("div", { class: "controls" });
  const view = el("select", { class: "view" });
  const names = { alignment: `alignment (${s.weights_from || "search"})`, cross: "cross-attention",
    encoder: "encoder self-attention", decoder: "decoder self-attention (causal)" };
  for (const [value, label] of Object.entries(names)) {
    if (value === "alignment" || s.views[value]) view.append(el("option", { value }, label));
  }
  const layer = el("select", { class: "layer" });
  const head = el("select", { class: "head" });
  const labelled = (text, select) => { const label = el("label", {}, text); label.append(select);
    return label; };  // a label holding its select names it (screen readers, voice control)
  box.append(labelled("view ", view), labelled(" layer ", layer), labelled(" head ", head));
  const fill = () => {
    const fixed = view.value === "alignment";
    layer.disabled = head.disabled = fixed;
    if (fixed) {  // its own layer and heads, which its name gives: the pickers claim none
      layer.replaceChildren(el("option", { value: "" }, "—"));
      head.replaceChildren(el("option", { value: "" }, "—"));
      return;
    }
    const w = s.views[view.value];
    layer.replaceChildren(...w.map((_, i) => el("option", { value: i }, i)));
    layer.value = String(w.length - 1);
    head.replaceChildren(el("option", { value: "mean" }, "mean"),
      ...w[0].map((_, i) => el("option", { value: i }, i)));
  };
  fill();
  view.addEventListener("change", () => { fill(); render(s, card); });
  layer.addEventListener("change", () => render(s, card));
  head.addEventListener("change", () => render(s, card));
  return box;
}

function render(s, card) {
  const q = (sel) => card.querySelector(sel);
  const { m, rows, cols, masked, averaged } = chosen(s, q(".view").value,
    Number(q(".layer").value), q(".head").value);
  const keys = q(".keys");
  const queries = q(".queries");
  keys.replaceChildren(el("span", { class: "label" }, "keys:"));
  queries.replaceChildren(el("span", { class: "label" }, "queries:"));
  // buttons: Tab reaches every token, focus shades as hovering does, Enter opens a step
  const token = (kind, t, index) =>
    el("button", { type: "button", class: `tok ${kind}`, "data-index": index }, t);
  const keyNodes = cols.map((t, j) => token("key", t, j));
  const queryNodes = rows.map((t, i) => token("query", t, i));
  keys.append(...keyNodes);
  queries.append(...queryNodes);
  // the shading a focused token shows, in words for a screen reader (colour alone says nothing)
  queryNodes.forEach((node, i) => describe(node, "looks most at", m[i], cols));
  keyNodes.forEach((node, j) => describe(node, "weighed most by", m.map((row) => row[j]), rows));
  rove(keyNodes);
  rove(queryNodes);
  const all = [...keyNodes, ...queryNodes];
  const onShow = (node, show) => {
    node.addEventListener("mouseenter", show);
    node.addEventListener("focus", show);
  };
  queryNodes.forEach((node, i) => {
    const show = () => { clearPaint(all); node.classList.add("focus");
      keyNodes.forEach((k, j) => paint(k, m[i][j])); };
    onShow(node, show);
    const isMasked = (j) => Boolean(masked && masked(i, j));
    node.addEventListener("click", () => {
      show();
      explainStep(q(".step"), m[i], rows[i], cols, isMasked, averaged);
      q(".step-said").textContent = `step for “${rows[i]}” opened below the heatmap: ` +
        `the weights of its ${cols.length} keys`;
    });
  });
  keyNodes.forEach((node, j) => {
    onShow(node, () => { clearPaint(all); node.classList.add("focus");
      queryNodes.forEach((r, i) => paint(r, m[i][j])); });
  });
  q(".heatmap").replaceChildren(heatmap(m, rows, cols, masked, shownView(card)));
  q(".step").replaceChildren();
  q(".step-said").textContent = "";
}

// The view a card shows, in words: "alignment (search)", "cross-attention, layer 1, head 0".
function shownView(card) {
  const [view, layer, head] = [".view", ".layer", ".head"].map((c) => card.querySelector(c));
  const name = view.selectedOptions[0].textContent;
  return layer.disabled ? name : `${name}, layer ${layer.value}, head ${head.value}`;
}

// One Tab stop for a row of tokens: the last one focused (at first the first) takes Tab,
// and ArrowLeft/ArrowRight/Home/End move along the row (focus shades as ever).
function rove(nodes) {
  const moves = { ArrowLeft: -1, ArrowRight: 1, Home: -Infinity, End: Infinity };
  nodes.forEach((node, k) => {
    node.tabIndex = k === 0 ? 0 : -1;
    node.addEventListener("focus", () => {
      for (const n of nodes) n.tabIndex = n === node ? 0 : -1;
    });
    node.addEventListener("keydown", (event) => {
      const move = moves[event.key];
      if (move === undefined || event.altKey || event.ctrlKey || event.metaKey) return;
      event.preventDefault();
      nodes[Math.max(0, Math.min(nodes.length - 1, k + move))].focus();
    });
  });
}

// A token's accessible description: the other side's token it weighs most, and the weight.
function describe(node, verb, weights, labels) {
  const best = weights.reduce((b, w, k) => (w > weights[b] ? k : b), 0);
  node.setAttribute("aria-description", `${verb} ${labels[best]} (${weights[best].toFixed(2)})`);
}

// masked(i, j): whether query i may not attend to key j (drawn hatched, as the PNGs do).
// The caption names the table for a screen reader: which weights, which side is which.
function heatmap(m, rows, cols, masked = () => false, what = "attention weights") {
  const table = el("table", { class: "grid" });
  table.append(el("caption", { class: "sr-only" }, `${what}: a row per query, a column per key`));
  const head = el("tr");
  head.append(el("th"), ...cols.map((c) => el("th", { class: "col" }, c)));
  table.append(head);
  m.forEach((row, i) => {
    const tr = el("tr");
    tr.append(el("th", {}, rows[i]));
    row.forEach((w, j) => {
      if (masked(i, j)) {
        tr.append(el("td", { class: "masked", title: `${rows[i]} -> ${cols[j]}: masked` }));
        return;
      }
      const td = el("td", { title: `${rows[i]} -> ${cols[j]}: ${w.toFixed(4)}` }, w.toFixed(2));
      paint(td, w);
      tr.append(td);
    });
    table.append(tr);
  });
  return table;
}

// "Explain this step": the weights of one query over the keys. The run does not
// expose its raw scores, but one softmax fixes them up to one shared constant:
// log w_j = s_j - log(sum_k exp(s_k)). A mean of heads is no one softmax: no scores.
// isMasked(j): whether key j was masked (a weight of 0 that is not, underflowed).
function explainStep(box, weights, token, cols, isMasked, averaged = false) {
  const table = el("table", { class: "step-table" });
  const head = el("tr");
  head.append(el("th", {}, "key"), el("th", {}, "weight w_j"),
    el("th", {}, averaged ? "log w_j" : "log w_j = s_j − logΣexp(s)"));
  table.append(head);
  weights.forEach((w, j) => {
    const tr = el("tr");
    tr.append(el("td", {}, cols[j]), el("td", {}, w.toFixed(6)),
      el("td", {}, w > 0 ? Math.log(w).toFixed(4)
        : isMasked(j) ? "−inf (masked)" : "−inf (the weight underflows to 0)"));
    table.append(tr);
  });
  const sum = weights.reduce((a, b) => a + b, 0);
  // fp32 weights sum to 1 within 1e-6; bf16 decoding keeps about 3 digits a weight
  const why = Math.abs(sum - 1) > 1e-4
    ? "softmax weights sum to 1; these were computed in bf16, rounded to about 3 digits each"
    : "softmax weights sum to 1";
  const notes = [el("p", { class: "sum" }, `Σ w_j = ${sum.toFixed(6)} (${why})`)];
  if (averaged) {
    notes.push(el("p", { class: "averaged" }, "These weights are the mean of several " +
      "heads' softmaxes: they sum to 1, but they are no single softmax of scores, so " +
      "log w_j is not a score minus one constant. Pick one head to see a softmax's."));
  }
  box.replaceChildren(el("h4", {}, `Step for “${token}”`), table, ...notes);
}

// ---------------------------------------------------------------- translate tab

async function loadRuns() {
  const data = await askServer("runs");
  $("run").replaceChildren(...data.runs.map((r) =>
    el("option", { value: r.name }, `${r.name} (${r.arch}, ${r.direction})`)));
  const missing = data.missing || [];
  $("missing-runs").textContent = missing.length
    ? "Not loaded: " + missing.map((m) => `${m.folder} (${m.error})`).join("; ")
    : "";
}

async function translate(current) {
  const status = $("translate-status");
  const body = { text: $("text").value, run: $("run").value || null };
  if ($("beam").value) body.beam = Number($("beam").value);
  status.textContent = "translating…";
  status.classList.remove("error");
  try {
    const data = await postJSON("translate", body);
    if (!current()) return;
    $("results").replaceChildren(...data.sentences.map((s) => sentenceCard(s, data.languages)));
    // which run and search made these cards (the Run picker may since show another run)
    const search = data.beam === 1 ? "greedy search" : `beam ${data.beam}`;
    status.textContent = [`run ${data.run}, ${search}`, ...data.warnings].join(". ");
  } catch (err) {  // the previous translations would read as this text's: clear them
    if (!current()) return;
    $("results").replaceChildren();
    status.textContent = err.message;
    status.classList.add("error");
  }
}

// ---------------------------------------------------------------- worked example tab

// "1,0; 0,1" -> [[1, 0], [0, 1]], checked as `attnkit explain` checks its options: an
// empty row or entry, a non-number or rows of different lengths is an error naming the row.
function parseRows(text, name) {
  const rows = text.split(";").map((row, r) => {
    const entries = row.split(",").map((x) => x.trim());
    if (entries.length === 1 && entries[0] === "") throw new Error(`${name} row ${r + 1} is empty`);
    return entries.map((x, c) => parseNumber(x, `${name} row ${r + 1}, entry ${c + 1}`));
  });
  const bad = rows.findIndex((row) => row.length !== rows[0].length);
  if (bad > 0) {
    throw new Error(`${name} rows have different lengths: row 1 has ${rows[0].length} numbers, ` +
      `row ${bad + 1} has ${rows[bad].length}`);
  }
  return rows;
}

function parseNumber(x, where) {
  if (x === "") throw new Error(`${where} is empty (two commas in a row?)`);
  const value = Number(x.replaceAll("\u2212", "-"));  // a typeset minus sign (U+2212) too
  if (Number.isNaN(value)) throw new Error(`${where}: '${x}' is not a number`);
  if (!Number.isFinite(value)) throw new Error(`${where}: '${x}' is not a finite number`);
  return value;
}

// "1,0,1" -> [true, false, true]; anything but 0 and 1 is an error, never "may attend".
function parseMask(text) {
  const rows = parseRows(text, "mask");
  if (rows.some((row) => row.some((x) => x !== 0 && x !== 1))) {
    throw new Error("mask: write 1 (may attend) or 0 (masked) for each key, e.g. 1,0,1");
  }
  const mask = rows.map((row) => row.map((x) => x === 1));
  return mask.length === 1 ? mask[0] : mask;
}

function explainBody() {
  const query = parseRows($("ex-query").value, "query");
  const body = {
    query: query.length === 1 ? query[0] : query,
    keys: parseRows($("ex-keys").value, "keys"),
    scaled: $("ex-scaled").checked,
    causal: $("ex-causal").checked,
  };
  if ($("ex-values").value.trim()) body.values = parseRows($("ex-values").value, "values");
  if ($("ex-mask").value.trim()) body.mask = parseMask($("ex-mask").value);
  return body;
}

async function explainExample(current) {
  const status = $("explain-status");
  status.textContent = "explaining…";  // a live region: each press is heard, even a repeat
  status.classList.remove("error");
  try {
    const data = await postJSON("explain", explainBody());
    if (!current()) return;
    const t = data.trace;
    const masked = t.mask ? (i, j) => !t.mask[i][j] : undefined;
    $("explain-weights").replaceChildren(heatmap(t.weights, t.row_labels, t.col_labels, masked));
    $("explain-text").textContent = data.text;
    const count = (n, one, many) => `${n} ${n === 1 ? one : many}`;
    status.textContent = `${count(t.row_labels.length, "query", "queries")} over ` +
      `${count(t.col_labels.length, "key", "keys")}: the weights and the worked example are below`;
  } catch (err) {  // the previous result would read as this input's: clear it
    if (!current()) return;
    $("explain-weights").replaceChildren();
    $("explain-text").textContent = "";
    status.textContent = err.message;
    status.classList.add("error");
  }
}

// A page written by attnkit.serve.export carries its sentences and has no server.
function showEmbedded(node) {
  const data = JSON.parse(node.textContent);
  $("results").replaceChildren(...data.sentences.map((s) => sentenceCard(s, data.languages)));
}

document.addEventListener("DOMContentLoaded", () => {
  const embedded = $("attnkit-data");
  if (embedded) { showEmbedded(embedded); return; }
  for (const tab of document.querySelectorAll(".tab")) {
    tab.addEventListener("click", () => showTab(tab.dataset.tab));
  }
  $("translate-form").addEventListener("submit", latestOnly(translate));
  $("explain-form").addEventListener("submit", latestOnly(explainExample));
  loadRuns().catch((err) => {
    $("translate-status").textContent = err.message;
    $("translate-status").classList.add("error");
  });
});
