// minitx attention viewer: behaviour. minitx/viz/viewer.py inlines this file into each
// attention.html it writes, after the maps' JSON (the element with id "attn-data").
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("attn-data").textContent);
  var DECIMALS = DATA.decimals;
  var kindSel = document.getElementById("kind");
  var layerSel = document.getElementById("layer");
  var headSel = document.getElementById("head");
  var table = document.getElementById("heatmap");
  var svg = document.getElementById("lines");
  var statusEl = document.getElementById("status");
  var readout = document.getElementById("readout");
  var compareTable = document.getElementById("compare");
  var comparePanel = document.getElementById("compare-panel");
  var compareTitle = document.getElementById("compare-title");
  var agreementEl = document.getElementById("agreement");
  var SVGNS = "http://www.w3.org/2000/svg";
  var VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
                 [31, 158, 137], [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37]];
  var current = null;  // {kind, layer, head, label, queries, keys, matrix, compare}
  var focusedQ = null;

  function colour(w) {
    var x = Math.min(1, Math.max(0, w)) * (VIRIDIS.length - 1);
    var i = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - i;
    var a = VIRIDIS[i], b = VIRIDIS[i + 1], c = [];
    for (var j = 0; j < 3; j++) c.push(Math.round(a[j] + f * (b[j] - a[j])));
    return "rgb(" + c.join(",") + ")";
  }
  function fmt(w) { return w.toFixed(DECIMALS); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;  // tokens are text, never markup
    return e;
  }
  function svgEl(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function setOptions(sel, options, keep) {
    var old = sel.value;
    sel.textContent = "";
    options.forEach(function (o) { sel.appendChild(el("option", {value: o[0]}, o[1])); });
    var values = options.map(function (o) { return o[0]; });
    sel.value = keep && values.indexOf(old) >= 0 ? old : values[0];
  }

  // The kind whose layers and heads the layer / head choices list: an attribution kind has
  // one matrix, and its choices pick the cross-attention shown beside it.
  function layered(kind) {
    var info = DATA.kinds[kind];
    return info.attribution ? DATA.kinds[info.compare] : info;
  }

  function selectedMatrix(kind, layer, head) {
    if (DATA.kinds[kind].attribution) return DATA.kinds[kind].layers[0][0];
    var heads = DATA.kinds[kind].layers[layer];
    if (head !== "avg") return heads[+head];
    var nh = heads.length, rows = heads[0].length, cols = heads[0][0].length, m = [];
    for (var q = 0; q < rows; q++) {
      var row = [];
      for (var k = 0; k < cols; k++) {
        var s = 0;
        for (var h = 0; h < nh; h++) s += heads[h][q][k];
        row.push(s / nh);
      }
      m.push(row);
    }
    return m;
  }

  function fillLayers() {
    var layers = layered(kindSel.value).layers, opts = [];
    for (var l = 0; l < layers.length; l++) opts.push([String(l), "layer " + l]);
    setOptions(layerSel, opts, true);
  }
  function fillHeads() {
    var n = layered(kindSel.value).layers[+layerSel.value].length;
    var opts = [["avg", "average of heads"]];
    for (var h = 0; h < n; h++) opts.push([String(h), "head " + h]);
    setOptions(headSel, opts, true);
  }

  function renderTable(table, matrix) {
    var c = current;
    var n = Math.max(c.queries.length, c.keys.length);
    table.style.setProperty("--cell", Math.max(14, Math.min(32, Math.floor(520 / n))) + "px");
    table.textContent = "";
    var head = el("tr");
    head.appendChild(el("th", {"class": "corner", title: "queries \u2193 / keys \u2192"}));
    c.keys.forEach(function (tok, k) {
      var th = el("th", {"class": "ktok", "data-k": k, scope: "col"});
      th.appendChild(el("span", {}, tok));
      head.appendChild(th);
    });
    var thead = el("thead"), tbody = el("tbody");
    thead.appendChild(head);
    c.queries.forEach(function (tok, q) {
      var tr = el("tr", {"data-q": q});
      tr.appendChild(el("th", {"class": "qtok", "data-q": q, scope: "row", tabindex: 0}, tok));
      matrix[q].forEach(function (w, k) {
        var s = fmt(w);
        var td = el("td", {"class": "cell", "data-q": q, "data-k": k, "data-w": s,
                           title: c.queries[q] + " \u2192 " + c.keys[k] + ": " + s});
        td.style.backgroundColor = colour(w);
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
    table.appendChild(thead);
    table.appendChild(tbody);
  }

  function renderLines() {
    var c = current, rowH = 18, top = 14, xl = 150, xr = 290, width = 440;
    var n = Math.max(c.queries.length, c.keys.length);
    svg.textContent = "";
    svg.setAttribute("width", width);
    svg.setAttribute("height", top + n * rowH + 6);
    svg.classList.remove("focused");
    var y = function (i) { return top + i * rowH; };
    c.keys.forEach(function (tok, k) {
      svg.appendChild(svgEl("rect", {"class": "kbg", "data-k": k, x: xr + 2, y: y(k) - 8,
                                     width: width - xr - 4, height: rowH - 2, rx: 2}));
    });
    c.queries.forEach(function (_, q) {
      c.matrix[q].forEach(function (w, k) {
        if (w <= 0) return;
        svg.appendChild(svgEl("line", {"class": "link", "data-q": q, "data-k": k,
                                       "data-w": fmt(w), x1: xl + 4, y1: y(q) - 4,
                                       x2: xr - 4, y2: y(k) - 4, "stroke-opacity": w}));
      });
    });
    c.queries.forEach(function (tok, q) {
      svg.appendChild(svgEl("text", {"class": "qtok", "data-q": q, x: xl, y: y(q),
                                     "text-anchor": "end", tabindex: 0}, tok));
    });
    c.keys.forEach(function (tok, k) {
      svg.appendChild(svgEl("text", {"class": "ktok", "data-k": k, x: xr + 6, y: y(k)}, tok));
    });
  }

  // Agreement of two (T, S) matrices, as minitx.attribution.agreement computes it: the
  // source eos (last column) and the row predicting eos (last row) are left out; per row,
  // Spearman's rank correlation (ties share their mean rank) and whether the largest entry
  // (the first of equal ones) is at the same source piece.
  function ranks(row) {
    return row.map(function (x) {
      var below = 0, equal = 0;
      row.forEach(function (y) { if (y < x) below++; else if (y === x) equal++; });
      return below + (equal + 1) / 2;
    });
  }
  function spearman(a, b) {
    var ra = ranks(a), rb = ranks(b), n = a.length, ma = 0, mb = 0, num = 0, da = 0, db = 0;
    for (var i = 0; i < n; i++) { ma += ra[i] / n; mb += rb[i] / n; }
    for (var j = 0; j < n; j++) {
      num += (ra[j] - ma) * (rb[j] - mb);
      da += (ra[j] - ma) * (ra[j] - ma);
      db += (rb[j] - mb) * (rb[j] - mb);
    }
    return da > 0 && db > 0 ? num / Math.sqrt(da * db) : NaN;
  }
  function argmax(row) {
    var best = 0;
    for (var i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
    return best;
  }
  function agreement(a, b) {
    var rows = a.length - 1, cols = a.length ? a[0].length - 1 : 0;
    if (rows < 1 || cols < 1) return {rows: 0, spearman: NaN, top1: NaN};
    var sum = 0, defined = 0, same = 0;
    for (var q = 0; q < rows; q++) {
      var x = a[q].slice(0, cols), y = b[q].slice(0, cols), rho = spearman(x, y);
      if (!isNaN(rho)) { sum += rho; defined++; }
      if (argmax(x) === argmax(y)) same++;
    }
    return {rows: rows, spearman: defined ? sum / defined : NaN, top1: same / rows, same: same};
  }

  function renderCompare() {
    var c = current;
    if (!c.compare) {
      comparePanel.hidden = true;
      compareTable.textContent = "";
      agreementEl.textContent = "";
      ["data-spearman", "data-top1", "data-rows"].forEach(function (a) {
        agreementEl.removeAttribute(a);
      });
      return;
    }
    comparePanel.hidden = false;
    compareTitle.textContent = c.compareLabel;
    renderTable(compareTable, c.compare);
    var agree = agreement(c.matrix, c.compare);
    agreementEl.setAttribute("data-rows", agree.rows);
    agreementEl.setAttribute("data-spearman", isNaN(agree.spearman) ? "nan" :
                             agree.spearman.toFixed(4));
    agreementEl.setAttribute("data-top1", isNaN(agree.top1) ? "nan" : agree.top1.toFixed(4));
    agreementEl.textContent = agree.rows ?
      "Agreement with the attribution over " + agree.rows + " rows (source </s> and the row " +
      "predicting </s> left out): mean rank correlation (Spearman) " +
      (isNaN(agree.spearman) ? "undefined" : agree.spearman.toFixed(2)) +
      "; the same most important source piece in " + agree.same + " of " + agree.rows +
      " rows." : "Too few pieces to compare.";
  }

  function clearFocus() {
    focusedQ = null;
    compareTable.querySelectorAll("tr.active").forEach(function (e) {
      e.classList.remove("active");
    });
    table.querySelectorAll("tr.active").forEach(function (e) { e.classList.remove("active"); });
    table.querySelectorAll("td.focus").forEach(function (e) { e.classList.remove("focus"); });
    table.querySelectorAll("th.ktok span").forEach(function (e) {
      e.style.backgroundColor = ""; e.style.color = "";
    });
    svg.classList.remove("focused");
    svg.querySelectorAll(".on").forEach(function (e) { e.classList.remove("on"); });
    svg.querySelectorAll("rect.kbg").forEach(function (e) { e.style.fillOpacity = ""; });
    readout.removeAttribute("data-q");
    readout.textContent = "";
    readout.appendChild(el("span", {"class": "hint"},
      "Hover a query token to see its attention over the " +
      counted(current.keys.length, "key token") + "."));
  }

  // "1 key", "3 keys": the viewer shows one-token sentences too.
  function counted(n, one, many) {
    return n + " " + (n === 1 ? one : (many || one + "s"));
  }

  function focusQuery(q, k) {
    var c = current;
    if (!(q >= 0 && q < c.queries.length)) return;
    clearFocus();
    focusedQ = q;
    var row = c.matrix[q];
    var tr = table.querySelector('tr[data-q="' + q + '"]');
    if (tr) tr.classList.add("active");
    var ctr = compareTable.querySelector('tr[data-q="' + q + '"]');
    if (ctr && c.compare) ctr.classList.add("active");
    if (k !== undefined) {
      var td = table.querySelector('td[data-q="' + q + '"][data-k="' + k + '"]');
      if (td) td.classList.add("focus");
    }
    table.querySelectorAll("th.ktok").forEach(function (th) {
      var w = row[+th.getAttribute("data-k")], span = th.firstChild;
      span.style.backgroundColor = colour(w);
      span.style.color = w > 0.55 ? "#000" : "#fff";
    });
    svg.classList.add("focused");
    svg.querySelectorAll('line[data-q="' + q + '"], text.qtok[data-q="' + q + '"]')
      .forEach(function (e) { e.classList.add("on"); });
    svg.querySelectorAll("rect.kbg").forEach(function (r) {
      r.style.fillOpacity = (row[+r.getAttribute("data-k")] * 0.6).toFixed(3);
    });
    readout.textContent = "";
    readout.setAttribute("data-q", q);
    var title = el("div", {"class": "ro-title"});
    if (c.inputs) {  // decoder rows: the piece this position predicts, and what it reads
      title.appendChild(document.createTextNode("position " + q + ", predicting "));
      title.appendChild(el("span", {"class": "tok"}, c.queries[q]));
      title.appendChild(document.createTextNode(" (reading "));
      title.appendChild(el("span", {"class": "tok input"}, c.inputs[q]));
      title.appendChild(document.createTextNode(")"));
    } else {
      title.appendChild(document.createTextNode("query " + q + " "));
      title.appendChild(el("span", {"class": "tok"}, c.queries[q]));
    }
    title.appendChild(document.createTextNode(c.compare ?
      " (" + c.label + "): the contribution of each source piece:" :
      " (" + c.label + ", layer " + c.layer + ", " +
      (c.head === "avg" ? "average of heads" : "head " + c.head) + ") attends to:"));
    readout.appendChild(title);
    readout.appendChild(keyRow(row, "kw", "ro-keys"));
    if (c.compare) {
      readout.appendChild(el("div", {"class": "ro-sub"}, c.compareLabel + " attends to:"));
      readout.appendChild(keyRow(c.compare[q], "kwc", "ro-keys ro-compare"));
    }
  }

  // One row of weights over the key tokens, as labelled boxes (the largest one framed).
  function keyRow(row, cls, divClass) {
    var c = current, best = argmax(row);
    var keysDiv = el("div", {"class": divClass});
    row.forEach(function (w, j) {
      var s = fmt(w);
      var item = el("span", {"class": cls + (j === best ? " max" : ""), "data-k": j,
                             "data-w": s, title: c.keys[j] + ": " + s});
      item.style.backgroundColor = "rgba(228, 87, 46, " + (w * 0.85).toFixed(3) + ")";
      item.appendChild(el("span", {"class": "tok"}, c.keys[j]));
      item.appendChild(el("span", {"class": "val"}, s));
      keysDiv.appendChild(item);
    });
    return keysDiv;
  }

  function render() {
    var kind = kindSel.value, layer = +layerSel.value, head = headSel.value;
    var info = DATA.kinds[kind];
    var headName = head === "avg" ? "average of heads" : "head " + head;
    current = {kind: kind, layer: layer, head: head, label: info.label,
               queries: info.query_tokens, inputs: info.query_inputs, keys: info.key_tokens,
               matrix: selectedMatrix(kind, layer, head), compare: null, compareLabel: ""};
    if (info.attribution) {
      current.compare = selectedMatrix(info.compare, layer, head);
      current.compareLabel = DATA.kinds[info.compare].label + ", layer " + layer + ", " +
        headName;
    }
    renderTable(table, current.matrix);
    renderCompare();
    renderLines();
    statusEl.textContent = info.label + (info.attribution ? " \u00b7 beside " +
      current.compareLabel : " \u00b7 layer " + layer + " \u00b7 " + headName) + " \u00b7 " +
      counted(current.queries.length, "query", "queries") + " \u00d7 " +
      counted(current.keys.length, "key");
    statusEl.setAttribute("data-kind", kind);
    statusEl.setAttribute("data-layer", layer);
    statusEl.setAttribute("data-head", head);
    var keep = focusedQ;
    if (keep !== null && keep < current.queries.length) focusQuery(keep); else clearFocus();
  }

  function onPoint(ev) {
    var t = ev.target.closest ? ev.target.closest("[data-q]") : null;
    if (!t || t.tagName.toLowerCase() === "tr") return;
    var k = t.getAttribute("data-k");
    focusQuery(+t.getAttribute("data-q"), k === null ? undefined : +k);
  }

  var kinds = Object.keys(DATA.kinds);
  if (!kinds.length) {
    readout.textContent = "These attention maps hold no layers.";
    return;
  }
  setOptions(kindSel, kinds.map(function (k) { return [k, DATA.kinds[k].label]; }), false);
  if (DATA.kinds.cross) kindSel.value = "cross";  // open on the alignment: cross-attention
  fillLayers();
  fillHeads();
  kindSel.addEventListener("change", function () { fillLayers(); fillHeads(); render(); });
  layerSel.addEventListener("change", function () { fillHeads(); render(); });
  headSel.addEventListener("change", render);
  [table, compareTable, svg].forEach(function (root) {
    root.addEventListener("mouseover", onPoint);
    root.addEventListener("focusin", onPoint);
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") clearFocus();
  });
  render();
  document.body.setAttribute("data-ready", "1");
})();
