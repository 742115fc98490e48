// The explorer for a speech model (serve/speech.py): a clip's cross-attention maps beside its spectrogram,
// the alignment heads marked, and cuts of a decoder row's routes to the frames of a word — each token's
// log-probability and the transcript decoded again, before and after. State {clip, text, cuts, head} lives
// in the URL's hash, as the text mode's does. Shares the page's api(), $, html and AR (explorer.js).
"use strict";
const SP = {clip: null, text: null, cuts: [], head: null};
let CLIP = null;  // the server's answer for the clip: tokens, words, maps, alignment, spectrogram, logprobs

function speechSave() {
  const s = {speech: {clip: SP.clip, text: SP.text, cuts: SP.cuts, head: SP.head}};
  history.replaceState(null, "", location.pathname + location.search + "#" + encodeURIComponent(JSON.stringify(s)));
}
function speechLoad() {
  try { const s = JSON.parse(decodeURIComponent(location.hash.slice(1))).speech; if (s) Object.assign(SP, s); return !!s; }
  catch (e) { return false; }
}
const same = (a, b) => a[0] === b[0] && a[1] === b[1];
function wordAt(t) { return CLIP.words.find(w => w.start <= t && t < w.end) || null; }
function cutSaid(c) {
  if (c.kind === "head") return `cut cross-attention head L${c.layer}.H${c.head}`;
  const who = c.head === null ? `every head of cross layer ${c.layer}` : `L${c.layer}.H${c.head}`;
  const w = wordAt((c.start + c.end) / 2);
  return `row “${CLIP.tokens[c.row]}” → ${c.start.toFixed(2)}–${c.end.toFixed(2)} s${w ? ` (“${w.word}”)` : ""} in ${who}`;
}

async function readClip() {
  SP.clip = $("clip").value; SP.text = $("clip-text").value.trim() || null;
  CLIP = await api("clip", {clip: SP.clip, text: SP.text});
  CLIP.matrices = CLIP.maps.map(row => row.map(P => AR.payloadMatrix(P)));
  const a = CLIP.alignment, ov = a.overlap;
  $("clip-said").textContent = `${CLIP.clip} — transcript (${CLIP.transcript_source}): “${CLIP.transcript}”` +
    (ov ? ` · alignment heads: ${ov.shared} of the model's ${ov.k} in attnroute's top ${ov.k}` : "");
  $("spectrogram").src = CLIP.spectrogram;
  const bad = h => !h || h[0] >= CLIP.maps.length || h[1] >= INFO.heads;
  if (bad(SP.head)) SP.head = a.ranking[0];
  SP.cuts = SP.cuts.filter(c => c.row === undefined || c.row < CLIP.tokens.length);
  document.body.dataset.clip = "1";
  drawCrossGrid(); drawMap(); await runCuts(); speechSave();
}

function drawCrossGrid() {
  const svg = $("cross-grid"), a = CLIP.alignment, Lc = CLIP.maps.length, H = INFO.heads, cw = 34, ch = 26, x0 = 40, y0 = 22;
  svg.innerHTML = ""; svg.setAttribute("width", x0 + H * cw + 10); svg.setAttribute("height", y0 + Lc * ch + 10);
  const k = (a.reference || []).length || 8, top = a.ranking.slice(0, k), ref = a.reference || [];
  const cutHeads = SP.cuts.filter(c => c.kind === "head").map(c => [c.layer, c.head]);
  for (let h = 0; h < H; h++) AR.txt(svg, x0 + h * cw + cw / 2, y0 - 6, `H${h}`, {"text-anchor": "middle", "font-size": 10});
  for (let l = 0; l < Lc; l++) {
    AR.txt(svg, x0 - 6, y0 + l * ch + ch / 2 + 4, `L${l}`, {"text-anchor": "end", "font-size": 10});
    for (let h = 0; h < H; h++) {
      const v = a.agreement[l][h], here = [l, h], isRef = ref.some(r => same(r, here));
      const cell = AR.el("rect", {x: x0 + h * cw, y: y0 + l * ch, width: cw - 3, height: ch - 3, fill: AR.viridis(v),
        stroke: SP.head && same(SP.head, here) ? "#000" : isRef ? "#d62728" : "none",
        "stroke-width": SP.head && same(SP.head, here) ? 3 : 2, "data-layer": l, "data-head": h, class: "cross-head"}, svg);
      cell.addEventListener("mousemove", ev => AR.showTip(ev, `cross L${l}.H${h}: agreement ${v.toFixed(2)}, ` +
        `monotonicity ${a.monotonicity[l][h].toFixed(2)}${isRef ? " · one of the model's alignment heads" : ""}`));
      cell.addEventListener("mouseleave", AR.hideTip);
      cell.addEventListener("click", () => { SP.head = here; drawCrossGrid(); drawMap(); speechSave(); });
      if (top.some(r => same(r, here))) AR.txt(svg, x0 + h * cw + cw / 2 - 1, y0 + l * ch + ch / 2 + 3, "★",
        {"text-anchor": "middle", "font-size": 11, fill: v > 0.6 ? "#000" : "#fff", "pointer-events": "none"});
      if (cutHeads.some(r => same(r, here))) AR.txt(svg, x0 + h * cw + cw / 2, y0 + l * ch + ch / 2 + 4, "×",
        {"text-anchor": "middle", "font-size": 16, fill: "#d62728", "pointer-events": "none"});
    }
  }
}

