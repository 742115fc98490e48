// The offline report page (show/report.html): its data is inlined; the components are AR (components.js).
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const {el, txt, html, showTip, hideTip} = AR;
const METRICS = AR.METRICS;
const ROLE_COLORS = Object.fromEntries(D.role_info.map(r => [r.name, r.color]));  // from read/roles.py, sent as data
function fmtBytes(n) { const u = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 1024]];
  for (const [s, v] of u) if (n >= v) return (n / v).toFixed(2) + " " + s; return n + " B"; }

document.getElementById("model").textContent = D.model;
// Encoder-decoders: rows are grouped by attention kind (E encoder self, D decoder self, X cross) and each
// kind reads its own tokens (cross: decoder queries, encoder keys).
const KIND = l => (D.attention || [])[l] || "self";
const SEQ2SEQ = !!D.decoder_tokens;
const ENCODER = D.meta.kind === "encoder";
const LNAME = l => SEQ2SEQ ? ({"self": "E", "decoder-self": "D", "cross": "X"}[KIND(l)] + D.stream_layer[l]) : String(l);
const HNAME = (l, h) => (SEQ2SEQ ? LNAME(l) : "L" + l) + ".H" + h;
const QTOK = l => KIND(l) === "self" ? D.tokens : D.decoder_tokens;
const KTOK = l => KIND(l) === "decoder-self" ? D.decoder_tokens : D.tokens;
const G = {layers: D.layers, heads: D.heads, columns: D.columns, roles: D.roles, roleColors: ROLE_COLORS, lname: LNAME};
if (SEQ2SEQ) document.getElementById("grid-note").textContent = "Rows: E = encoder self-attention, " +
  "D = decoder self-attention, X = cross-attention (decoder queries, encoder keys); columns: query heads.";
document.getElementById("subtitle").textContent = `${D.layers} layers × ${D.heads} heads (${D.kv_heads} kv heads), ` +
  `${D.tokens.length} tokens, built in ${D.seconds} s. ` + (D.meta.stimulus ? "Head scores on " + D.meta.stimulus + "." : "");

// ------------------------------------------------------------------ head grid (layer filter, two heads)
const metricSel = document.getElementById("metric"), fromIn = document.getElementById("layer-from"),
  toIn = document.getElementById("layer-to");
fromIn.max = toIn.max = D.layers - 1; toIn.value = D.layers - 1;
for (const m in METRICS) { if (!D.has_effects && (m === "ablation_delta" || m === "grad_attr")) continue;
  html("option", {value: m}, metricSel, METRICS[m]); }
let selected = [];  // up to two heads, side by side
function layerRange() { const a = Math.max(0, Math.min(D.layers - 1, +fromIn.value || 0)),
  b = Math.max(a, Math.min(D.layers - 1, toIn.value === "" ? D.layers - 1 : +toIn.value)); return [a, b]; }
function drawGrid() {
  const [a, b] = layerRange();
  const range = AR.grid(document.getElementById("grid"), G, {metric: metricSel.value, selected: selected, from: a, to: b,
    onClick: (l, h, ev) => selectHead(l, h, ev.shiftKey)});
  AR.gridLegend(document.getElementById("grid-legend"), G, metricSel.value, range);
}
for (const e of [metricSel, fromIn, toIn]) e.addEventListener("change", drawGrid);

// ------------------------------------------------------------------ head detail
const W = D.weights, T = W.T;
let layerBytes = null;  // inflated on load (DecompressionStream): one Uint8Array per layer
const hideSink = document.getElementById("hide-sink"), normW = document.getElementById("norm-weighted"),
  thrIn = document.getElementById("threshold");
