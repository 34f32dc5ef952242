// Small, dependency-free SVG line charts for cloudai reports (works offline, no CDN).
// Data comes from <script type="application/json" id="cloudai-data">; every element with a data-chart attribute
// becomes a chart: data-chart="<key of data.charts>".
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function human(b) {
    var u = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (Math.round(b * 100) / 100) + u[i];
  }
  function fmt(v) {
    if (!isFinite(v)) return String(v);
    var a = Math.abs(v);
    return a >= 1000 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }
  function draw(host, spec) {
    var W = 760, H = 360, L = 64, R = 36, T = 30, B = 48;
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img", "class": "chart" }, host);
    el("text", { x: L, y: 18, "class": "title" }, svg).textContent = spec.title;
    var pts = [];
    spec.series.forEach(function (s) { s.points.forEach(function (p) { if (p[0] > 0 && isFinite(p[1])) pts.push(p); }); });
    if (!pts.length) { el("text", { x: W / 2, y: H / 2, "class": "empty" }, svg).textContent = "no data"; return; }
    var lx = function (x) { return Math.log2(x); };
    var ly = spec.logY ? function (y) { return Math.log10(Math.max(y, 1e-3)); } : function (y) { return y; };
    var xs = pts.map(function (p) { return lx(p[0]); }), ys = pts.map(function (p) { return ly(p[1]); });
    var x0 = Math.floor(Math.min.apply(null, xs)), x1 = Math.ceil(Math.max.apply(null, xs));
    var y0 = spec.logY ? Math.floor(Math.min.apply(null, ys)) : 0, y1 = Math.max.apply(null, ys);
    if (spec.logY) y1 = Math.ceil(y1); else y1 = y1 <= 0 ? 1 : y1 * 1.08;
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) y1 = y0 + 1;
    var sx = function (x) { return L + (lx(x) - x0) / (x1 - x0) * (W - L - R); };
    var sy = function (y) { return H - B - (ly(y) - y0) / (y1 - y0) * (H - T - B); };
    var g = el("g", { "class": "axes" }, svg);
    var step = Math.max(1, Math.ceil((x1 - x0) / 12));
    for (var e = x0; e <= x1; e += step) {
      var x = sx(Math.pow(2, e));
      el("line", { x1: x, x2: x, y1: T, y2: H - B, "class": "grid" }, g);
      el("text", { x: x, y: H - B + 16, "class": "tick", "text-anchor": "middle" }, g).textContent = human(Math.pow(2, e));
    }
    for (var k = 0; k <= 5; k++) {
      var yv = y0 + (y1 - y0) * k / 5, yy = H - B - (H - T - B) * k / 5;
      el("line", { x1: L, x2: W - R, y1: yy, y2: yy, "class": "grid" }, g);
      el("text", { x: L - 6, y: yy + 4, "class": "tick", "text-anchor": "end" }, g).textContent = fmt(spec.logY ? Math.pow(10, yv) : yv);
    }
    el("text", { x: (L + W - R) / 2, y: H - 8, "class": "label", "text-anchor": "middle" }, g).textContent = "message size (log2)";
    el("text", { x: 14, y: (T + H - B) / 2, "class": "label", "text-anchor": "middle", transform: "rotate(-90 14 " + (T + H - B) / 2 + ")" }, g).textContent = spec.ylabel;
    var tip = el("g", { "class": "tip", visibility: "hidden" }, null);
    spec.series.forEach(function (s, i) {
      var c = s.color || COLORS[i % COLORS.length];
      var p = s.points.filter(function (q) { return q[0] > 0 && isFinite(q[1]); });
      el("polyline", { points: p.map(function (q) { return sx(q[0]) + "," + sy(q[1]); }).join(" "), fill: "none", stroke: c, "stroke-width": 2, "class": "series", "data-name": s.name, "stroke-dasharray": s.dashed ? "6 4" : "" }, svg);
      p.forEach(function (q) {
        var dot = el("circle", { cx: sx(q[0]), cy: sy(q[1]), r: 3.5, fill: c, "class": "point" }, svg);
        dot.addEventListener("mouseenter", function () { show(s.name, q, c); });
        dot.addEventListener("mouseleave", function () { tip.setAttribute("visibility", "hidden"); });
      });
      el("rect", { x: L + 10 + i * 150, y: T + 4, width: 12, height: 4, fill: c }, svg);
      el("text", { x: L + 26 + i * 150, y: T + 10, "class": "legend" }, svg).textContent = s.name;
    });
    svg.appendChild(tip);
    var box = el("rect", { "class": "tipbox", rx: 4, width: 190, height: 38 }, tip);
    var t1 = el("text", { "class": "tiptext" }, tip), t2 = el("text", { "class": "tiptext" }, tip);
    function show(name, q, c) {
      var x = Math.min(sx(q[0]) + 8, W - 200), y = Math.max(sy(q[1]) - 46, 2);
      box.setAttribute("x", x); box.setAttribute("y", y); box.setAttribute("stroke", c);
      t1.setAttribute("x", x + 6); t1.setAttribute("y", y + 15); t1.textContent = name;
      t2.setAttribute("x", x + 6); t2.setAttribute("y", y + 31);
      t2.textContent = human(q[0]) + " (" + q[0] + " B): " + fmt(q[1]) + " " + spec.unit;
      tip.setAttribute("visibility", "visible");
    }
  }
  function init() {
    var node = document.getElementById("cloudai-data");
    if (!node) return;
    var data = JSON.parse(node.textContent);
    var hosts = document.querySelectorAll("[data-chart]");
    for (var i = 0; i < hosts.length; i++) {
      var spec = data.charts[hosts[i].getAttribute("data-chart")];
      if (spec) draw(hosts[i], spec);
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();
