// The live explorer (attnroute serve): the page's state is {text, cuts, heads, token}, kept in the URL's
// hash; every number comes from the server's API (serve/app.py), which runs the model. Components: AR.
"use strict";
const D = JSON.parse(document.getElementById("data").textContent), INFO = D.info;
const ROLE_COLORS = Object.fromEntries(D.role_info.map(r => [r.name, r.color]));
const TOKEN = new URLSearchParams(location.search).get("token") || "";
const $ = id => document.getElementById(id);
const {html} = AR;
const S = {mode: "text", text: "", cuts: [], heads: [], token: null, key: null, dir: "out", target: "", tokenHead: null};
let G = null, jobs = 0;

// ------------------------------------------------------------------ the API, with a progress bar
async function api(kind, body) {
  const job = "j" + Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  jobs++; $("busy").hidden = false; $("error").textContent = "";
  const poll = setInterval(async () => {
    try { const r = await fetch(`/api/progress?id=${job}`, {headers: {"X-Attnroute-Token": TOKEN}});
      const p = await r.json(); if (p.id) { $("bar").firstElementChild.style.width = (100 * p.done / Math.max(1, p.total)) + "%";
        $("busy-msg").textContent = p.message; } } catch (e) { /* the next poll tries again */ } }, 300);
  try {
    const r = await fetch(`/api/${kind}`, {method: "POST", headers: {"Content-Type": "application/json",
      "X-Attnroute-Token": TOKEN}, body: JSON.stringify(Object.assign({job: job}, body))});
    if (!r.ok) { let msg = `${r.status}`; try { msg += ": " + (await r.json()).error; } catch (e) { /* not JSON */ }
      throw new Error(msg); }
    const timing = /dur=([0-9.]+)/.exec(r.headers.get("Server-Timing") || "");  // the request's time on the server
    if (timing) { $("server-time").textContent = `${kind}: ${(timing[1] / 1000).toFixed(2)} s on the server` +
      (r.headers.get("X-Attnroute-Cache") === "hit" ? " (cached)" : ""); $("server-time").dataset.ms = timing[1]; }
    return kind === "report" ? await r.blob() : await r.json();
  } catch (e) { $("error").textContent = e.message; throw e; }
  finally { clearInterval(poll); if (--jobs === 0) { $("busy").hidden = true; $("bar").firstElementChild.style.width = "0"; } }
}
// a failed request is said in the page's error line (api above); its rejected promise needs no console line
window.addEventListener("unhandledrejection", e => { if ($("error").textContent) e.preventDefault(); });
function saveState() { const s = {mode: S.mode, text: S.text, cuts: S.cuts, heads: S.heads, token: S.token, key: S.key, dir: S.dir,
  target: S.target, tokenHead: S.tokenHead};
  history.replaceState(null, "", location.pathname + location.search + "#" + encodeURIComponent(JSON.stringify(s))); }
function loadState() { if (location.hash.length < 2) return false;
  try { Object.assign(S, JSON.parse(decodeURIComponent(location.hash.slice(1)))); return true; } catch (e) { return false; } }

// ------------------------------------------------------------------ text mode
const metricSel = $("metric"), fromIn = $("layer-from"), toIn = $("layer-to");
fromIn.max = toIn.max = INFO.layers - 1; toIn.value = INFO.layers - 1;
for (const m in AR.METRICS) if (m !== "ablation_delta" && m !== "grad_attr") html("option", {value: m}, metricSel, AR.METRICS[m]);
const LNAME = l => String(l);
function layerRange() { const a = Math.max(0, Math.min(INFO.layers - 1, +fromIn.value || 0));
  return [a, Math.max(a, Math.min(INFO.layers - 1, toIn.value === "" ? INFO.layers - 1 : +toIn.value))]; }
