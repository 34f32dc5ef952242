// Dependency-free SVG charts for cloudai reports (offline, no CDN). Data comes from
// <script type="application/json" id="cloudai-data">; every element with data-chart="<key of data.charts>" becomes a
// chart as wide as the page: log2 byte-size x axis (8 B ... 16 GiB), round 1-2-5 y ticks, a marker shape and dash per
// series, reference lines, hover with every value of the nearest point, wheel zoom / drag pan / double-click reset,
// series toggled from the legend, PNG and CSV export.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
  // inlined into each SVG, so an exported PNG looks like the page
  var SVG_STYLE = "text{font:11px system-ui,-apple-system,Segoe UI,Roboto,sans-serif;fill:#57606a}" +
    ".title{font-weight:600;font-size:13px;fill:#1b1f24}.grid{stroke:#eaeef2}.axis{stroke:#8c959f}" +
    ".ref{stroke:#6e7781;stroke-dasharray:3 3}.tipbox{fill:#fff;stroke-width:1.5}.tiptext{fill:#1b1f24}" +
    ".legend{cursor:pointer}.off{opacity:.35}";

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== "") e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function bytes(b) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (+b.toFixed(2)) + " " + u[i];
  }
  function fmt(v) {
    if (!isFinite(v)) return String(v);
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(1);
    return String(+v.toPrecision(6));
  }
  // a 1-2-5 step giving about n intervals over span
  function niceStep(span, n) {
    var raw = span / n, p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10)), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function linTicks(lo, hi) {
    var st = niceStep(hi - lo || 1, 5), out = [];
    for (var v = Math.ceil(lo / st) * st; v <= hi + st * 1e-9; v += st) out.push(+v.toPrecision(12));
    return out;
  }
  function logTicks(lo, hi) { // lo, hi: log10 bounds
    var out = [], mult = hi - lo <= 3 ? [1, 2, 5] : [1];
    for (var d = Math.floor(lo); d <= Math.ceil(hi); d++) {
      mult.forEach(function (m) { var v = m * Math.pow(10, d), l = Math.log(v) / Math.LN10; if (l >= lo - 1e-9 && l <= hi + 1e-9) out.push(+v.toPrecision(12)); });
    }
    return out;
  }
  function download(name, href) {
    var a = document.createElement("a");
    a.href = href; a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
  }
  function slug(s) { return String(s).replace(/[^A-Za-z0-9._-]+/g, "_"); }

  function Chart(host, spec) {
    this.host = host; this.spec = spec; this.hidden = {}; this.view = null;
    var self = this;
    this.svg = el("svg", { role: "img", "class": "chart", "aria-label": spec.title }, host);
    var bar = document.createElement("div");
    bar.className = "chartbar";
    [["Reset zoom", function () { self.view = null; self.draw(); }], ["PNG", function () { self.png(); }],
     ["CSV", function () { self.csv(); }]].forEach(function (b) {
      var btn = document.createElement("button");
      btn.type = "button"; btn.textContent = b[0]; btn.addEventListener("click", b[1]);
      bar.appendChild(btn);
    });
    host.appendChild(bar);
    this.bind();
    this.draw();
  }

  Chart.prototype.visible = function () {
    var h = this.hidden;
    return this.spec.series.map(function (s, i) { return { s: s, i: i, on: !h[s.name] }; });
  };

  Chart.prototype.draw = function () {
    var spec = this.spec, svg = this.svg;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var W = Math.max(480, Math.floor(this.host.clientWidth || 800)), H = Math.round(Math.min(420, Math.max(300, W * 0.42)));
    var L = 70, R = 24, T = 52, B = 48;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    el("style", {}, svg).textContent = SVG_STYLE;
    el("rect", { x: 0, y: 0, width: W, height: H, fill: "#fff" }, svg);
    el("text", { x: L, y: 18, "class": "title" }, svg).textContent = spec.title;
    var all = [], linX = !!spec.linearX;
    // a point is drawn when its x fits the axis (sizes on a log axis must be positive)
    var ok = function (p) { return (linX ? isFinite(p[0]) : p[0] > 0) && isFinite(p[1]); };
    this.ok = ok;
    spec.series.forEach(function (s) { s.points.forEach(function (p) { if (ok(p)) all.push(p); }); });
    this.geom = null;
    if (!all.length) { el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, svg).textContent = "no data"; return; }
    var lx = linX ? function (x) { return x; } : function (x) { return Math.log(x) / Math.LN2; };
    var xs = all.map(function (p) { return lx(p[0]); });
    var full = [Math.floor(Math.min.apply(null, xs)), Math.ceil(Math.max.apply(null, xs))];
    if (full[1] === full[0]) full[1] = full[0] + 1;
    var v = this.view || full, x0 = v[0], x1 = v[1];
    this.full = full;
    // y range over what is visible and switched on, and the reference lines
    var ys = [];
    this.visible().forEach(function (o) {
      if (!o.on) return;
      o.s.points.forEach(function (p) { var e = lx(p[0]); if (ok(p) && e >= x0 - 1e-9 && e <= x1 + 1e-9) ys.push(p[1]); });
    });
    (spec.refs || []).forEach(function (r) { ys.push(r.value); });
    if (!ys.length) ys = all.map(function (p) { return p[1]; });
    var ly, y0, y1, yt;
    if (spec.logY) {
      var pos = ys.filter(function (y) { return y > 0; });
      var lo = Math.log(Math.min.apply(null, pos.length ? pos : [1])) / Math.LN10, hi = Math.log(Math.max.apply(null, pos.length ? pos : [10])) / Math.LN10;
      y0 = Math.floor(lo); y1 = Math.ceil(hi); if (y1 === y0) y1 = y0 + 1;
      ly = function (y) { return Math.log(Math.max(y, 1e-12)) / Math.LN10; };
      yt = logTicks(y0, y1);
    } else {
      var top = Math.max.apply(null, ys); top = top <= 0 ? 1 : top * 1.05;
      var st = niceStep(top, 5);
      y0 = 0; y1 = Math.ceil(top / st) * st;
      ly = function (y) { return y; };
      yt = linTicks(y0, y1);
    }
    var sx = function (x) { return L + (lx(x) - x0) / (x1 - x0) * (W - L - R); };
    var sy = function (y) { return H - B - (ly(y) - y0) / (y1 - y0) * (H - T - B); };
    this.geom = { W: W, H: H, L: L, R: R, T: T, B: B, sx: sx, sy: sy, x0: x0, x1: x1 };
    var g = el("g", {}, svg);
    // x: powers of two, a round stride so labels never collide
    var room = Math.max(2, Math.floor((W - L - R) / 70)), stride = 1;
    [1, 2, 3, 4, 5, 10, 20].some(function (k) { stride = k; return Math.ceil((x1 - x0) / k) <= room; });
    // from the first size shown, so the smallest (and, with the span a multiple of the stride, the largest) is labelled
    var xt = [];
    if (linX) linTicks(x0, x1).forEach(function (t) { if (t >= x0 - 1e-9) xt.push([t, fmt(t)]); });
    else for (var e = Math.ceil(x0 - 1e-9); e <= Math.floor(x1 + 1e-9); e += stride) xt.push([Math.pow(2, e), bytes(Math.pow(2, e))]);
    xt.forEach(function (t) {
      var x = sx(t[0]);
      el("line", { x1: x, x2: x, y1: T, y2: H - B, "class": "grid" }, g);
      el("text", { x: x, y: H - B + 16, "class": "tick", "text-anchor": "middle" }, g).textContent = t[1];
    });
    yt.forEach(function (t) {
      var yy = sy(t);
      el("line", { x1: L, x2: W - R, y1: yy, y2: yy, "class": "grid" }, g);
      el("text", { x: L - 6, y: yy + 4, "class": "tick", "text-anchor": "end" }, g).textContent = fmt(t);
    });
    el("line", { x1: L, x2: L, y1: T, y2: H - B, "class": "axis" }, g);
    el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, "class": "axis" }, g);
    el("text", { x: (L + W - R) / 2, y: H - 8, "class": "label", "text-anchor": "middle" }, g).textContent = spec.xlabel || "message size";
    el("text", { x: 14, y: (T + H - B) / 2, "class": "label", "text-anchor": "middle", transform: "rotate(-90 14 " + (T + H - B) / 2 + ")" }, g).textContent = spec.ylabel;
    var clipId = "clip" + Math.random().toString(36).slice(2);
    var cp = el("clipPath", { id: clipId }, svg);
    el("rect", { x: L, y: T - 4, width: W - L - R, height: H - T - B + 8 }, cp);
    var plot = el("g", { "clip-path": "url(#" + clipId + ")" }, svg);
    (spec.refs || []).forEach(function (r) {
      var yy = sy(r.value);
      el("line", { x1: L, x2: W - R, y1: yy, y2: yy, "class": "ref", "data-ref": r.label }, plot);
      el("text", { x: W - R - 4, y: yy - 4, "text-anchor": "end", "class": "reflabel" }, plot).textContent = r.label + " " + fmt(r.value) + " " + spec.unit;
    });
    var self = this;
    this.visible().forEach(function (o) {
      var s = o.s, c = s.color || COLORS[o.i % COLORS.length];
      var legend = el("g", { "class": "legend" + (o.on ? "" : " off"), "data-series": s.name }, svg);
      var lxp = L + (o.i % 4) * 180, lyp = 32 + Math.floor(o.i / 4) * 14;
      el("line", { x1: lxp, x2: lxp + 22, y1: lyp, y2: lyp, stroke: c, "stroke-width": 2, "stroke-dasharray": s.dashed ? "6 4" : "" }, legend);
      marker(legend, lxp + 11, lyp, s, c);
      el("text", { x: lxp + 28, y: lyp + 4 }, legend).textContent = s.name;
      legend.addEventListener("click", function () { self.hidden[s.name] = !self.hidden[s.name]; self.draw(); });
      if (!o.on) return;
      var p = s.points.filter(ok);
      if (!s.pointsOnly) el("polyline", { points: p.map(function (q) { return sx(q[0]) + "," + sy(q[1]); }).join(" "), fill: "none", stroke: c, "stroke-width": 2, "class": "series", "data-name": s.name, "stroke-dasharray": s.dashed ? "6 4" : "" }, plot);
      if (p.length <= 600) p.forEach(function (q) { marker(plot, sx(q[0]), sy(q[1]), s, c); });
    });
    this.tip = el("g", { "class": "tip", visibility: "hidden" }, svg);
  };

  function marker(parent, x, y, s, c) {
    if (s.marker === "cross") {
      // failing sizes: a bold X, unlike any series' marker
      var g = el("g", { "class": "point", "data-marker": "cross" }, parent);
      el("line", { x1: x - 5, y1: y - 5, x2: x + 5, y2: y + 5, stroke: c, "stroke-width": 2.5 }, g);
      el("line", { x1: x - 5, y1: y + 5, x2: x + 5, y2: y - 5, stroke: c, "stroke-width": 2.5 }, g);
    } else if (s.marker === "square" || (s.marker === undefined && s.dashed)) {
      el("rect", { x: x - 3.2, y: y - 3.2, width: 6.4, height: 6.4, fill: "none", stroke: c, "stroke-width": 1.5, "class": "point", "data-marker": "square" }, parent);
    } else {
      el("circle", { cx: x, cy: y, r: 3.5, fill: c, "class": "point", "data-marker": "circle" }, parent);
    }
  }

  Chart.prototype.nearest = function (mx, my) {
    var g = this.geom, best = null, bd = 1e18, ok = this.ok;
    if (!g) return null;
    this.visible().forEach(function (o) {
      if (!o.on) return;
      o.s.points.forEach(function (q) {
        if (!ok(q)) return;
        var dx = g.sx(q[0]) - mx, dy = g.sy(q[1]) - my, d = dx * dx + dy * dy;
        if (d < bd) { bd = d; best = { o: o, q: q }; }
      });
    });
    return bd <= 40 * 40 ? best : null;
  };

  Chart.prototype.showTip = function (hit) {
    var tip = this.tip, g = this.geom, spec = this.spec;
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    if (!hit) { tip.setAttribute("visibility", "hidden"); return; }
    var c = hit.o.s.color || COLORS[hit.o.i % COLORS.length], q = hit.q;
    var at = spec.linearX ? (spec.xlabel || "x") + " " + fmt(q[0]) : "size " + bytes(q[0]) + " (" + q[0] + " B)";
    var lines = [hit.o.s.name, at, spec.vname + " " + fmt(q[1]) + " " + spec.unit];
    var extra = q[2] || {};
    Object.keys(extra).forEach(function (k) { lines.push(k + " " + extra[k]); });
    var w = 12 + 6.5 * Math.max.apply(null, lines.map(function (l) { return l.length; })), h = 8 + 15 * lines.length;
    var x = g.sx(q[0]) + 10, y = g.sy(q[1]) - h - 6;
    if (x + w > g.W - 4) x = g.sx(q[0]) - w - 10;
    if (y < 2) y = g.sy(q[1]) + 10;
    el("rect", { x: x, y: y, width: w, height: h, rx: 4, "class": "tipbox", stroke: c }, tip);
    el("circle", { cx: g.sx(q[0]), cy: g.sy(q[1]), r: 6, fill: "none", stroke: c, "stroke-width": 2 }, tip);
    lines.forEach(function (l, i) { el("text", { x: x + 6, y: y + 16 + 15 * i, "class": "tiptext" }, tip).textContent = l; });
    tip.setAttribute("visibility", "visible");
  };

  Chart.prototype.bind = function () {
    var self = this, svg = this.svg, drag = null;
    function pos(ev) {
      var r = svg.getBoundingClientRect(), g = self.geom;
      return { x: (ev.clientX - r.left) * (g ? g.W / r.width : 1), y: (ev.clientY - r.top) * (g ? g.H / r.height : 1) };
    }
    function toExp(px) { var g = self.geom; return g.x0 + (px - g.L) / (g.W - g.L - g.R) * (g.x1 - g.x0); }
    svg.addEventListener("mousemove", function (ev) {
      if (!self.geom) return;
      var p = pos(ev);
      if (drag) {
        var d = toExp(drag.x) - toExp(p.x);
        self.view = [drag.v[0] + d, drag.v[1] + d]; self.draw(); drag.x = p.x; drag.v = self.view;
        return;
      }
      self.showTip(self.nearest(p.x, p.y));
    });
    svg.addEventListener("mouseleave", function () { drag = null; if (self.tip) self.showTip(null); });
    svg.addEventListener("mousedown", function (ev) { if (!self.geom) return; drag = { x: pos(ev).x, v: (self.view || self.full).slice() }; ev.preventDefault(); });
    window.addEventListener("mouseup", function () { drag = null; });
    svg.addEventListener("wheel", function (ev) {
      if (!self.geom) return;
      ev.preventDefault();
      var at = toExp(pos(ev).x), v = self.view || self.full, f = ev.deltaY < 0 ? 0.8 : 1.25;
      var a = at - (at - v[0]) * f, b = at + (v[1] - at) * f;
      if (b - a < 1) return; // at least one doubling of message size
      self.view = [a, b]; self.draw();
    }, { passive: false });
    svg.addEventListener("dblclick", function () { self.view = null; self.draw(); });
    var last = 0;
    window.addEventListener("resize", function () { var w = self.host.clientWidth; if (Math.abs(w - last) > 8) { last = w; self.draw(); } });
  };

  Chart.prototype.png = function () {
    var svg = this.svg, w = +svg.getAttribute("width"), h = +svg.getAttribute("height"), title = this.spec.title;
    var xml = new XMLSerializer().serializeToString(svg);
    var img = new Image();
    img.onload = function () {
      var cv = document.createElement("canvas");
      cv.width = w * 2; cv.height = h * 2;
      var ctx = cv.getContext("2d");
      ctx.scale(2, 2); ctx.drawImage(img, 0, 0);
      download(slug(title) + ".png", cv.toDataURL("image/png"));
    };
    img.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(xml);
  };

  Chart.prototype.csv = function () {
    var spec = this.spec, keys = [];
    spec.series.forEach(function (s) { s.points.forEach(function (q) { Object.keys(q[2] || {}).forEach(function (k) { if (keys.indexOf(k) < 0) keys.push(k); }); }); });
    var q = function (s) { s = String(s); return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; };
    var rows = [["series", "size_bytes", (spec.vname || "value") + " (" + spec.unit + ")"].concat(keys).map(q).join(",")];
    spec.series.forEach(function (s) {
      s.points.forEach(function (p) { rows.push([s.name, p[0], p[1]].concat(keys.map(function (k) { return (p[2] || {})[k] === undefined ? "" : p[2][k]; })).map(q).join(",")); });
    });
    var blob = new Blob([rows.join("\n") + "\n"], { type: "text/csv" });
    download(slug(spec.title) + ".csv", URL.createObjectURL(blob));
  };

  function init() {
    var node = document.getElementById("cloudai-data");
    if (!node) return;
    var data = JSON.parse(node.textContent);
    var hosts = document.querySelectorAll("[data-chart]");
    for (var i = 0; i < hosts.length; i++) {
      var spec = data.charts[hosts[i].getAttribute("data-chart")];
      if (spec) new Chart(hosts[i], spec);
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();
