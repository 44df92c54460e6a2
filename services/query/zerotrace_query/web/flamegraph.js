// zerotrace flame graph page: reads /api/v1/profiles/{catalog,flamegraph,diff} and draws an
// icicle (root on top) of absolutely placed divs. Click zooms into a frame (its ancestors stay on
// top, click one to zoom out), search highlights, the tooltip gives self/total in the profile's
// unit, and the diff view colours each frame by how much it grew against the period before.
// Times are ns since the epoch: BigInt, since they exceed a double's exact integers.
"use strict";

(function () {
  const { $, getJson, showBanner } = zt;
  const ROW = 18;
  const MIN_PX = 0.6; // narrower frames are not drawn (they would be invisible anyway)
  const RANGES = { "5m": 300n, "15m": 900n, "1h": 3600n, "6h": 21600n, "24h": 86400n, "7d": 604800n };
  const PICKERS = ["service", "node", "pid", "thread"];
  const KINDS = [
    ["py:", "Python", [32, 90, 62]],
    ["native:", "native", [8, 80, 60]],
    ["cuda:", "CUDA", [140, 55, 52]],
    ["kernel:", "kernel", [200, 60, 66]],
    ["thread:", "thread", [220, 10, 78]],
  ];
  const state = { data: null, root: null, focus: null, mode: "flame", custom: null, loading: 0 };

  // --- values and units --------------------------------------------------------------------
  function fmtNs(ns) {
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(a >= 1e11 ? 0 : 2) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(1) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
    return Math.round(ns) + " ns";
  }
  function fmtBytes(b) {
    const names = ["B", "KiB", "MiB", "GiB", "TiB"];
    let x = Math.abs(b);
    let i = 0;
    while (x >= 1024 && i < names.length - 1) { x /= 1024; i += 1; }
    return (b < 0 ? "-" : "") + (i ? x.toFixed(1) : String(Math.round(x))) + " " + names[i];
  }
  function fmtValue(v) {
    const unit = state.data ? state.data.unit : "count";
    if (unit === "nanoseconds") return fmtNs(v);
    if (unit === "bytes") return fmtBytes(v);
    const word = state.data && state.data.type === "GPU_LAUNCH" ? "launches" : "samples";
    return Math.round(v).toLocaleString("en-US") + " " + word;
  }
  function pct(v, of) { return of ? ((100 * v) / of).toFixed(v && Math.abs(v) < of / 1000 ? 3 : 1) + "%" : "–"; }

  function kindOf(name) { return KINDS.find((k) => name.startsWith(k[0])) || null; }
  function hash(text) {
    let h = 0;
    for (let i = 0; i < text.length; i += 1) h = (h * 31 + text.charCodeAt(i)) | 0;
    return Math.abs(h);
  }
  function colour(node) {
    if (state.mode === "diff") {
      const scale = Math.max(node.total, node.base_total, 1);
      const share = Math.max(-1, Math.min(1, node.delta / scale));
      const light = 92 - Math.round(Math.abs(share) * 42);
      return share >= 0 ? `hsl(0, 78%, ${light}%)` : `hsl(215, 78%, ${light}%)`;
    }
    const kind = kindOf(node.name);
    const [h, s, l] = kind ? kind[2] : [40, 10, 80];
    const jitter = hash(node.name) % 12;
    return `hsl(${h + (jitter % 6) - 3}, ${s}%, ${l + jitter / 2 - 3}%)`;
  }

  // --- the URL is the state ------------------------------------------------------------------
  function readUrl() {
    const q = new URLSearchParams(location.search);
    for (const id of ["type", "frame", "mode", ...PICKERS]) {
      if (!q.get(id)) continue;
      ensureOption($(id), q.get(id));
      $(id).value = q.get(id);
    }
    if (q.get("range") && RANGES[q.get("range")]) $("range").value = q.get("range");
    $("group").checked = q.get("group") === "thread";
    if (q.get("from") && q.get("to")) {
      state.custom = { from: q.get("from"), to: q.get("to"), base_from: q.get("base_from"), base_to: q.get("base_to") };
      $("range").value = "custom";
    }
  }
  function ensureOption(select, value) {
    if (select.tagName !== "SELECT" || [...select.options].some((o) => o.value === value)) return;
    const option = document.createElement("option");
    option.value = option.textContent = value;
    select.appendChild(option);
  }
  function controls() {
    const p = { type: $("type").value, frame: $("frame").value.trim(), mode: $("mode").value };
    for (const id of PICKERS) p[id] = $(id).value;
    p.group = $("group").checked;
    return p;
  }
  function timeWindow() {
    if (state.custom && $("range").value === "custom") {
      const c = state.custom;
      const span = BigInt(c.to) - BigInt(c.from);
      return {
        from: c.from, to: c.to,
        base_from: c.base_from || String(BigInt(c.from) - span), base_to: c.base_to || c.from,
      };
    }
    const now = BigInt(Date.now()) * 1000000n;
    const span = RANGES[$("range").value] * 1000000000n;
    return { from: String(now - span), to: String(now), base_from: String(now - 2n * span), base_to: String(now - span) };
  }
  function query(p, tw, withBase) {
    const q = new URLSearchParams({ type: p.type });
    for (const id of PICKERS) if (p[id]) q.set(id, p[id]);
    if (p.frame) q.set("frame", p.frame);
    if (p.group) q.set("group", "thread");
    q.set("from", tw.from);
    q.set("to", tw.to);
    if (withBase) { q.set("base_from", tw.base_from); q.set("base_to", tw.base_to); }
    return q;
  }
  function writeUrl(p, tw) {
    const q = new URLSearchParams();
    for (const id of ["type", "frame", "mode", ...PICKERS]) if (p[id] && !(id === "mode" && p[id] === "flame") && !(id === "type" && p[id] === "ON_CPU")) q.set(id, p[id]);
    if (p.group) q.set("group", "thread");
    if ($("range").value === "custom") {
      for (const k of ["from", "to", "base_from", "base_to"]) q.set(k, tw[k]);
    } else if ($("range").value !== "15m") q.set("range", $("range").value);
    zt.replaceQuery(q);
  }

  // --- loading -------------------------------------------------------------------------------
  async function load() {
    const ticket = (state.loading += 1);
    const p = controls();
    const tw = timeWindow();
    writeUrl(p, tw);
    const diff = p.mode === "diff";
    const path = diff ? "/api/v1/profiles/diff" : "/api/v1/profiles/flamegraph";
    const catalogQuery = { type: p.type, from: tw.from, to: tw.to };
    try {
      const [catalog, data] = await Promise.all([
        getJson("/api/v1/profiles/catalog", catalogQuery), getJson(path, Object.fromEntries(query(p, tw, diff)))]);
      if (ticket !== state.loading) return; // a newer load started meanwhile
      fillPickers(catalog);
      state.mode = diff ? "diff" : "flame";
      show(data);
      const warn = data.truncated ? data.warning : data.dropped ? `${data.dropped.toLocaleString("en-US")} samples or allocations were dropped while profiling (counted, not shown).` : "";
      showBanner(warn, true);
      $("status").innerHTML = '<span class="dot"></span>';
      $("status").append(`updated ${new Date().toLocaleTimeString("en-GB")} · ${data.windows} windows`);
    } catch (err) {
      if (ticket !== state.loading) return;
      showBanner(`Could not load the profile: ${err.message}`, false);
      $("status").innerHTML = '<span class="dot down"></span>';
      $("status").append(`failed ${new Date().toLocaleTimeString("en-GB")}`);
    }
  }
  function fillPickers(catalog) {
    const lists = { service: catalog.services, node: catalog.nodes, pid: catalog.pids.filter(Boolean), thread: catalog.threads };
    for (const id of PICKERS) {
      const select = $(id);
      const keep = select.value;
      while (select.options.length > 1) select.remove(1);
      for (const v of lists[id]) ensureOption(select, String(v));
      if (keep) ensureOption(select, keep);
      select.value = keep;
    }
    for (const option of $("type").options) {
      option.textContent = option.textContent.replace(/ ·.*$/, "") + (catalog.types.includes(option.value) ? " · data" : "");
    }
  }

  // --- the tree ------------------------------------------------------------------------------
  function link(node, parent, depth) {
    node.parent = parent;
    node.depth = depth;
    for (const child of node.children) link(child, node, depth + 1);
  }
  function show(data) {
    state.data = data;
    state.root = data.root;
    link(state.root, null, 0);
    state.focus = state.root;
    const empty = !data.total && (!data.base || !data.base.total);
    $("empty").hidden = !empty;
    $("content").hidden = empty;
    legend();
    draw();
    topTable();
  }
  function legend() {
    const box = $("legend");
    box.textContent = "";
    const items = state.mode === "diff"
      ? [["hsl(0, 78%, 55%)", "grew against the period before"], ["hsl(215, 78%, 55%)", "shrank"], ["hsl(0, 78%, 92%)", "about the same"], ["", state.data && state.data.normalized ? "width: this period; the period before scaled to its total" : "width: this period; values as measured (snapshots)"]]
      : KINDS.map((k) => [`hsl(${k[2][0]}, ${k[2][1]}%, ${k[2][2]}%)`, k[1]]);
    for (const [bg, text] of items) {
      const item = document.createElement("span");
      item.className = "item";
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = bg;
      if (bg) item.append(swatch);
      item.append(text);
      box.append(item);
    }
  }
  function searchTerm() { return $("search").value.trim().toLowerCase(); }

  function draw() {
    const box = $("flame");
    box.textContent = "";
    const root = state.root;
    if (!root || !root.total) {
      const none = document.createElement("div");
      none.className = "nodata";
      none.textContent = "No samples in this range for these filters.";
      box.append(none);
      box.style.height = "";
      crumbs(0);
      return;
    }
    const width = box.clientWidth;
    const focus = state.focus;
    const term = searchTerm();
    const path = [];
    for (let n = focus.parent; n; n = n.parent) path.unshift(n);
    let maxRow = 0;
    let matched = 0;
    const frag = document.createDocumentFragment();
    const add = (node, x, row, w, cls) => {
      const div = document.createElement("div");
      div.className = "frame" + cls;
      div.style.left = x.toFixed(1) + "px";
      div.style.top = row * ROW + "px";
      div.style.width = w.toFixed(1) + "px";
      div.style.background = colour(node);
      div.__node = node;
      if (w > 28) div.textContent = node.name;
      if (term && node.name.toLowerCase().includes(term)) div.classList.add("match");
      frag.append(div);
      maxRow = Math.max(maxRow, row);
    };
    path.forEach((node, row) => add(node, 0, row, width, " ancestor"));
    const scale = width / focus.total;
    const place = (node, x, row, inMatch) => {
      const w = node.total * scale;
      if (w < MIN_PX) return;
      const hit = term && node.name.toLowerCase().includes(term);
      if (hit && !inMatch) matched += node.total;
      add(node, x, row, w, "");
      let cx = x;
      for (const child of node.children) {
        place(child, cx, row + 1, inMatch || hit);
        cx += child.total * scale;
      }
    };
    place(focus, 0, path.length, false);
    box.append(frag);
    box.style.height = (maxRow + 1) * ROW + 4 + "px";
    crumbs(matched);
  }
  function crumbs(matched) {
    const box = $("crumbs");
    box.textContent = "";
    const d = state.data;
    if (!d) return;
    const total = document.createElement("span");
    total.className = "total";
    total.textContent = `${fmtValue(d.total)} in all`;
    box.append(total);
    if (state.mode === "diff" && d.base) box.append(` · base period ${fmtValue(d.base.total)} (${d.base.windows} windows)`);
    if (state.focus && state.focus !== state.root) {
      const muted = document.createElement("span");
      muted.className = "muted";
      muted.textContent = ` · zoomed into ${state.focus.name} (${pct(state.focus.total, d.total)})`;
      box.append(muted);
    }
    const term = searchTerm();
    $("search-info").textContent = term ? `matches ${pct(matched, state.focus ? state.focus.total : 0)} (${fmtValue(matched)})` : "";
  }
  function topTable() {
    const bySelf = new Map();
    const byTotal = new Map();
    const walk = (node, onPath) => {
      if (node.parent) {
        bySelf.set(node.name, (bySelf.get(node.name) || 0) + node.self);
        if (!onPath.has(node.name)) byTotal.set(node.name, (byTotal.get(node.name) || 0) + node.total);
      }
      const next = new Set(onPath).add(node.name);
      for (const child of node.children) walk(child, next);
    };
    if (state.root) walk(state.root, new Set());
    const rows = [...bySelf.entries()].filter((e) => e[1] > 0).sort((a, b) => b[1] - a[1]).slice(0, 20);
    const total = state.data ? state.data.total : 0;
    const body = $("top").querySelector("tbody");
    body.textContent = "";
    for (const [name, self] of rows) {
      const tr = document.createElement("tr");
      const cells = [name, fmtValue(self), pct(self, total), fmtValue(byTotal.get(name) || 0), pct(byTotal.get(name) || 0, total)];
      cells.forEach((text, i) => {
        const td = document.createElement("td");
        td.className = i ? "num" : "frame-name";
        td.textContent = text;
        if (!i) td.title = "search for this frame";
        tr.append(td);
      });
      body.append(tr);
    }
    $("top-count").textContent = rows.length ? `top ${rows.length}` : "";
  }

  // --- interaction ---------------------------------------------------------------------------
  function tooltipFor(node, x, y) {
    const tip = $("tooltip");
    const d = state.data;
    const focusTotal = state.focus ? state.focus.total : d.total;
    tip.textContent = "";
    const name = document.createElement("div");
    name.className = "name";
    name.textContent = node.name;
    tip.append(name);
    const line = (label, text, cls) => {
      const row = document.createElement("div");
      row.className = "row" + (cls ? " " + cls : "");
      row.textContent = `${label}: ${text}`;
      tip.append(row);
    };
    line("total", `${fmtValue(node.total)} (${pct(node.total, d.total)} of all, ${pct(node.total, focusTotal)} of view)`);
    line("self", `${fmtValue(node.self)} (${pct(node.self, d.total)})`);
    if (state.mode === "diff") {
      line("base period", `${fmtValue(node.base_total)} total, ${fmtValue(node.base_self)} self`);
      const sign = node.delta > 0 ? "+" : "";
      line("change", `${sign}${fmtValue(node.delta)} (${sign}${pct(node.delta, d.total)})`, node.delta > 0 ? "grow" : node.delta < 0 ? "shrink" : "");
    }
    zt.placeTip(tip, x, y, 16);
  }
  function bind() {
    const flame = $("flame");
    flame.addEventListener("click", (ev) => {
      const node = ev.target.__node;
      if (!node) return;
      state.focus = node === state.focus && node.parent ? node.parent : node;
      draw();
    });
    flame.addEventListener("mousemove", (ev) => {
      const node = ev.target.__node;
      if (node) tooltipFor(node, ev.clientX, ev.clientY);
      else $("tooltip").hidden = true;
    });
    flame.addEventListener("mouseleave", () => { $("tooltip").hidden = true; });
    $("search").addEventListener("input", draw);
    $("reset").addEventListener("click", () => { state.focus = state.root; draw(); });
    $("top").addEventListener("click", (ev) => {
      if (ev.target.classList.contains("frame-name")) { $("search").value = ev.target.textContent; draw(); }
    });
    document.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape" && state.root) { state.focus = state.root; draw(); }
    });
    $("filters").addEventListener("change", (ev) => {
      if (ev.target.id === "range" && ev.target.value !== "custom") state.custom = null;
      load();
    });
    // Enter in the frame box submits the form: load instead of navigating.
    $("filters").addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
    $("refresh").addEventListener("click", load);
    zt.onResize(draw, 100);
  }

  readUrl();
  bind();
  load();
})();
