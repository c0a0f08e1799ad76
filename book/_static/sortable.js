// Click a header of a table.sortable to sort its rows by that column (again: reverse).
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("table.sortable").forEach((table) => {
    table.querySelectorAll("th").forEach((th, col) => {
      th.addEventListener("click", () => {
        const body = table.tBodies[0];
        const asc = th.dataset.order !== "asc";
        th.dataset.order = asc ? "asc" : "desc";
        const key = (row) => row.cells[col].innerText.trim();
        const rows = Array.from(body.rows).sort((a, b) =>
          key(a).localeCompare(key(b), undefined, { numeric: true }) * (asc ? 1 : -1));
        rows.forEach((row) => body.appendChild(row));
      });
    });
  });
});
