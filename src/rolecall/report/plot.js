// Hover read-out for the server-drawn SVG charts: a crosshair at the nearest logged step and
// each series' value there. Text goes in through textContent only (run/role names are untrusted).
(function () {
  "use strict";
  var tip = document.getElementById("tip");

  function fmt(v) {
    if (v === null || v === undefined) return "—";
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
    return String(+v.toPrecision(4));
  }

  function nearest(xs, x) {  // index of the value in sorted xs closest to x, -1 when empty
    var lo = 0, hi = xs.length - 1;
    if (hi < 0) return -1;
    while (hi - lo > 1) {
      var mid = (lo + hi) >> 1;
      if (xs[mid] < x) lo = mid; else hi = mid;
    }
    return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
  }

  function hide(cross) {
    tip.hidden = true;
    if (cross) cross.setAttribute("visibility", "hidden");
  }

  function row(color, text) {
    var div = document.createElement("div");
    var sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = color;
    div.appendChild(sw);
    div.appendChild(document.createTextNode(text));
    return div;
  }

  function wire(el) {
    var svg = document.getElementById(el.dataset.for);
    if (!svg) return false;
    var d = JSON.parse(el.textContent);
    var cross = svg.querySelector("line.cross");
    svg.addEventListener("mousemove", function (evt) {
      var pt = svg.createSVGPoint();
      pt.x = evt.clientX; pt.y = evt.clientY;
      var p = pt.matrixTransform(svg.getScreenCTM().inverse());
      if (p.x < d.x0 || p.x > d.x1 || p.y < d.y0 || p.y > d.y1) return hide(cross);
      var step = d.xd[0] + (p.x - d.x0) / (d.x1 - d.x0) * (d.xd[1] - d.xd[0]);
      var best = null;
      d.series.forEach(function (s) {
        var i = nearest(s.xs, step);
        if (i >= 0 && (best === null || Math.abs(s.xs[i] - step) < Math.abs(best - step))) best = s.xs[i];
      });
      if (best === null) return hide(cross);
      tip.replaceChildren();
      var head = document.createElement("div");
      head.className = "tip-head";
      head.textContent = "step " + best;
      tip.appendChild(head);
      d.series.forEach(function (s) {
        var i = nearest(s.xs, best);
        if (i < 0) return;
        var at = s.xs[i] === best ? "" : " (step " + s.xs[i] + ")";
        var note = s.notes && s.notes[i] ? " " + s.notes[i] : "";  // e.g. the validation's ± 1.96·se
        tip.appendChild(row(s.color, s.label + ": " + fmt(s.ys[i]) + note + at));
      });
      var cx = d.x0 + (best - d.xd[0]) / (d.xd[1] - d.xd[0]) * (d.x1 - d.x0);
      cross.setAttribute("x1", cx);
      cross.setAttribute("x2", cx);
      cross.setAttribute("visibility", "visible");
      tip.hidden = false;
      var x = evt.pageX + 14, maxX = window.scrollX + document.documentElement.clientWidth - tip.offsetWidth - 8;
      tip.style.left = Math.min(x, maxX) + "px";
      tip.style.top = evt.pageY + 14 + "px";
    });
    svg.addEventListener("mouseleave", function () { hide(cross); });
    return true;
  }

  var wired = 0;
  document.querySelectorAll("script.chart-data").forEach(function (el) { if (wire(el)) wired++; });
  document.body.dataset.charts = String(wired);
  document.body.dataset.ready = "1";  // the browser test waits for this
})();