normW.disabled = !D.value_norms;
const gen = i => D.generated_from !== null && D.generated_from !== undefined && i >= D.generated_from;
function weightsNote() {
  const kept = W.format === "log8" ? `every key of every row kept (8-bit log scale from ${W.floor} to 1, ±2.8 %); ` +
    `weight below ${W.floor} dropped: per row mean ${W.dropped_mean.toExponential(1)}, max ${W.dropped_max.toExponential(1)}.`
    : `only the top ${W.k} keys of each row kept (the page's size budget): dropped mass per row mean ` +
      `${W.dropped_mean.toFixed(3)}, max ${W.dropped_max.toFixed(3)}.`;
  document.getElementById("weights-note").textContent = `Weights: ${kept}` +
    (D.generated_from !== null && D.generated_from !== undefined ? ` Tokens from position ${D.generated_from} on (red, italic) ` +
      "were generated (greedy, with the KV cache); their rows are the weights recorded while decoding." : "");
}
function viewOf(l, h, weighted) {  // weighted: the value-norm-weighted map (null when the layer has no norms)
  const m = AR.headMatrix(W, layerBytes[l], l, h), Tq = W.Tq || T;
  const norms = weighted && D.value_norms && D.value_norms[l] ? D.value_norms[l][h] : null;
  if (weighted && !norms) return null;
  return AR.viewMatrix(m, Tq, T, {norms: norms, hideSink: hideSink.checked, sinkKeys: D.sink_keys || [0]});
}
function selectHead(l, h, add) {
  if (add && selected.length && !(selected[selected.length - 1][0] === l && selected[selected.length - 1][1] === h))
    selected = [selected[selected.length - 1], [l, h]];
  else selected = [[l, h]];
  drawGrid(); drawDetail();
}
function drawDetail() {
  const panels = document.getElementById("panels"); panels.innerHTML = "";
  document.getElementById("detail-title").textContent = "Head detail: " +
    selected.map(([l, h]) => `${HNAME(l, h)} (${D.roles[l][h]})`).join(" beside ");
  let hidden = 0;
  for (const [l, h] of selected) {
    const p = html("div", {class: "panel"}, panels); html("h3", {}, p, `${HNAME(l, h)} — ${D.roles[l][h]}`);
    const r = html("div", {class: "row"}, p), m = viewOf(l, h, false), Tq = W.Tq || T;
    const lw = html("div", {}, r); html("div", {class: "note"}, lw, "links (query → key), width ∝ weight; every token, scroll");
    const sc = html("div", {class: "scroll"}, lw), svg = el("svg", {class: "links"}, sc);
    hidden += AR.links(svg, m, Tq, T, QTOK(l), KTOK(l), {threshold: +thrIn.value, gen: gen, focus: tokenFocus});
    const hw = html("div", {}, r); html("div", {class: "note"}, hw, "heatmap: queries as rows, keys as columns; hover for numbers");
    const hs = html("div", {class: "scroll"}, hw); AR.heat(html("canvas", {class: "heat"}, hs), m, Tq, T, QTOK(l), KTOK(l));
    if (normW.checked) { const nw = html("div", {}, r), mn = viewOf(l, h, true);
      html("div", {class: "note"}, nw, mn ? "beside it, value-norm-weighted: α_ij·‖v_j W_O‖, rows renormalized" :
        "no value norms for this layer (its output projection is not a Linear): raw weights only");
      if (mn) AR.heat(html("canvas", {class: "heat-norm"}, html("div", {class: "scroll"}, nw)), mn, Tq, T, QTOK(l), KTOK(l)); }
  }
  document.getElementById("view-note").textContent = `Links under ${thrIn.value} left out (${hidden}). ` +
    (hideSink.checked ? "Sink keys hidden: each row renormalized over the other keys. " : "") +
    (normW.checked ? "Value-norm-weighted maps beside the raw ones: α_ij·‖v_j W_O^h‖, each row renormalized (Kobayashi et al. 2020). " : "") +
    "Heatmap colour: √weight, 0 (dark) … 1 (yellow).";
}
for (const e of [hideSink, normW, thrIn]) e.addEventListener("change", () => { drawDetail(); drawTokenView(); });