async function readText() {
  S.text = $("text").value; S.target = $("target").value;
  const grid = await api("text", {text: S.text});
  G = {layers: INFO.layers, heads: INFO.heads, columns: grid.columns, roles: grid.roles, roleColors: ROLE_COLORS,
    lname: LNAME, tokens: grid.tokens, sinkKeys: grid.sink_keys, top: grid.top};
  if (!S.heads.length || S.heads.some(([l, h]) => l >= INFO.layers || h >= INFO.heads)) S.heads = [bestHead()];
  if (S.token === null || S.token >= G.tokens.length) S.token = G.tokens.length - 1;
  document.body.dataset.text = "1";
  drawGrid(); await Promise.all([drawDetail(), drawCut(), drawTokenView()]); saveState();
  document.body.dataset.ready = "1";
}
function bestHead() { let best = [0, 0], bv = -1; for (let l = 0; l < INFO.layers; l++) for (let h = 0; h < INFO.heads; h++) {
  const v = Math.max(G.columns.induction[l][h], G.columns.prev_token[l][h]); if (v > bv) { bv = v; best = [l, h]; } } return best; }
function cutHeads() { return S.cuts.filter(c => c.kind === "head").map(c => [c.layer, c.head]); }
function drawGrid() {
  if (!G) return; const [a, b] = layerRange();
  const range = AR.grid($("grid"), G, {metric: metricSel.value, selected: S.heads, cut: cutHeads(), from: a, to: b,
    onClick: (l, h, ev) => { selectHead(l, h, ev.shiftKey); }});
  AR.gridLegend($("grid-legend"), G, metricSel.value, range);
}
for (const e of [metricSel, fromIn, toIn]) e.addEventListener("change", () => { drawGrid(); drawTokenView(); });
async function selectHead(l, h, add) {
  const last = S.heads[S.heads.length - 1];
  S.heads = add && last && !(last[0] === l && last[1] === h) ? [last, [l, h]] : [[l, h]];
  drawGrid(); saveState(); await drawDetail();
}
const heads = new Map();  // "text|l|h" -> {m, norms}: a head is fetched once per text
async function headOf(l, h) { const key = `${S.text}|${l}|${h}`;
  if (!heads.has(key)) { const P = await api("head", {text: S.text, layer: l, head: h});
    heads.set(key, {m: AR.payloadMatrix(P), Tq: P.Tq, T: P.T, norms: P.norms.some(x => x === null) ? null : P.norms}); }
  return heads.get(key); }
async function drawDetail() {
  if (!G) return; const panels = $("panels"), got = [];
  for (const [l, h] of S.heads) got.push([l, h, await headOf(l, h)]);
  panels.innerHTML = ""; let hidden = 0;
  $("detail-title").textContent = "Head detail: " + S.heads.map(([l, h]) => `L${l}.H${h} (${G.roles[l][h]})`).join(" beside ");
  for (const [l, h, H] of got) {
    const m = AR.viewMatrix(H.m, H.Tq, H.T, {norms: null, hideSink: $("hide-sink").checked, sinkKeys: G.sinkKeys});
    const p = html("div", {class: "panel", "data-head": `${l}.${h}`}, panels); html("h3", {}, p, `L${l}.H${h} — ${G.roles[l][h]}`);
    const r = html("div", {class: "row"}, p), lw = html("div", {class: "scroll"}, r), svg = AR.el("svg", {class: "links"}, lw);
    hidden += AR.links(svg, m, H.Tq, H.T, G.tokens, G.tokens, {threshold: +$("threshold").value, focus: S.token,
      cuts: S.cuts.filter(c => c.kind === "route" && c.layer === l && c.head === h), onWhy: (q, k) => showWhy(l, h, q, k),
      onRoute: (q, k) => addCut({kind: "route", layer: l, head: h, query: q, key: k})});
    AR.heat(html("canvas", {class: "heat"}, html("div", {class: "scroll"}, r)), m, H.Tq, H.T, G.tokens, G.tokens);
    if ($("norm-weighted").checked) { const nw = html("div", {}, r);  // beside the raw map
      html("div", {class: "note"}, nw, H.norms ? "value-norm-weighted: α·‖v W_O‖, rows renormalized" : "no value norms for this layer");
      if (H.norms) AR.heat(html("canvas", {class: "heat-norm"}, html("div", {class: "scroll"}, nw)),
        AR.viewMatrix(H.m, H.Tq, H.T, {norms: H.norms, hideSink: $("hide-sink").checked, sinkKeys: G.sinkKeys}), H.Tq, H.T, G.tokens, G.tokens); }
  }
  $("view-note").textContent = `Links under ${$("threshold").value} left out (${hidden}). ` +
    ($("hide-sink").checked ? "Sink keys hidden, rows renormalized. " : "") +
    ($("norm-weighted").checked ? "Value-norm-weighted maps beside the raw ones (Kobayashi et al. 2020). " : "");
}
for (const id of ["hide-sink", "norm-weighted", "threshold"]) $(id).addEventListener("change", drawDetail);

