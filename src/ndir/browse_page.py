"""The retrieval browser's page (:mod:`ndir.browse`): ``index.html`` with its style and
script inline. It reads ``data.js`` beside it and nothing else from outside its folder:
no font, script or style from a network, so it opens offline from the file system.

Views (tabs, also in the page's address ``#view=...&method=...&a=...&b=...``):

* **Queries**: every query and its top k under the method picked from the menu, true
  matches framed green and ticked, others red and crossed, the rank of every true
  match (those beyond the top k shown after it) and the query's AP;
* **Compare**: two methods, the queries sorted by AP(A) - AP(B), largest first: where
  A beats B at the top, where it loses at the bottom;
* **Summary**: each method's mAP (%), as the tables print it (2 decimals);
* **Frontier** (runs with the seeds): test mAP against multiply-adds and bytes, a
  point a link to its method's retrievals where the page has it.

Keys: the tabs with the arrow keys, ``j``/``k`` the next / previous query, ``[``/``]``
the previous / next method; every control is a native link, button or menu.
"""

from ndir.browse import DATA_FILE

STYLE = r"""
:root { --match: #1a9850; --miss: #d73027; --unknown: #969696; --query: #2166ac; --fg: #1b1b1b; --muted: #555; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
  margin: 0; line-height: 1.35; background: #fff; }
header { padding: 0.6rem 1rem 0; border-bottom: 1px solid #ccc; position: sticky; top: 0; background: #fff;
  z-index: 2; }
h1 { font-size: 1.2rem; margin: 0 0 0.2rem; }
.subtitle { margin: 0 0 0.4rem; color: var(--muted); font-size: 0.9rem; }
[role=tablist] { display: flex; gap: 0.25rem; }
[role=tab] { font: inherit; padding: 0.35rem 0.9rem; border: 1px solid #bbb; border-bottom: none; background: #f2f2f2;
  border-radius: 6px 6px 0 0; cursor: pointer; }
[role=tab][aria-selected=true] { background: #fff; font-weight: 600; border-color: #888; }
main { padding: 0.6rem 1rem 2rem; }
.controls { display: flex; flex-wrap: wrap; gap: 0.5rem 1.2rem; align-items: center; margin: 0.3rem 0 0.5rem; }
select, button.plain { font: inherit; padding: 0.2rem; max-width: 100%; }
.help { color: var(--muted); font-size: 0.85rem; margin: 0.2rem 0 0.6rem; }
:focus-visible { outline: 3px solid #f4a300; outline-offset: 2px; }
.skip { position: absolute; left: -999px; }
.skip:focus { left: 1rem; top: 0.5rem; background: #fff; padding: 0.3rem; z-index: 3; }
ol.queries { list-style: none; padding: 0; margin: 0; }
li.query { border-top: 1px solid #ddd; padding: 0.5rem 0; display: grid; grid-template-columns: 118px 1fr;
  gap: 0.6rem; }
li.query:focus { background: #fff8e1; }
/* Rows off screen are neither laid out nor painted until scrolled to: a switch of method stays fast at
   Holidays scale (hundreds of queries, thousands of thumbnails). */
li.query { content-visibility: auto; contain-intrinsic-size: auto 150px; }
.qinfo { font-size: 0.9rem; margin-bottom: 0.3rem; }
.qinfo .ap { font-weight: 600; }
.strip-label { font-size: 0.8rem; color: var(--muted); margin: 0.2rem 0; }
ol.strip { list-style: none; padding: 0; margin: 0; display: flex; flex-wrap: wrap; gap: 6px; }
ol.strip li { width: 104px; text-align: center; font-size: 0.75rem; }
.thumb { display: block; width: 104px; height: 104px; object-fit: contain; background: #eee;
  border: 4px solid var(--unknown); }
.query-thumb { border-color: var(--query); width: 112px; height: 112px; }
.match .thumb { border-color: var(--match); }
.miss .thumb { border-color: var(--miss); }
.beyond .thumb { border-style: dashed; }
.mark-match { color: var(--match); font-weight: 700; }
.mark-miss { color: var(--miss); font-weight: 700; }
.name { display: block; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; color: var(--muted); }
.diff-pos { color: var(--match); font-weight: 600; }
.diff-neg { color: var(--miss); font-weight: 600; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.2rem 0.6rem; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody th { font-weight: 600; background: #f6f6f6; }
.frontier svg { max-width: 100%; height: auto; font-size: 11px; }
.panels { display: flex; flex-wrap: wrap; gap: 1rem; }
.panel { margin: 0; max-width: 560px; font-size: 0.85rem; }
ol.front { margin: 0.2rem 0; padding-left: 1.6rem; }
#compare-list .thumb { width: 80px; height: 80px; border-width: 3px; }
#compare-list ol.strip li { width: 80px; }
#compare-list .query-thumb { width: 96px; height: 96px; }
.frontier a:focus .pt, .frontier a:hover .pt { stroke: #000; stroke-width: 2.5; }
.legend { display: flex; flex-wrap: wrap; gap: 0.2rem 1rem; font-size: 0.8rem; margin: 0.4rem 0; padding: 0;
  list-style: none; }
.swatch { display: inline-block; width: 0.8rem; height: 0.8rem; vertical-align: middle; margin-right: 0.25rem; }
#no-data { margin: 2rem 1rem; padding: 1rem; border: 2px solid var(--miss); max-width: 50rem; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var D = window.NDIR_BROWSE;
  var $ = function (id) { return document.getElementById(id); };
  var page = (window.NDIR_BROWSER = { ready: false, renders: [], error: null });

  function fail(message) {
    page.error = message;
    $("no-data").hidden = false;
    $("no-data-text").textContent = message;
    $("views").hidden = true;
  }
  if (!D) {
    fail("This page could not load its data (data.js). Open index.html from its own folder " +
         "(results/browse/ of the run, or the folder given to ndir query --browse), beside data.js " +
         "and thumbs/; a copy of the page alone, such as the one inside the HTML report, has neither.");
    return;
  }
  if (D.format !== 1) { fail("data.js is of format " + D.format + "; this page reads format 1."); return; }

  var methods = D.methods, names = D.images.names, thumbs = D.images.thumbs, groups = D.images.groups;
  var queries = D.queries, byKey = {};
  methods.forEach(function (m, i) { m.index = i; byKey[m.key] = m; });
  var state = { view: "queries", method: methods[0].key, order: "image", a: D.compare[0], b: D.compare[1] };

  function esc(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function pct(ap) { return ap === null || ap === undefined ? "unknown" : (100 * ap).toFixed(1) + " %"; }
  function points(d) {
    if (isNaN(d)) return "unknown";
    return (d > 0 ? "+" : d < 0 ? "\u2212" : "\u00b1") + Math.abs(100 * d).toFixed(1);
  }

  // ---------------------------------------------------------------- the address
  function readHash() {
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    ["view", "method", "order", "a", "b"].forEach(function (name) {
      var value = params.get(name);
      if (value === null) return;
      if (name === "view" && !$("view-" + value)) return;
      if ((name === "method" || name === "a" || name === "b") && !byKey[value]) return;
      state[name] = value;
    });
  }
  function writeHash() {
    var params = new URLSearchParams();
    params.set("view", state.view);
    params.set("method", state.method);
    params.set("a", state.a);
    params.set("b", state.b);
    if (state.order !== "image") params.set("order", state.order);
    var hash = "#" + params.toString();
    if (location.hash === hash) return;
    try { history.replaceState(null, "", hash); } catch (error) { location.hash = hash; }
  }
  function link(changes) {
    var params = new URLSearchParams();
    var next = Object.assign({}, state, changes);
    ["view", "method", "a", "b"].forEach(function (name) { params.set(name, next[name]); });
    return "#" + params.toString();
  }

  // ---------------------------------------------------------------- menus
  function fillMenu(select) {
    var html = "", group = null;
    methods.forEach(function (m) {
      if (m.group !== group) {
        if (group !== null) html += "</optgroup>";
        group = m.group;
        html += '<optgroup label="' + esc(group) + '">';
      }
      var map = m.map === null ? "" : " \u2014 mAP " + m.map_text + " %";
      html += '<option value="' + esc(m.key) + '">' + esc(m.label + map) + "</option>";
    });
    select.innerHTML = html + (group !== null ? "</optgroup>" : "");
  }

  // ---------------------------------------------------------------- a query's results
  function thumb(image, alt, extra) {
    return '<img class="thumb' + (extra || "") + '" src="' + esc(thumbs[image]) + '" alt="' + esc(alt) +
      '" loading="lazy" decoding="async" width="104" height="104">';
  }
  function hit(image, rank, relevant, beyond) {
    var cls = relevant === null ? "unknown" : relevant ? "match" : "miss";
    var mark = relevant === null ? "" : relevant ? ' <span class="mark-match" aria-hidden="true">\u2713</span>'
      : ' <span class="mark-miss" aria-hidden="true">\u2717</span>';
    var say = relevant === null ? "" : relevant ? ", true match" : ", not a match";
    return '<li class="' + cls + (beyond ? " beyond" : "") + '">' +
      thumb(image, "rank " + (rank + 1) + ": " + names[image] + say) +
      '<span>' + (rank + 1) + mark + '</span><span class="name">' + esc(names[image]) + "</span></li>";
  }
  function strip(m, q, label) {
    var top = m.top[q], ranks = m.matches ? m.matches[q] : null, found = {}, html = "";
    if (ranks) ranks.forEach(function (r) { found[r] = true; });
    top.forEach(function (image, r) { html += hit(image, r, ranks ? !!found[r] : null, false); });
    var beyond = "";
    if (ranks) {
      ranks.forEach(function (r, j) { if (r >= top.length) beyond += hit(m.match_images[q][j], r, true, true); });
    }
    return '<p class="strip-label">' + esc(label) + "</p>" +
      '<ol class="strip" aria-label="' + esc(label) + '">' + html + beyond + "</ol>";
  }
  function matchText(m, q) {
    if (!m.matches) return "relevance unknown (no groups)";
    var ranks = m.matches[q];
    if (!ranks.length) return "no true match in the set";
    return ranks.length + (ranks.length === 1 ? " true match at rank " : " true matches at ranks ") +
      ranks.map(function (r) { return r + 1; }).join(", ");
  }
  function queryHead(q) {
    var image = queries[q];
    var group = groups && groups[image] !== null ? ", group " + groups[image] : "";
    return "Query " + (q + 1) + " of " + queries.length + ": " + names[image] + group;
  }
  function queryThumb(q) {
    return thumb(queries[q], "query " + (q + 1) + ": " + names[queries[q]], " query-thumb");
  }

  // ---------------------------------------------------------------- views
  function renderQueries() {
    var m = byKey[state.method], order = queries.map(function (_, q) { return q; });
    if (state.order === "ap" && m.ap) {
      order.sort(function (x, y) { return m.ap[x] - m.ap[y] || x - y; });
    }
    var html = "";
    order.forEach(function (q) {
      html += '<li class="query" tabindex="-1" data-query="' + q + '">' + queryThumb(q) + "<div>" +
        '<p class="qinfo">' + esc(queryHead(q)) + ' \u00b7 <span class="ap">AP ' + pct(m.ap ? m.ap[q] : null) +
        "</span> \u00b7 " + esc(matchText(m, q)) + "</p>" +
        strip(m, q, "Top " + m.top[q].length + " under " + m.label) + "</div></li>";
    });
    var list = $("queries");
    list.innerHTML = html;
    list.dataset.method = m.key;
    $("method-map").textContent = m.map === null ? "" : "mAP " + m.map_text + " % over " +
      queries.length + " queries";
  }

  function compareOrder(a, b) {
    var order = queries.map(function (_, q) { return q; });
    var diff = order.map(function (q) { return a.ap[q] === null || b.ap[q] === null ? null : a.ap[q] - b.ap[q]; });
    order.sort(function (x, y) {
      if (diff[x] === null || diff[y] === null) return (diff[x] === null) - (diff[y] === null) || x - y;
      return diff[y] - diff[x] || x - y;
    });
    return { order: order, diff: diff };
  }
  function renderCompare() {
    var a = byKey[state.a], b = byKey[state.b], list = $("compare-list");
    if (!a.ap || !b.ap) {
      $("compare-summary").textContent = "No AP to compare: the images have no groups.";
      list.innerHTML = "";
      return;
    }
    var sorted = compareOrder(a, b), above = 0, below = 0, html = "";
    sorted.diff.forEach(function (d) { if (d > 0) above++; else if (d < 0) below++; });
    sorted.order.forEach(function (q) {
      var d = sorted.diff[q];
      if (d === null) d = NaN;
      html += '<li class="query" tabindex="-1" data-query="' + q + '" data-diff="' + d + '">' + queryThumb(q) +
        "<div>" + '<p class="qinfo">' + esc(queryHead(q)) + " \u00b7 AP A " + pct(a.ap[q]) + ", B " + pct(b.ap[q]) +
        ' \u00b7 <span class="' + (d > 0 ? "diff-pos" : d < 0 ? "diff-neg" : "") + '">A \u2212 B ' + points(d) +
        " points</span></p>" + strip(a, q, "A: " + a.label + " (AP " + pct(a.ap[q]) + ")") +
        strip(b, q, "B: " + b.label + " (AP " + pct(b.ap[q]) + ")") + "</div></li>";
    });
    list.innerHTML = html;
    list.dataset.pair = a.key + "|" + b.key;
    var same = sorted.diff.filter(function (d) { return d === 0; }).length;
    var maps = a.map === null || b.map === null ? "" : "; mAP A " + a.map_text + " %, B " + b.map_text +
      " % (difference " + (a.map - b.map >= 0 ? "+" : "\u2212") + Math.abs(a.map - b.map).toFixed(2) + " points)";
    $("compare-summary").textContent = "A above B on " + above + " of " + queries.length + " queries, below on " +
      below + ", equal on " + same + maps + ". Queries where A wins most come first, where it loses most last.";
  }

  function renderSummary() {
    var html = "", group = null;
    methods.forEach(function (m) {
      if (m.group !== group) {
        group = m.group;
        html += '<tr><th colspan="6" scope="rowgroup">' + esc(group) + "</th></tr>";
      }
      html += '<tr data-key="' + esc(m.key) + '" data-family="' + esc(m.family) + '" data-input="' + esc(m.input) +
        '" data-r="' + (m.R === null ? "" : m.R) + '" data-tau="' + (m.tau === null ? "" : m.tau) + '">' +
        '<td><a href="' + esc(link({ view: "queries", method: m.key })) + '">' + esc(m.label) + "</a></td>" +
        "<td>" + esc(m.family) + "</td><td>" + esc(m.input) + '</td><td class="num">' + (m.R === null ? "" : m.R) +
        '</td><td class="num">' + (m.tau === null ? "" : m.tau) + '</td><td class="num map">' +
        (m.map === null ? "" : m.map_text) + "</td></tr>";
    });
    $("summary-rows").innerHTML = html;
    $("notes").innerHTML = D.notes.map(function (n) { return "<p>" + esc(n) + "</p>"; }).join("");
  }

  // ---------------------------------------------------------------- the frontier
  var SVG_W = 560, SVG_H = 420, M = { left: 56, right: 14, top: 28, bottom: 44 };
  function marker(shape, x, y, colour) {
    var r = 5, common = ' class="pt" fill="' + esc(colour) + '" stroke="#333" stroke-width="0.6"';
    var poly = function (pts) {
      return '<polygon points="' + pts.map(function (p) { return (x + p[0]).toFixed(1) + "," + (y + p[1]).toFixed(1); })
        .join(" ") + '"' + common + "/>";
    };
    if (shape === "s") {
      return '<rect x="' + (x - r) + '" y="' + (y - r) + '" width="' + 2 * r + '" height="' + 2 * r + '"' +
        common + "/>";
    }
    if (shape === "D") return poly([[0, -r - 1], [r + 1, 0], [0, r + 1], [-r - 1, 0]]);
    if (shape === "^") return poly([[0, -r - 1], [r + 1, r], [-r - 1, r]]);
    if (shape === "v") return poly([[0, r + 1], [r + 1, -r], [-r - 1, -r]]);
    if (shape === "<") return poly([[-r - 1, 0], [r, -r - 1], [r, r + 1]]);
    if (shape === ">") return poly([[r + 1, 0], [-r, -r - 1], [-r, r + 1]]);
    if (shape === "P") return poly([[-2, -r], [2, -r], [2, -2], [r, -2], [r, 2], [2, 2], [2, r], [-2, r], [-2, 2],
      [-r, 2], [-r, -2], [-2, -2]]);
    return '<circle cx="' + x.toFixed(1) + '" cy="' + y.toFixed(1) + '" r="' + r + '"' + common + "/>";
  }
  function panel(F, c, letter) {
    var pts = F.points, unit = F.costs[c].unit;
    var xs = pts.map(function (p) { return Math.log10(p.costs[c]); }), ys = pts.map(function (p) { return p.map; });
    var x0 = Math.floor(Math.min.apply(null, xs)), x1 = Math.ceil(Math.max.apply(null, xs));
    if (x1 === x0) x1 = x0 + 1;
    var y0 = Math.floor(Math.min.apply(null, ys) / 5) * 5, y1 = Math.ceil((Math.max.apply(null, ys) + 1) / 5) * 5;
    if (y1 === y0) y1 = y0 + 5;
    var W = SVG_W - M.left - M.right, H = SVG_H - M.top - M.bottom;
    var X = function (v) { return M.left + (v - x0) / (x1 - x0) * W; };
    var Y = function (v) { return M.top + (y1 - v) / (y1 - y0) * H; };
    var svg = '<svg viewBox="0 0 ' + SVG_W + " " + SVG_H + '" width="' + SVG_W + '" height="' + SVG_H +
      '" role="group" aria-label="(' + letter + ") test mAP against " + esc(unit) + '">';
    svg += '<text x="' + M.left + '" y="16" font-weight="600">(' + letter + ") mAP against " + esc(unit) +
      "; Pareto front in black</text>";
    for (var e = x0; e <= x1; e++) {
      svg += '<line x1="' + X(e) + '" x2="' + X(e) + '" y1="' + M.top + '" y2="' + (M.top + H) + '" stroke="#ddd"/>' +
        '<text x="' + X(e) + '" y="' + (M.top + H + 16) + '" text-anchor="middle">10<tspan dy="-5" font-size="8">' +
        e + "</tspan></text>";
    }
    var step = y1 - y0 > 30 ? 10 : 5;
    for (var v = Math.ceil(y0 / step) * step; v <= Math.min(y1, 100); v += step) {
      svg += '<line x1="' + M.left + '" x2="' + (M.left + W) + '" y1="' + Y(v) + '" y2="' + Y(v) + '" stroke="#ddd"/>' +
        '<text x="' + (M.left - 6) + '" y="' + (Y(v) + 4) + '" text-anchor="end">' + v + "</text>";
    }
    svg += '<rect x="' + M.left + '" y="' + M.top + '" width="' + W + '" height="' + H +
      '" fill="none" stroke="#888"/>';
    svg += '<text x="' + (M.left + W / 2) + '" y="' + (SVG_H - 6) + '" text-anchor="middle">' + esc(unit) +
      " (log scale)</text>";
    svg += '<text transform="translate(14 ' + (M.top + H / 2) + ') rotate(-90)" text-anchor="middle">' +
      "test mAP (%)</text>";
    var front = pts.filter(function (p) { return p.front[c]; });
    front.sort(function (p, q) { return p.costs[c] - q.costs[c]; });
    if (front.length) {
      var path = "M" + X(Math.log10(front[0].costs[c])) + "," + Y(front[0].map);
      for (var i = 1; i < front.length; i++) {
        path += "H" + X(Math.log10(front[i].costs[c])) + "V" + Y(front[i].map);
      }
      svg += '<path d="' + path + '" fill="none" stroke="#000" stroke-width="1.2"/>';
    }
    pts.forEach(function (p) {
      var x = X(Math.log10(p.costs[c])), y = Y(p.map);
      var say = p.method + " (" + p.input + "): mAP " + p.map_text + " %, " +
        Math.round(p.costs[c]).toLocaleString("en") + " " + unit + (p.front[c] ? ", on the front" : "");
      var shape = (p.front[c] ? '<circle cx="' + x + '" cy="' + y + '" r="9" fill="none" stroke="#000"/>' : "") +
        marker(p.marker, x, y, p.colour);
      if (p.browse) {
        svg += '<a href="' + esc(link({ view: "queries", method: p.browse })) + '" data-browse="' + esc(p.browse) +
          '" aria-label="' + esc(say + "; open its retrievals") + '"><title>' + esc(say + " (click: its retrievals)") +
          "</title>" + shape + "</a>";
      } else {
        svg += '<g role="img" aria-label="' + esc(say + "; not in this browser") + '"><title>' +
          esc(say + " (not recomputed for this browser)") + "</title>" + '<g opacity="0.55">' + shape + "</g></g>";
      }
    });
    front.forEach(function (p, i) {
      var x = X(Math.log10(p.costs[c])), y = Y(p.map);
      svg += '<text x="' + (x - 8) + '" y="' + (y - 8) + '" text-anchor="end" font-weight="700" aria-hidden="true">' +
        (i + 1) + "</text>";
    });
    svg += "</svg>";
    var items = front.map(function (p) {
      var text = esc(p.method + " (" + p.input + "): " + p.map_text + " %, " +
        Math.round(p.costs[c]).toLocaleString("en") + " " + unit);
      return "<li>" + (p.browse ? '<a href="' + esc(link({ view: "queries", method: p.browse })) + '">' + text + "</a>"
        : text + " (not in this browser)") + "</li>";
    }).join("");
    return '<figure class="panel">' + svg + "<figcaption>The front by " + esc(unit) + ", cheapest first (the numbers " +
      'in the plot):<ol class="front">' + items + "</ol></figcaption></figure>";
  }
  function renderFrontier() {
    var F = D.frontier;
    if (!F) return;
    var html = '<div class="panels">';
    F.costs.forEach(function (_, c) { html += panel(F, c, "ab"[c] || String(c + 1)); });
    html += "</div>";
    var families = {}, inputs = {};
    F.points.forEach(function (p) { families[p.family] = p.colour; inputs[p.input] = p.marker; });
    html += '<ul class="legend" aria-label="colours: method families">' + Object.keys(families).map(function (f) {
      return '<li><span class="swatch" style="background:' + esc(families[f]) + '"></span>' + esc(f) + "</li>";
    }).join("") + "</ul>";
    html += '<ul class="legend" aria-label="markers: inputs">' + Object.keys(inputs).map(function (i) {
      return '<li><svg width="14" height="14" aria-hidden="true">' + marker(inputs[i], 7, 7, "#777") + "</svg> " +
        esc(i) + "</li>";
    }).join("") + "</ul>";
    $("frontier").innerHTML = html;
  }

  // ---------------------------------------------------------------- state
  var rendered = {};
  function render() {
    var started = performance.now();
    ["queries", "compare", "summary", "frontier"].forEach(function (view) {
      var active = view === state.view;
      $("tab-" + view).setAttribute("aria-selected", active ? "true" : "false");
      $("tab-" + view).tabIndex = active ? 0 : -1;
      $("view-" + view).hidden = !active;
    });
    $("method").value = state.method;
    $("order").value = state.order;
    $("compare-a").value = state.a;
    $("compare-b").value = state.b;
    var want = { queries: state.method + "|" + state.order, compare: state.a + "|" + state.b, summary: "",
      frontier: "" };
    var view = state.view;
    if (rendered[view] !== want[view]) {
      ({ queries: renderQueries, compare: renderCompare, summary: renderSummary, frontier: renderFrontier })[view]();
      rendered[view] = want[view];
    }
    writeHash();
    var ms = performance.now() - started;
    page.renders.push({ view: view, ms: ms });
    document.body.dataset.view = view;
    document.body.dataset.state = [state.view, state.method, state.order, state.a, state.b].join("|");
  }
  function set(changes) { Object.assign(state, changes); render(); }

  function moveQuery(list, by) {
    var items = list.querySelectorAll("li.query");
    if (!items.length) return;
    var active = document.activeElement;
    var current = active && active.closest ? active.closest("li.query") : null;
    var index = Array.prototype.indexOf.call(items, current);
    var next = items[Math.max(0, Math.min(items.length - 1, index < 0 ? 0 : index + by))];
    next.focus();
    next.scrollIntoView({ block: "nearest" });
  }
  function stepMethod(by) {
    var i = byKey[state.method].index + by;
    if (i >= 0 && i < methods.length) set({ method: methods[i].key });
  }

  $("title").textContent = D.title;
  $("subtitle").textContent = D.subtitle;
  document.title = D.title;
  ["method", "compare-a", "compare-b"].forEach(function (id) { fillMenu($(id)); });
  if (!D.frontier) $("tab-frontier").hidden = true;
  if (methods.length < 2) $("compare-note").textContent = "Only one method: A and B are the same.";
  $("method").addEventListener("change", function (e) { set({ method: e.target.value }); });
  $("order").addEventListener("change", function (e) { set({ order: e.target.value }); });
  $("compare-a").addEventListener("change", function (e) { set({ a: e.target.value }); });
  $("compare-b").addEventListener("change", function (e) { set({ b: e.target.value }); });
  $("swap").addEventListener("click", function () { set({ a: state.b, b: state.a }); });
  var tabs = Array.prototype.slice.call(document.querySelectorAll("[role=tab]"));
  tabs.forEach(function (tab) {
    tab.addEventListener("click", function () { set({ view: tab.id.replace("tab-", "") }); });
    tab.addEventListener("keydown", function (e) {
      var shown = tabs.filter(function (t) { return !t.hidden; }), i = shown.indexOf(tab);
      var to = { ArrowRight: shown[(i + 1) % shown.length], ArrowLeft: shown[(i - 1 + shown.length) % shown.length],
        Home: shown[0], End: shown[shown.length - 1] }[e.key];
      if (!to) return;
      e.preventDefault();
      set({ view: to.id.replace("tab-", "") });
      to.focus();
    });
  });
  document.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    var tag = e.target && e.target.tagName;
    if (tag === "SELECT" || tag === "INPUT" || tag === "TEXTAREA") return;
    var list = state.view === "queries" ? $("queries") : state.view === "compare" ? $("compare-list") : null;
    if ((e.key === "j" || e.key === "k") && list) {
      e.preventDefault();
      moveQuery(list, e.key === "j" ? 1 : -1);
    } else if ((e.key === "[" || e.key === "]") && state.view === "queries") {
      e.preventDefault();
      stepMethod(e.key === "]" ? 1 : -1);
    }
  });
  window.addEventListener("hashchange", function () { readHash(); render(); });
  readHash();
  render();
  page.ready = true;
  document.body.dataset.ready = "true";
})();
"""