// ------------------------------------------------------------------ a token's routes in every head
let tokenFocus = undefined, tokenHead = null;
const dirSel = document.getElementById("token-dir");
function tokenStrip() {
  const l0 = 0, toks = QTOK(l0);
  AR.tokenText(document.getElementById("token-text"), toks, toks.map(() => 0), {focus: tokenFocus, onToken: j => {
    tokenFocus = j; drawTokenView(); drawDetail(); }});
}
function tokenVector(l, h) {  // the weights of the routes out of / into the focused token in head (l, h)
  const m = viewOf(l, h, false), Tq = W.Tq || T, i = tokenFocus;
  if (dirSel.value === "out") { const r = i - (T - Tq); return r >= 0 && r < Tq ? Array.from(m.slice(r * T, (r + 1) * T)) : new Array(T).fill(0); }
  const col = new Array(Tq); for (let q = 0; q < Tq; q++) col[q] = i < T ? m[q * T + i] : 0; return col;
}
function drawTokenView() {
  tokenStrip(); if (tokenFocus === undefined) return;
  const out = dirSel.value === "out";
  document.getElementById("token-title").textContent = `Token ${tokenFocus} “${D.tokens[tokenFocus]}”: its routes ${out ? "out" : "in"} in every head`;
  const sinks = new Set(D.sink_keys || [0]);
  const value = (l, h) => { if (KIND(l) !== "self") return NaN; const v = tokenVector(l, h);
    if (out) { let best = 0; v.forEach((x, j) => { if (!sinks.has(j) && j !== tokenFocus && x > best) best = x; }); return best; }
    let s = 0, n = 0; v.forEach((x, q) => { if (q !== tokenFocus) { s += x; n++; } }); return n ? s / n : 0; };
  const name = out ? "largest weight to another non-sink key" : "mean weight from the other queries";
  const [a, b] = layerRange();
  const range = AR.grid(document.getElementById("token-grid"), G, {metric: "entropy", cellValue: value, valueName: name,
    from: a, to: b, selected: tokenHead ? [tokenHead] : [], onClick: (l, h) => { tokenHead = [l, h]; drawTokenView(); }});
  AR.gridLegend(document.getElementById("token-legend"), G, "entropy", range, name);
  const shade = document.getElementById("token-shade");
  if (tokenHead) { const [l, h] = tokenHead, v = tokenVector(l, h);
    AR.tokenText(shade, out ? KTOK(l) : QTOK(l), v, {focus: tokenFocus, onToken: j => { tokenFocus = j; drawTokenView(); drawDetail(); }}); }
  else shade.textContent = "click a head of the grid";
}
dirSel.addEventListener("change", drawTokenView);

// ------------------------------------------------------------------ charts
function axes(svg, w, h, pad, xlabel, ylabel, xr, yr, noXTicks) {
  el("line", {x1: pad.l, y1: h - pad.b, x2: w - pad.r, y2: h - pad.b, class: "axis"}, svg);
  el("line", {x1: pad.l, y1: pad.t, x2: pad.l, y2: h - pad.b, class: "axis"}, svg);
  txt(svg, (pad.l + w - pad.r) / 2, h - 4, xlabel, {"text-anchor": "middle"});
  txt(svg, 12, (pad.t + h - pad.b) / 2, ylabel, {"text-anchor": "middle", transform: `rotate(-90 12 ${(pad.t + h - pad.b) / 2})`});
  for (let t = 0; t <= 4; t++) { const xv = xr[0] + (xr[1] - xr[0]) * t / 4, yv = yr[0] + (yr[1] - yr[0]) * t / 4;
    if (!noXTicks) txt(svg, pad.l + (w - pad.l - pad.r) * t / 4, h - pad.b + 13, xv.toFixed(2), {"text-anchor": "middle"});
    txt(svg, pad.l - 4, h - pad.b - (h - pad.t - pad.b) * t / 4 + 4, yv.toFixed(2), {"text-anchor": "end"}); }
  return (x, y) => [pad.l + (x - xr[0]) / (xr[1] - xr[0]) * (w - pad.l - pad.r), h - pad.b - (y - yr[0]) / (yr[1] - yr[0]) * (h - pad.t - pad.b)];
}
function legendRoles(lg) { for (const role in ROLE_COLORS) { const sp = html("span", {}, lg), i = html("i", {}, sp);
  i.style.background = ROLE_COLORS[role]; sp.appendChild(document.createTextNode(role)); } }
