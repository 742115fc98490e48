// attnroute's page components: the head grid, a head's links and heatmap, the token-centred view.
// One source for the offline report (show/report.js) and the live explorer (serve/explorer.js): both
// pages inline this file (no build step, no network). Every piece of text reaches the page through
// textContent or an SVG text node, never innerHTML, so markup typed into a text shows as text.
"use strict";
const AR = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const METRICS = {"role": "role", "entropy_norm": "entropy (normalized)", "entropy": "entropy (nats)",
    "sink_mass": "sink mass", "prev_token": "previous-token score", "induction": "induction score",
    "duplicate": "duplicate score", "local": "local-band mass", "norm_mass": "norm-weighted sink share",
    "ablation_delta": "ablation Δ loss", "grad_attr": "gradient estimate of Δ loss"};
  let tip = null;
  function el(tag, attrs, parent) { const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]); if (parent) parent.appendChild(e); return e; }
  function txt(parent, x, y, s, extra) { const t = el("text", Object.assign({x: x, y: y}, extra || {}), parent);
    t.textContent = s; return t; }
  function html(tag, attrs, parent, text) { const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]); if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e); return e; }
  function showTip(ev, s) { if (!tip) tip = document.getElementById("tooltip"); if (!tip) return;
    tip.textContent = s; tip.style.display = "block";
    tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px"; }
  function hideTip() { if (tip) tip.style.display = "none"; }
  function viridis(t) { t = Math.max(0, Math.min(1, t)); const r = Math.round(68 + t * (253 - 68)),
    g = Math.round(1 + t * (231 - 1)), b = Math.round(84 + t * (37 - 84)); return `rgb(${r},${g},${b})`; }
  function b64(s) { const bin = atob(s), out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i); return out; }
  async function inflate(s) {  // zlib (RFC 1950) as show/weights.py writes it
    const stream = new Blob([b64(s)]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer()); }
  // log8 codes (show/weights.py): 0 = below the floor, c >= 1: floor ** ((255 - c) / steps)
  function codeTable(floor, steps) { const t = new Float32Array(256), lf = Math.log(floor);
    for (let c = 1; c < 256; c++) t[c] = Math.exp(lf * (255 - c) / steps); return t; }

  // A head's weights from a layer's codes: Tq x T Float32Array. Formats: log8 (whole rows or the lower
  // triangle of a causal layer) and topk (index, code records), both as show/weights.py packs them.
  function headMatrix(W, bytes, l, h) {
    const T = W.T, Tq = W.Tq || W.T, m = new Float32Array(Tq * T), tab = codeTable(W.floor, W.steps);
    if (W.format === "log8" && W.triangle[l]) { let p = h * T * (T + 1) / 2;
      for (let i = 0; i < T; i++) for (let j = 0; j <= i; j++) m[i * T + j] = tab[bytes[p++]]; }
    else if (W.format === "log8") { const off = h * Tq * T; for (let i = 0; i < Tq * T; i++) m[i] = tab[bytes[off + i]]; }
    else { const k = W.k; for (let i = 0; i < Tq; i++) for (let j = 0; j < k; j++) {
      const p = ((h * Tq + i) * k + j) * 3; m[i * T + (bytes[p] | (bytes[p + 1] << 8))] = tab[bytes[p + 2]]; } }
    return m;
  }
  function payloadMatrix(P) {  // one head from the explorer's API (show/weights.head_payload)
    const bytes = b64(P.codes), tab = codeTable(1e-6, 254), m = new Float32Array(P.Tq * P.T);
    for (let i = 0; i < m.length; i++) m[i] = tab[bytes[i]]; return m;
  }
  // The map a view draws from a head's weights: raw, value-norm-weighted (a_ij ‖v_j W_O‖, each row
  // renormalized: Kobayashi et al. 2020) and/or with the sink keys hidden (each row renormalized over
  // the keys that stay). Returns a new array; the weights stay as they are.
  function viewMatrix(m, Tq, T, opts) {
    const out = new Float32Array(m), norms = opts.norms, sinks = opts.hideSink ? opts.sinkKeys || [] : [];
    for (let i = 0; i < Tq; i++) { let s = 0;
      for (let j = 0; j < T; j++) { let v = out[i * T + j]; if (norms) v *= norms[j]; out[i * T + j] = v; }
      for (const j of sinks) if (j < T) out[i * T + j] = 0;
      for (let j = 0; j < T; j++) s += out[i * T + j];
      if ((norms || sinks.length) && s > 0) for (let j = 0; j < T; j++) out[i * T + j] /= s; }
    return out;
  }

  // ---------------------------------------------------------------- head grid
  // G: {layers, heads, columns, roles, roleColors, lname(l)}; opts: {metric, selected: [[l, h]], from, to,
  // onClick(l, h, ev), cellValue(l, h) (overrides the column: the token view's masses)}
  function grid(svg, G, opts) {
    svg.innerHTML = "";
    const from = opts.from || 0, to = Math.min(G.layers - 1, opts.to === undefined ? G.layers - 1 : opts.to);
    const n = to - from + 1, c = Math.max(10, Math.min(22, Math.floor(420 / Math.max(n, G.heads))));
    const left = 52, top = 26; svg.setAttribute("width", left + G.heads * c + 10); svg.setAttribute("height", top + n * c + 30);
    txt(svg, left + G.heads * c / 2, 12, G.unit === "KV" ? "kv head" : "query head", {"text-anchor": "middle"});
    txt(svg, 12, top + n * c / 2, "layer", {"transform": `rotate(-90 12 ${top + n * c / 2})`, "text-anchor": "middle"});
    const m = opts.metric || "role", value = opts.cellValue || ((l, h) => G.columns[m][l][h]);
    let lo = 0, hi = 1;
    if (m !== "role" || opts.cellValue) { const all = [];
      for (let l = from; l <= to; l++) for (let h = 0; h < G.heads; h++) { const v = value(l, h); if (Number.isFinite(v)) all.push(v); }
      lo = all.length ? Math.min(...all) : 0; hi = all.length ? Math.max(...all) : 1; if (hi === lo) hi = lo + 1; }
    for (let l = from; l <= to; l++) { const y = top + (l - from) * c;
      if (n <= 16 || (l - from) % Math.ceil(n / 15) === 0) txt(svg, left - 6, y + c * 0.7, G.lname(l), {"text-anchor": "end"});
      for (let h = 0; h < G.heads; h++) {
        const v = m === "role" && !opts.cellValue ? null : value(l, h);
        const fill = v === null ? G.roleColors[G.roles[l][h]] : (Number.isFinite(v) ? viridis((v - lo) / (hi - lo)) : "#ddd");
        const r = el("rect", {x: left + h * c, y: y, width: c, height: c, fill: fill, class: "cell",
          "data-layer": l, "data-head": h}, svg);
        if ((opts.selected || []).some(s => s[0] === l && s[1] === h)) r.classList.add("sel");
        if ((opts.cut || []).some(s => s[0] === l && s[1] === h)) r.classList.add("cut");
        const C = G.columns, about = C && C.entropy && C.entropy[l] && h < C.entropy[l].length ?
          `entropy ${C.entropy[l][h].toFixed(2)} nats, sink ${C.sink_mass[l][h].toFixed(2)}, induction ${C.induction[l][h].toFixed(2)}` : "";
        r.addEventListener("mousemove", ev => showTip(ev, `${G.lname(l)}.${G.unit || "H"}${h}  ${G.roles ? G.roles[l][h] || "" : ""}\n` +
          (v === null ? "" : `${opts.valueName || METRICS[m]}: ${Number.isFinite(v) ? v.toFixed(3) : "n/a"}\n`) + about));
        r.addEventListener("mouseleave", hideTip);
        r.addEventListener("click", ev => opts.onClick && opts.onClick(l, h, ev));
      }
    }
    for (let h = 0; h < G.heads; h++) if (G.heads <= 16 || h % 2 === 0)
      txt(svg, left + h * c + c / 2, top + n * c + 12, String(h), {"text-anchor": "middle"});
    return {lo: lo, hi: hi};
  }
  function gridLegend(div, G, metric, range, name) {
    div.innerHTML = "";
    if (metric === "role" && !name) { for (const role in G.roleColors) { const s = html("span", {}, div);
      const i = html("i", {}, s); i.style.background = G.roleColors[role]; s.appendChild(document.createTextNode(role)); } }
    else html("span", {}, div, `${name || METRICS[metric]}: ${range.lo.toFixed(3)} (dark) … ${range.hi.toFixed(3)} (yellow)`);
  }

  // ---------------------------------------------------------------- a head's links (query → key)
  // Every token is drawn (the card scrolls); links under `threshold` are left out and counted.
  // opts: {threshold, gen(i) (generated token?), onRoute(i, j), focus (a token index to highlight)}
  function links(svg, m, Tq, T, qt, kt, opts) {
    svg.innerHTML = ""; const rowH = 14, w = 340, thr = opts.threshold === undefined ? 0.02 : opts.threshold;
    const n = Math.max(Tq, T), qOff = T - Tq;  // bottom-right: query row i sits at key position i + T - Tq
    const x1 = 112, x2 = w - 112, y = p => 24 + p * rowH;
    const cut = new Set((opts.cuts || []).map(c => `${c.query}:${c.key}`));
    svg.setAttribute("width", w); svg.setAttribute("height", n * rowH + 30);
    txt(svg, 60, 12, "queries", {"text-anchor": "middle"}); txt(svg, w - 60, 12, "keys", {"text-anchor": "middle"});
    let hidden = 0; const drawn = [];
    for (let i = 0; i < Tq; i++) for (let j = 0; j < T; j++) { const v = m[i * T + j], isCut = cut.has(`${i + qOff}:${j}`);
      if (v <= 0 && !isCut) continue;
      if (v < thr && !isCut) { hidden++; continue; }
      const focus = opts.focus !== undefined && (i + qOff === opts.focus || j === opts.focus);
      // a cut route is drawn as cut: dashed red, at the weight it had before the cut
      el("line", {x1: x1, y1: y(i + qOff), x2: x2, y2: y(j), stroke: isCut ? "#d62728" : focus ? "#d62728" : "#1f77b4",
        "stroke-width": 0.5 + 4 * Math.max(v, isCut ? 0.1 : 0), "stroke-opacity": Math.min(1, 0.15 + v),
        class: isCut ? "route cut" : "route", "data-query": i + qOff, "data-key": j}, svg);
      drawn.push({q: i + qOff, k: j, v: v, cut: isCut}); }
    // a line is hit by its nearest point, not by which line is drawn on top: one handler for the whole figure
    const nearest = ev => { const r = svg.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
      let best = null, bd = 6;  // pixels
      for (const d of drawn) { const ax = x1, ay = y(d.q), bx = x2, by = y(d.k), dx = bx - ax, dy = by - ay;
        const t = Math.max(0, Math.min(1, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)));
        const dist = Math.hypot(px - ax - t * dx, py - ay - t * dy); if (dist < bd) { bd = dist; best = d; } }
      return best; };
    svg.addEventListener("mousemove", ev => { const d = nearest(ev); if (!d) { hideTip(); return; }
      showTip(ev, `query ${d.q} “${qt[d.q - qOff]}” → key ${d.k} “${kt[d.k]}”: ${d.v.toFixed(4)}` +
        (d.cut ? "\n(cut)" : opts.onRoute ? "\nclick: cut this route" : "") + (opts.onWhy ? "; alt-click: why" : "")); });
    svg.addEventListener("mouseleave", hideTip);
    const byTarget = ev => { const t = ev.target; if (!t || !t.classList || !t.classList.contains("route")) return null;
      return drawn.find(d => d.q === +t.dataset.query && d.k === +t.dataset.key) || null; };
    // a click with no position (a keyboard or a script's click) takes the line it was sent to
    svg.addEventListener("click", ev => { const d = (ev.clientX || ev.clientY ? nearest(ev) : null) || byTarget(ev); if (!d) return;
      if (ev.altKey && opts.onWhy) opts.onWhy(d.q, d.k); else if (!d.cut && opts.onRoute) opts.onRoute(d.q, d.k); });
    svg.nearestRoute = (cx, cy) => nearest({clientX: cx, clientY: cy});  // for tests: what a click there hits
    const gen = i => opts.gen && opts.gen(i) ? {"class": "gen"} : {};
    for (let i = 0; i < Tq; i++) txt(svg, 108, 28 + (i + qOff) * rowH, `${i + qOff} ${qt[i]}`.slice(0, 16), Object.assign({"text-anchor": "end"}, gen(i + qOff)));
    for (let j = 0; j < T; j++) txt(svg, w - 108, 28 + j * rowH, `${kt[j]} ${j}`.slice(0, 16), gen(j));
    return hidden;
  }

  // ---------------------------------------------------------------- heatmap with token labels
  function heat(cv, m, Tq, T, qt, kt) {
    const px = Math.max(2, Math.min(12, Math.floor(480 / Math.max(T, Tq)))), pad = 70;
    cv.width = T * px + pad; cv.height = Tq * px + pad; const ctx = cv.getContext("2d");
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, cv.width, cv.height);
    for (let i = 0; i < Tq; i++) for (let j = 0; j < T; j++) { ctx.fillStyle = viridis(Math.sqrt(m[i * T + j]));
      ctx.fillRect(pad + j * px, pad + i * px, px, px); }
    ctx.fillStyle = "#333"; ctx.font = "10px system-ui, sans-serif";
    const every = Math.max(1, Math.ceil(11 / px));  // a label every `every` tokens: no overlap
    ctx.textAlign = "right"; for (let i = 0; i < Tq; i += every) ctx.fillText(qt[i].slice(0, 10), pad - 3, pad + i * px + px / 2 + 3);
    for (let j = 0; j < T; j += every) { ctx.save(); ctx.translate(pad + j * px + px / 2 + 3, pad - 3); ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left"; ctx.fillText(kt[j].slice(0, 10), 0, 0); ctx.restore(); }
    cv.onmousemove = ev => { const r = cv.getBoundingClientRect(); const j = Math.floor((ev.clientX - r.left - pad) / px),
      i = Math.floor((ev.clientY - r.top - pad) / px);
      if (i >= 0 && i < Tq && j >= 0 && j < T) showTip(ev, `query ${i + T - Tq} “${qt[i]}” → key ${j} “${kt[j]}”\nweight ${m[i * T + j].toFixed(4)}`);
      else hideTip(); };
    cv.onmouseleave = hideTip;
    return every;
  }

  // ---------------------------------------------------------------- token-centred view
  // The text, each token shaded by a weight: the routes out of the clicked token (its row) or into it
  // (its column) in one head. Clicking a token calls onToken(j).
  function tokenText(div, tokens, weights, opts) {
    div.innerHTML = ""; const hi = Math.max(1e-9, ...weights);
    tokens.forEach((t, j) => { const s = html("span", {class: "tok", "data-index": j}, div, t);
      const a = weights[j] / hi; s.style.background = `rgba(214,39,40,${(0.08 + 0.9 * a).toFixed(3)})`;
      if (j === opts.focus) s.classList.add("focus");
      if (j === opts.key) s.classList.add("key");
      s.addEventListener("mousemove", ev => showTip(ev, `${j} “${t}”: ${weights[j].toFixed(4)}`));
      s.addEventListener("mouseleave", hideTip);
      s.addEventListener("click", ev => opts.onToken && opts.onToken(j, ev)); });
    const f = div.querySelector(".tok.focus");  // the selected token stays in view however long the text
    if (f && div.scrollHeight > div.clientHeight) div.scrollTop = f.offsetTop - div.offsetTop - div.clientHeight / 2;
  }

  return {METRICS, el, txt, html, showTip, hideTip, viridis, b64, inflate, codeTable, headMatrix, payloadMatrix,
    viewMatrix, grid, gridLegend, links, heat, tokenText};
})();