// ------------------------------------------------------------------ why a route exists (alt-click a link)
async function showWhy(l, h, q, k) {
  const r = await api("why", {text: S.text, layer: l, head: h, query: q, key: k}), card = $("why-card");
  card.hidden = false; card.dataset.route = `${l}.${h}.${q}.${k}`;
  $("why-title").textContent = `Why L${l}.H${h} attends ${q} “${G.tokens[q]}” → ${k} “${G.tokens[k]}”`;
  $("why-sum").textContent = `score ${r.score.toFixed(4)} = Σ of every (query side, key side) pair ${r.sum.toFixed(4)} ` +
    `(difference ${r.difference.toExponential(1)}); the largest ${r.pairs.length}:`;
  const t = $("why-pairs"); t.innerHTML = ""; const hd = html("tr", {}, t);
  for (const c of ["query side (at " + q + ")", "key side (at " + k + ")", "term (score units)"]) html("th", {}, hd, c);
  for (const p of r.pairs) { const tr = html("tr", {}, t); html("td", {}, tr, p.query_side.label);
    html("td", {}, tr, p.key_side.label); html("td", {class: "num"}, tr, (p.term >= 0 ? "+" : "") + p.term.toFixed(4)); }
  whyGraph($("why-graph"), r.pairs);
}
// the pairs as a graph: query-side components left, key-side right, a line per pair (red adds, blue takes away)
function whyGraph(svg, pairs) {
  const left = [...new Set(pairs.map(p => p.query_side.label))], right = [...new Set(pairs.map(p => p.key_side.label))];
  const rowH = 18, n = Math.max(left.length, right.length), w = 360, big = Math.max(1e-12, ...pairs.map(p => Math.abs(p.term)));
  svg.innerHTML = ""; svg.setAttribute("width", w); svg.setAttribute("height", n * rowH + 30);
  AR.txt(svg, 70, 12, "query side", {"text-anchor": "middle"}); AR.txt(svg, w - 70, 12, "key side", {"text-anchor": "middle"});
  for (const p of pairs) { const y1 = 28 + left.indexOf(p.query_side.label) * rowH, y2 = 28 + right.indexOf(p.key_side.label) * rowH;
    AR.el("line", {x1: 110, y1: y1 - 4, x2: w - 110, y2: y2 - 4, stroke: p.term > 0 ? "#d62728" : "#1f77b4",
      "stroke-width": 0.5 + 5 * Math.abs(p.term) / big, "stroke-opacity": 0.75, class: "why-pair"}, svg); }
  left.forEach((s, i) => AR.txt(svg, 106, 28 + i * rowH, s, {"text-anchor": "end"}));
  right.forEach((s, i) => AR.txt(svg, w - 106, 28 + i * rowH, s));
}

// ------------------------------------------------------------------ cuts: the answer before and after
function describe(c) { return c.kind === "head" ? `cut head L${c.layer}.H${c.head}` :
  `cut route ${c.query} “${G.tokens[c.query]}” → ${c.key} “${G.tokens[c.key]}” in L${c.layer}.H${c.head}`; }