function drawMap() {
  const [l, h] = SP.head, m = CLIP.matrices[l][h], P = CLIP.maps[l][h], Tq = P.Tq, F = P.T, fs = CLIP.frame_seconds;
  const cv = $("cross-map"), px = Math.max(1, Math.min(8, Math.floor(900 / F))), rh = 16, pad = 100, top = 18;
  $("cross-title").textContent = `Cross-attention L${l}.H${h}: transcript tokens × the clip's time`;
  cv.width = pad + F * px + 10; cv.height = top + Tq * rh + 24; const ctx = cv.getContext("2d");
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, cv.width, cv.height);
  for (let i = 0; i < Tq; i++) for (let j = 0; j < F; j++) {
    ctx.fillStyle = AR.viridis(Math.sqrt(m[i * F + j])); ctx.fillRect(pad + j * px, top + i * rh, px, rh); }
  ctx.strokeStyle = "rgba(255,255,255,0.8)"; ctx.fillStyle = "#333"; ctx.font = "10px system-ui, sans-serif";
  for (const w of CLIP.words) { const x = pad + (w.start / fs) * px;
    ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + Tq * rh); ctx.stroke(); ctx.fillText(w.word, x + 2, top - 5); }
  ctx.textAlign = "right"; CLIP.tokens.forEach((t, i) => ctx.fillText(t.slice(0, 14), pad - 4, top + i * rh + 12));
  ctx.textAlign = "left"; ctx.fillText(`0 s … ${(F * fs).toFixed(2)} s`, pad, top + Tq * rh + 14);
  ctx.strokeStyle = "#d62728"; ctx.lineWidth = 2;
  for (const c of SP.cuts) if (c.kind === "routes" && c.layer === l && (c.head === null || c.head === h))
    ctx.strokeRect(pad + (c.start / fs) * px, top + c.row * rh + 1, ((c.end - c.start) / fs) * px, rh - 2);
  const at = ev => { const r = cv.getBoundingClientRect(), sx = cv.width / r.width, sy = cv.height / r.height;
    return [Math.floor(((ev.clientY - r.top) * sy - top) / rh), Math.floor(((ev.clientX - r.left) * sx - pad) / px)]; };
  cv.onmousemove = ev => { const [i, j] = at(ev);
    if (i < 0 || i >= Tq || j < 0 || j >= F) return AR.hideTip(); const w = wordAt(j * fs);
    AR.showTip(ev, `row “${CLIP.tokens[i]}” → ${(j * fs).toFixed(2)} s${w ? ` (“${w.word}”)` : ""}\nweight ${m[i * F + j].toFixed(4)}`); };
  cv.onmouseleave = AR.hideTip;
  cv.onclick = ev => { const [i, j] = at(ev); if (i < 0 || i >= Tq || j < 0 || j >= F) return;
    const t = j * fs, w = wordAt(t), span = w ? [w.start, w.end] : [Math.max(0, t - 0.1), Math.min(F * fs, t + 0.1)];
    SP.cuts.push({kind: "routes", layer: l, head: ev.shiftKey ? null : h, row: i, start: span[0], end: span[1]});
    drawMap(); runCuts(); speechSave(); };
}

async function runCuts() {
  const ol = $("clip-cuts"); ol.innerHTML = "";
  SP.cuts.forEach(c => html("li", {}, ol, cutSaid(c)));
  const r = SP.cuts.length ? await api("clipcut", {clip: SP.clip, text: SP.text, cuts: SP.cuts}) : null;
  const t = $("clip-rows"); t.innerHTML = ""; const hd = html("tr", {}, t);
  for (const s of ["token", "log p before", "after", "Δ"]) html("th", {}, hd, s);
  CLIP.tokens.forEach((tok, i) => { const tr = html("tr", {}, t); html("td", {}, tr, `“${tok}”`);
    html("td", {class: "num"}, tr, CLIP.logprobs[i].toFixed(3));
    html("td", {class: "num"}, tr, r ? r.after[i].toFixed(3) : "");
    const d = html("td", {class: "num delta"}, tr, r ? (r.delta[i] >= 0 ? "+" : "") + r.delta[i].toFixed(3) : "");
    if (r && Math.abs(r.delta[i]) > 0.1) d.style.color = "#d62728"; });
  $("clip-transcripts").textContent = r ? `before: “${r.transcript.before}” · after the cuts: “${r.transcript.after}”`
    : `“${CLIP.transcript}” — click the map to cut a route`;
  document.body.dataset.clipcut = r ? String(SP.cuts.length) : "0";
}

function startSpeech() {
  $("text-mode").hidden = true; $("pair-mode").hidden = true; $("speech-mode").hidden = false;
  $("tab-text").hidden = true; $("tab-pair").hidden = true;
  $("subtitle").textContent = `a speech model: ${INFO.cross_layers} cross-attention layers × ${INFO.heads} heads`;
  for (const c of INFO.clips) html("option", {value: c.name}, $("clip"), c.text ? `${c.name}: “${c.text}”` : c.name);
  const restored = speechLoad();
  $("clip").value = SP.clip || INFO.default_clip; $("clip-text").value = SP.text || "";
  $("run-clip").addEventListener("click", () => { SP.cuts = []; readClip(); });
  $("clip-undo").addEventListener("click", () => { SP.cuts.pop(); drawCrossGrid(); drawMap(); runCuts(); speechSave(); });
  $("clip-clear").addEventListener("click", () => { SP.cuts = []; drawCrossGrid(); drawMap(); runCuts(); speechSave(); });
  $("clip-cut-head").addEventListener("click", () => { if (!SP.head) return;
    SP.cuts.push({kind: "head", layer: SP.head[0], head: SP.head[1]}); drawCrossGrid(); runCuts(); speechSave(); });
  if (restored && SP.clip) readClip(); else document.body.dataset.ready = "idle";
}
if (INFO.kind === "speech") startSpeech();