BODY = """<a class="skip" href="#views">Skip to the results</a>
<header>
<h1 id="title">Retrieval browser</h1>
<p class="subtitle" id="subtitle"></p>
<div role="tablist" aria-label="Views">
<button role="tab" id="tab-queries" aria-controls="view-queries" aria-selected="true">Queries</button>
<button role="tab" id="tab-compare" aria-controls="view-compare" aria-selected="false">Compare two methods</button>
<button role="tab" id="tab-summary" aria-controls="view-summary" aria-selected="false">Summary</button>
<button role="tab" id="tab-frontier" aria-controls="view-frontier" aria-selected="false">Frontier</button>
</div>
</header>
<main id="views">
<section id="view-queries" role="tabpanel" aria-labelledby="tab-queries">
<div class="controls">
<label>Method <select id="method"></select></label>
<label>Order <select id="order"><option value="image">test order</option>
<option value="ap">AP, lowest first</option></select></label>
<span id="method-map"></span>
</div>
<p class="help">Each query (blue) and its top results: green and \u2713 a true match (a near duplicate), red and
\u2717 not; true matches ranked beyond the top follow, dashed. Keys: j / k next / previous query, [ / ] previous /
next method, \u2190 / \u2192 on the tabs.</p>
<ol class="queries" id="queries" aria-label="Queries and their results"></ol>
</section>
<section id="view-compare" role="tabpanel" aria-labelledby="tab-compare" hidden>
<div class="controls">
<label>A <select id="compare-a"></select></label>
<label>B <select id="compare-b"></select></label>
<button class="plain" id="swap" type="button">Swap A and B</button>
</div>
<p id="compare-summary"></p><p class="help" id="compare-note">Queries sorted by AP(A) \u2212 AP(B), largest
first. Keys: j / k next / previous query.</p>
<ol class="queries" id="compare-list" aria-label="Queries sorted by the difference of AP"></ol>
</section>
<section id="view-summary" role="tabpanel" aria-labelledby="tab-summary" hidden>
<p class="help">mAP (%) over the test queries of every method in the menu, as the run's tables print it.</p>
<table id="summary">
<thead><tr><th scope="col">Method</th><th scope="col">Family</th><th scope="col">Input</th>
<th scope="col" class="num">R</th><th scope="col" class="num">\u03c4</th><th scope="col" class="num">mAP (%)</th></tr>
</thead>
<tbody id="summary-rows"></tbody>
</table>
<div id="notes" class="help"></div>
</section>
<section id="view-frontier" role="tabpanel" aria-labelledby="tab-frontier" hidden>
<p class="help">Test mAP against the cost of a query and of a database image (the seeds comparison, as
results/figures/frontier.png). A point of a method in the menu opens its retrievals (Tab and Enter from the
keyboard); faded points are not recomputed here.</p>
<div id="frontier" class="frontier"></div>
</section>
</main>
<div id="no-data" role="alert" hidden><strong>No data.</strong> <span id="no-data-text"></span></div>
<noscript><p>This page needs JavaScript (it runs offline: nothing is loaded from the network).</p></noscript>
"""


def page_html():
    """The page, ``index.html``: it loads ``data.js`` from its own folder, then draws."""
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>ndir retrieval browser</title>\n"
        f"<style>{STYLE}</style>\n</head>\n<body>\n{BODY}"
        f'<script src="{DATA_FILE}"></script>\n<script>{SCRIPT}</script>\n</body>\n</html>\n'
    )