async function addCut(c) { S.cuts.push(c); saveState(); drawGrid(); await Promise.all([drawCut(), drawDetail()]); }
function topTable(t, rows, target) { t.innerHTML = "";
  for (const r of rows) { const tr = html("tr", {}, t); html("td", {}, tr, JSON.stringify(r.token));
    html("td", {class: "num"}, tr, r.p.toFixed(6)); if (r.id === target) tr.style.fontWeight = "bold"; } }
async function drawCut(upTo) {
  if (!G) return; const cuts = upTo === undefined ? S.cuts : S.cuts.slice(0, upTo);
  const r = await api("cut", {text: S.text, cuts: cuts, target: S.target || null});
  const list = $("cuts"); if (upTo === undefined) { list.innerHTML = "";
    S.cuts.forEach((c, i) => { const li = html("li", {}, list, describe(c) + " ");
      const x = html("button", {title: "remove this cut"}, li, "×");
      x.addEventListener("click", async () => { S.cuts.splice(i, 1); saveState(); drawGrid(); await drawCut(); });
      html("span", {class: "note step", "data-step": i}, li); }); }
  if (r.kind === "encoder") { $("metric-line").textContent = `${r.metric.name}: ${r.metric.after.toFixed(6)} after ${cuts.length} cut(s)`;
    $("top-before").innerHTML = ""; $("top-after").innerHTML = ""; return r; }
  $("metric-line").textContent = `${r.metric.name}: ${r.metric.before.toFixed(6)} before, ${r.metric.after.toFixed(6)} after ` +
    `(${r.metric.delta >= 0 ? "+" : ""}${r.metric.delta.toFixed(6)}) with ${cuts.length} cut(s)`;
  $("metric-line").dataset.before = r.metric.before; $("metric-line").dataset.after = r.metric.after;
  topTable($("top-before"), r.before.top, r.target.id); topTable($("top-after"), r.after.top, r.target.id);
  return r;
}
$("undo").addEventListener("click", async () => { S.cuts.pop(); saveState(); drawGrid(); await Promise.all([drawCut(), drawDetail()]); });
$("clear").addEventListener("click", async () => { S.cuts = []; saveState(); drawGrid(); await Promise.all([drawCut(), drawDetail()]); });
$("replay").addEventListener("click", async () => {  // the cuts one at a time: the metric after each step
  for (let i = 1; i <= S.cuts.length; i++) { const r = await drawCut(i);
    const step = document.querySelector(`span.step[data-step="${i - 1}"]`);
    if (step && r.metric) step.textContent = ` → ${r.metric.name} ${r.metric.after.toFixed(6)}`; }
  await drawCut(); });
$("cut-head").addEventListener("click", () => { const [l, h] = S.heads[S.heads.length - 1]; addCut({kind: "head", layer: l, head: h}); });