function drawHist() {
  const svg = document.getElementById("hist"), w = 320, h = 220, pad = {l: 46, r: 10, t: 10, b: 34};
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  const vals = D.columns.entropy.flat(), hi = Math.max(...vals) * 1.001 || 1, bins = 20, counts = new Array(bins).fill(0);
  for (const v of vals) counts[Math.min(bins - 1, Math.floor(v / hi * bins))]++;
  const cmax = Math.max(...counts);
  const P = axes(svg, w, h, pad, "mean row entropy (nats)", "heads (count)", [0, hi], [0, cmax]);
  counts.forEach((c, b) => { const [x0, y0] = P(b * hi / bins, c), [x1, y1] = P((b + 1) * hi / bins, 0);
    const r = el("rect", {x: x0, y: y0, width: Math.max(1, x1 - x0 - 1), height: y1 - y0, fill: "#4c78a8"}, svg);
    r.addEventListener("mousemove", ev => showTip(ev, `${(b * hi / bins).toFixed(2)}–${((b + 1) * hi / bins).toFixed(2)} nats: ${c} heads`));
    r.addEventListener("mouseleave", hideTip); });
}
function drawScatter() {
  const svg = document.getElementById("scatter"), w = 340, h = 240, pad = {l: 52, r: 10, t: 10, b: 34};
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  const note = document.getElementById("scatter-note");
  if (!D.has_effects) { txt(svg, 20, 40, D.no_effects); note.textContent = ""; return; }
  const ys = D.columns.ablation_delta.flat();
  const ylo = Math.min(0, ...ys), yhi = Math.max(...ys) || 1;
  const P = axes(svg, w, h, pad, "attention mass on sink positions", "ablation Δ loss (nats)", [0, 1], [ylo, yhi]);
  for (let l = 0; l < D.layers; l++) for (let hh = 0; hh < D.heads; hh++) {
    const [x, y] = P(D.columns.sink_mass[l][hh], D.columns.ablation_delta[l][hh]);
    const c = el("circle", {cx: x, cy: y, r: 3.5, fill: ROLE_COLORS[D.roles[l][hh]], "fill-opacity": 0.85, class: "cell"}, svg);
    c.addEventListener("mousemove", ev => showTip(ev, `${HNAME(l, hh)} ${D.roles[l][hh]}\nsink mass ${D.columns.sink_mass[l][hh].toFixed(3)}, ` +
      `norm-weighted ${D.columns.norm_mass[l][hh].toFixed(3)}\nΔ loss ${D.columns.ablation_delta[l][hh].toFixed(4)}`));
    c.addEventListener("mouseleave", hideTip); c.addEventListener("click", () => selectHead(l, hh)); }
  legendRoles(document.getElementById("scatter-legend"));
  const a = D.meta.grad_vs_ablation;
  note.textContent = `Colour = role. Heads on the right and low take weight and change little. ` +
    `Effect batch: ${D.meta.effect_batch}. Gradient estimate vs exact: Spearman ${a.spearman.toFixed(2)}, top-10 overlap ${a.top10_overlap}/10.`;
}
function drawInduction() {  // causal LMs only: an encoder has no next-token loss (the card is left out)
  const il = D.meta.induction_loss, card = document.getElementById("induction-card");
  if (!il) { card.hidden = true; return; }
  const svg = document.getElementById("induction"), w = 240, h = 220, pad = {l: 46, r: 10, t: 10, b: 34};
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  const ymax = Math.max(il.first_repeat, il.second_repeat) * 1.1;
  const P = axes(svg, w, h, pad, "", "next-token loss (nats)", [0, 2], [0, ymax], true);
  [["first repeat", il.first_repeat, "#999"], ["second repeat", il.second_repeat, ROLE_COLORS.induction]].forEach(([name, v, col], i) => {
    const [x0, y0] = P(i + 0.2, v), [x1, y1] = P(i + 0.8, 0);
    el("rect", {x: x0, y: y0, width: x1 - x0, height: y1 - y0, fill: col}, svg);
    txt(svg, (x0 + x1) / 2, h - pad.b + 24, name, {"text-anchor": "middle"});
    txt(svg, (x0 + x1) / 2, y0 - 3, v.toFixed(2), {"text-anchor": "middle"}); });
  document.getElementById("second-copy-swatch").style.background = ROLE_COLORS.induction;
  document.getElementById("induction-note").textContent = `Random tokens repeated twice (S = ${il.S}): a model with induction heads predicts the second copy.`;
}
function drawKV() {  // an encoder keeps no KV cache: the card is left out
  const k = D.kv, t = document.getElementById("kv");
  if (ENCODER) { document.getElementById("kv-card").hidden = true; return; }
  const rows = k.unavailable ? [["not shown", k.unavailable]] : [["layers × kv heads × head dim", `${k.layers} × ${k.kv_heads} × ${k.head_dim}`],
    ["bytes per token (fp16)", `${k.bytes_per_token_fp16.toLocaleString()} B`],
    ["bytes per token (fp32)", `${k.bytes_per_token_fp32.toLocaleString()} B`],
    [`at the model's context (${k.context.toLocaleString()} tokens, fp16)`, fmtBytes(k.at_context_fp16)],
    ["formula", "2 · layers · kv heads · head dim · bytes"]];
  for (const [a, b] of rows) { const tr = html("tr", {}, t); html("td", {}, tr, a); html("td", {class: "num"}, tr, b); }
}
// ------------------------------------------------------------------ corpus (attnroute report --corpus)
function drawCorpus() {
  const C = D.corpus; if (!C) return;
  document.getElementById("corpus-row").hidden = false;
  const sel = document.getElementById("corpus-metric");
  if (!sel.options.length) { for (const m of C.statistics) html("option", {value: m}, sel, METRICS[m] || m);
    sel.addEventListener("change", drawCorpus); }
  document.getElementById("corpus-note").textContent = `${C.n_documents} documents, ${C.n_tokens.toLocaleString()} tokens (${C.source}).`;
  const m = sel.value, mean = C.mean[m].flat(), ci = C.ci[m].flat(), n = mean.length;
  const svg = document.getElementById("corpus-bars"); svg.innerHTML = "";
  const step = Math.max(2, Math.min(12, Math.floor(900 / n))), w = 60 + n * step, h = 220, pad = {l: 52, r: 8, t: 10, b: 30};
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  const lo = Math.min(...mean.map((v, i) => v - (ci[i] || 0))), hi = Math.max(...mean.map((v, i) => v + (ci[i] || 0)));
  const P = axes(svg, w, h, pad, "head (layer-major)", METRICS[m] || m, [0, n], [Math.min(0, lo), hi || 1], true);
  for (let i = 0; i < n; i++) { const l = Math.floor(i / D.heads), hh = i % D.heads, [x, y] = P(i + 0.5, mean[i]);
    if (ci[i] !== null) { const [, y0] = P(0, mean[i] - ci[i]), [, y1] = P(0, mean[i] + ci[i]);
      el("line", {x1: x, y1: y0, x2: x, y2: y1, stroke: "#888", "stroke-width": 1, class: "errbar"}, svg); }
    const c = el("circle", {cx: x, cy: y, r: Math.max(1.5, step / 3), fill: ROLE_COLORS[D.roles[l][hh]], class: "cell corpus-dot"}, svg);
    c.addEventListener("mousemove", ev => showTip(ev, `${HNAME(l, hh)} ${D.roles[l][hh]}\n${METRICS[m] || m}: ` +
      `${mean[i].toFixed(3)} ± ${ci[i] === null ? "n/a" : ci[i].toFixed(3)} (95 %)`));
    c.addEventListener("mouseleave", hideTip); c.addEventListener("click", () => selectHead(l, hh)); }
  const t = document.getElementById("corpus-importance"); t.innerHTML = "";
  const head = html("tr", {}, t); for (const s of ["head", "Δ loss", "± 95 %", "p (Holm)", ""]) html("th", {}, head, s);
  for (const r of C.importance_rows) { const tr = html("tr", {}, t);
    for (const s of [r.head, r.delta.toFixed(4), r.ci === null ? "n/a" : r.ci.toFixed(4), r.p_holm.toPrecision(2), r.significant ? "significant" : ""])
      html("td", {}, tr, s); }
  document.getElementById("corpus-importance-note").textContent = C.importance_note;
}

async function main() {
  weightsNote(); drawGrid(); drawHist(); drawScatter(); drawInduction(); drawKV(); drawCorpus();
  layerBytes = await Promise.all(W.layers.map(AR.inflate));
  let best = [0, 0], bestV = -1;  // open on the strongest induction (or previous-token) head
  for (let l = 0; l < D.layers; l++) for (let h = 0; h < D.heads; h++) {
    const v = Math.max(D.columns.induction[l][h], D.columns.prev_token[l][h]); if (v > bestV) { bestV = v; best = [l, h]; } }
  const open = D.open || {};  // a page saved from the explorer opens on its view
  const heads = (open.heads || []).filter(([l, h]) => l < D.layers && h < D.heads);
  tokenFocus = open.token !== undefined && open.token !== null && open.token < D.tokens.length ? open.token : D.tokens.length - 1;
  tokenHead = heads.length ? heads[0] : best;
  selected = heads.length ? heads.slice(-2) : [best]; drawGrid(); drawDetail(); drawTokenView();
  document.body.dataset.ready = "1";  // the browser tests wait for this
}
main();
