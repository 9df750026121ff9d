// Optional: filter the check x node matrix and sort tables by a column. The page reads fine without it.
(function () {
  var f = document.getElementById("filter");
  if (f) {
    f.hidden = false;
    f.addEventListener("input", function () {
      var q = f.value.toLowerCase();
      document.querySelectorAll("#matrix tbody tr").forEach(function (tr) {
        tr.style.display = tr.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
      });
    });
  }
  document.querySelectorAll("table.sortable th").forEach(function (th, i) {
    th.style.cursor = "pointer";
    th.addEventListener("click", function () {
      var body = th.closest("table").tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var dir = th.dataset.dir === "asc" ? -1 : 1;
      th.dataset.dir = dir === 1 ? "asc" : "desc";
      rows.sort(function (a, b) {
        var x = a.cells[i].textContent, y = b.cells[i].textContent;
        var nx = parseFloat(x), ny = parseFloat(y);
        return (isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny) * dir;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  document.documentElement.dataset.js = "ready";
})();