// ------------------------------------------------------------------ a token's routes in every head
async function drawTokenView() {
  if (!G) return; const i = S.token, T = G.tokens.length, out = S.dir === "out";
  const key = out && S.key !== null && S.key !== undefined && S.key < T ? S.key : null;
  AR.tokenText($("token-text"), G.tokens, G.tokens.map(() => 0), {focus: i, key: key, onToken: (j, ev) => {
    if (ev && ev.shiftKey && out) S.key = j === S.key ? null : j; else { S.token = j; S.key = null; }
    saveState(); drawTokenView(); drawDetail(); }});
  const P = await api("token", {text: S.text, index: i}), rows = AR.payloadMatrix(out ? P.out : P.into);
  const vec = (l, h) => rows.subarray((l * INFO.heads + h) * T, (l * INFO.heads + h + 1) * T);
  const sinks = new Set(G.sinkKeys);
  const fx = key !== null && S.effect && S.effect.query === i && S.effect.key === key && S.effect.text === S.text ? S.effect : null;
  const value = (l, h) => { const v = vec(l, h); if (fx) return fx.estimate[l][h]; if (key !== null) return v[key];
    let best = 0, s = 0, n = 0;
    for (let j = 0; j < T; j++) { if (j === i) continue;
      if (out) { if (!sinks.has(j) && v[j] > best) best = v[j]; } else if (j > i || INFO.kind !== "causal") { s += v[j]; n++; } }
    return out ? best : (n ? s / n : 0); };
  const name = fx ? `estimated Δ ${fx.metric} if ${i} → ${key} is cut (first order, the row renormalized)` :
    key !== null ? `weight of the route ${i} “${G.tokens[i]}” → ${key} “${G.tokens[key]}”` :
    out ? "largest weight to another non-sink key" : "mean weight from the queries that see it";
  $("token-title").textContent = key !== null ? `The route ${i} “${G.tokens[i]}” → ${key} “${G.tokens[key]}” in every head` :
    `Token ${i} “${G.tokens[i]}”: its routes ${out ? "out" : "in"} in every head`;
  const [a, b] = layerRange();
  if (!S.tokenHead) S.tokenHead = S.heads[0];
  const range = AR.grid($("token-grid"), G, {metric: "entropy", cellValue: value, valueName: name, from: a, to: b,
    selected: [S.tokenHead], onClick: (l, h) => { S.tokenHead = [l, h]; saveState(); drawTokenView(); }});
  AR.gridLegend($("token-legend"), G, "entropy", range, name);
  $("token-effect").hidden = key === null || !!fx;
  if (key !== null) { let best = [0, 0], bv = -1;  // the head that routes it most (or moves the target most), in words
    const size = (l, h) => fx ? Math.abs(value(l, h)) : value(l, h);
    for (let l = a; l <= b; l++) for (let h = 0; h < INFO.heads; h++) if (size(l, h) > bv) { bv = size(l, h); best = [l, h]; }
    $("token-best").textContent = `most: L${best[0]}.H${best[1]} (${value(best[0], best[1]).toFixed(4)}${fx ? ", estimated Δ " + fx.metric : ""})`;
    $("token-best").dataset.head = `${best[0]}.${best[1]}`; $("token-best").dataset.kind = fx ? "effect" : "weight"; }
  else { $("token-best").textContent = ""; delete $("token-best").dataset.head; }
  const [l, h] = S.tokenHead;
  $("token-shade-label").textContent = `the text shaded by L${l}.H${h}'s routes ${out ? "out of" : "into"} token ${i}`;
  AR.tokenText($("token-shade"), G.tokens, Array.from(vec(l, h)), {focus: i, key: key, onToken: j => { S.token = j; S.key = null; saveState(); drawTokenView(); }});
  $("token-card").dataset.token = String(i); $("token-card").dataset.key = key === null ? "" : String(key);
}
$("token-effect").addEventListener("click", async () => {
  const r = await api("effect", {text: S.text, query: S.token, key: S.key, target: S.target || null});
  S.effect = Object.assign(r, {text: S.text}); drawTokenView(); });
$("token-dir").addEventListener("change", () => { S.dir = $("token-dir").value; saveState(); drawTokenView(); });

// ------------------------------------------------------------------ save as report (the offline page)
$("save").addEventListener("click", async () => {
  const blob = await api("report", {text: S.text, cuts: S.cuts, heads: S.heads, token: S.token, target: S.target || null});
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob); a.download = "attnroute-report.html"; document.body.appendChild(a); a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000); });

// ------------------------------------------------------------------ prompt-pair mode
function setMode(mode) { S.mode = mode; $("text-mode").hidden = mode !== "text"; $("pair-mode").hidden = mode !== "pair";
  $("tab-text").classList.toggle("on", mode === "text"); $("tab-pair").classList.toggle("on", mode === "pair"); saveState(); }
$("tab-text").addEventListener("click", () => setMode("text"));
$("tab-pair").addEventListener("click", () => setMode("pair"));
if (INFO.kind !== "causal") { $("tab-pair").disabled = true;  // a logit difference needs a causal LM
  $("tab-pair").title = "prompt pairs measure a logit difference: this model is not a causal LM"; }
function pairFields() { return {clean: $("clean").value, corrupt: $("corrupt").value, answer: $("answer").value, wrong: $("wrong").value}; }
async function runPair() {
  const r = await api("pair", pairFields()), grid = r.grid;
  const PG = (units, unit) => ({layers: INFO.layers, heads: units, columns: null, roles: null, roleColors: ROLE_COLORS,
    lname: LNAME, unit: unit});
  const name = "normalized patching effect";
  const range = AR.grid($("patch-head"), PG(INFO.heads, "H"), {metric: "entropy", valueName: name,
    cellValue: (l, h) => grid.head[l][h] === null ? NaN : grid.head[l][h]});
  AR.gridLegend($("patch-legend"), G || PG(INFO.heads), "entropy", range, name + " (grey: estimate only)");
  const qkv = $("patch-qkv"); qkv.innerHTML = "";
  const TITLES = {q: "q — query heads", k: "k — kv heads (each read by its group of query heads)", v: "v — kv heads"};
  for (const site of ["q", "k", "v"]) { if (!grid[site]) continue; const box = html("div", {}, qkv); html("h3", {}, box, TITLES[site]);
    const units = grid[site][0].length, svg = AR.el("svg", {}, box);
    AR.grid(svg, PG(units, site === "q" ? "H" : "KV"), {metric: "entropy", valueName: `${site}: ${name}`,
      cellValue: (l, u) => grid[site][l][u] === null ? NaN : grid[site][l][u]}); }
  const t = $("routes"); t.innerHTML = ""; const hd = html("tr", {}, t);
  const unit = `Δ ${r.patch.meta.metric}`;  // both columns: the change of the metric when the route is cut
  for (const s of ["route", "weight", `estimate (${unit})`, `exact (${unit})`, ""]) html("th", {}, hd, s);
  const row = (rt, attrs) => { const tr = html("tr", attrs, t);
    html("td", {}, tr, `L${rt.layer}.H${rt.head} ${rt.query} “${rt.query_token}” → ${rt.key} “${rt.key_token}”`);
    html("td", {class: "num"}, tr, rt.weight.toFixed(3)); html("td", {class: "num"}, tr, rt.estimate.toFixed(4));
    const ex = html("td", {class: "num exact"}, tr, rt.exact === null || rt.exact === undefined ? "" : rt.exact.toFixed(4));
    const b = html("button", {}, html("td", {}, tr), "verify");
    b.addEventListener("click", async () => { const v = await api("verify", Object.assign(pairFields(),
      {route: {layer: rt.layer, head: rt.head, query: rt.query, key: rt.key}}));
      ex.textContent = v.exact.toFixed(4); ex.dataset.exact = v.exact; }); };
  r.routes.routes.forEach((rt, n) => row(rt, {"data-route": n}));
  if (r.routes.content_routes) {  // the top routes end on an attention sink: the content routes, ranked apart
    const said = r.routes.verdict.lines.find(x => x.startsWith("attention sink")) || "attention sink";
    html("td", {colspan: 5, class: "sink-note"}, html("tr", {}, t), said);
    r.routes.content_routes.forEach((rt, n) => row(rt, {"data-content-route": n})); }
  $("routes-note").textContent = r.patch.verdict.lines.join(" · ");
  document.body.dataset.pair = "1";
}
$("run-pair").addEventListener("click", runPair);

// the pair's circuit as a graph: a node per (layer, head) or MLP, the embedding left, the logits right
const CHANNEL = {q: "#2e6fb7", k: "#e08a1e", v: "#2e9d57", mlp: "#7f7f7f", logits: "#8e44ad"};
function nodeXY(n, L, H, G) { const dx = 46, dy = 16, x0 = 70, y0 = 20;
  if (n.kind === "embed") return [20, y0 + (H + 1) * dy / 2];
  if (n.kind === "logits") return [x0 + L * dx + 20, y0 + (H + 1) * dy / 2];
  if (n.kind === "mlp") return [x0 + n.layer * dx + dx / 2, y0 + (H + 1) * dy];
  const h = n.channel === "k" || n.channel === "v" ? n.head * G : n.head;  // a kv head at its first query head
  return [x0 + n.layer * dx + (n.channel ? dx / 2 : 0), y0 + h * dy]; }
async function runCircuit() {
  const r = await api("circuit", pairFields()), svg = $("circuit-graph"), m = r.meta;
  const L = m.layers, H = m.heads, G = m.heads / Math.max(1, m.kv_heads);
  svg.innerHTML = ""; svg.setAttribute("width", 70 + L * 46 + 60); svg.setAttribute("height", 40 + (H + 2) * 16);
  const value = e => e.exact === null ? e.estimate : e.exact, big = Math.max(1e-9, ...r.edges.map(e => Math.abs(value(e))));
  for (let l = 0; l < L; l += 5) AR.txt(svg, 70 + l * 46, 12, `L${l}`);
  for (const e of r.edges) { const [x1, y1] = nodeXY(e.sender, L, H, G), [x2, y2] = nodeXY(e.receiver, L, H, G);
    const line = AR.el("line", {x1: x1, y1: y1, x2: x2, y2: y2, class: "edge", "data-label": e.label,
      stroke: CHANNEL[e.receiver.channel || e.receiver.kind], "stroke-width": 1 + 5 * Math.abs(value(e)) / big,
      "stroke-opacity": 0.75, "stroke-dasharray": e.exact === null ? "4 3" : ""}, svg);
    line.style.cursor = "pointer";
    line.addEventListener("mousemove", ev => AR.showTip(ev, `${e.label}\nexact ${e.exact === null ? "not measured" :
      e.exact.toFixed(4)}, estimate ${e.estimate.toFixed(4)} (Δ ${m.metric})\nclick: path-patch it exactly`));
    line.addEventListener("mouseleave", AR.hideTip);
    line.addEventListener("click", async () => { const p = await api("path", Object.assign(pairFields(), {edge: e.label}));
      line.dataset.exact = p.exact; line.setAttribute("stroke-dasharray", "");
      $("circuit-note").textContent = `${p.edge}: exact Δ ${p.metric} ${p.exact.toFixed(4)} (estimate ${p.estimate.toFixed(4)})`; }); }
  const legend = $("circuit-legend"); legend.innerHTML = "";
  for (const c in CHANNEL) { const sp = html("span", {}, legend), i = html("i", {}, sp); i.style.background = CHANNEL[c];
    sp.appendChild(document.createTextNode(c)); }
  $("circuit-note").textContent = r.verdict.lines.join(" · ") + " · dashed: estimated only";
  svg.dataset.edges = String(r.edges.length);
}
$("run-circuit").addEventListener("click", runCircuit);

// ------------------------------------------------------------------ start
$("model").textContent = INFO.model;
$("subtitle").textContent = `${INFO.layers} layers × ${INFO.heads} heads (${INFO.kv_heads} kv heads), ${INFO.kind}; ` +
  `texts up to ${INFO.max_tokens} tokens. Routing verified against the model's own attention at start.`;
$("run").addEventListener("click", () => { S.cuts = []; S.heads = []; S.token = null; S.tokenHead = null; readText(); });
$("target").addEventListener("change", () => { S.target = $("target").value; saveState(); drawCut(); });
$("clean").value = "When Mary and John went to the store, John gave a drink to";
$("corrupt").value = "When Mary and John went to the store, Mary gave a drink to";
$("answer").value = " Mary"; $("wrong").value = " John";
if (INFO.kind !== "speech") {  // a speech model's page starts in explorer_speech.js
  const restored = loadState();
  $("text").value = S.text || INFO.default_text; $("target").value = S.target || ""; $("token-dir").value = S.dir;
  setMode(S.mode || "text");
  if (restored && S.text) readText(); else document.body.dataset.ready = "idle";
}
