// The console's only script. It never turns text into markup: everything
// it shows goes through textContent, and links are built from run ids the
// server validated, encoded again here.
"use strict";

function pendingItem(p) {
  const li = document.createElement("li");
  const a = document.createElement("a");
  a.href = document.body.dataset.base + "runs/" + encodeURIComponent(p.run);
  a.textContent = "run " + p.run;
  li.appendChild(a);
  li.appendChild(document.createTextNode(": approval "));
  const id = document.createElement("span");
  id.className = "approval-id";
  id.textContent = p.id;
  li.appendChild(id);
  li.appendChild(document.createTextNode(" for tool "));
  const tool = document.createElement("span");
  tool.className = "tool";
  tool.textContent = p.tool;
  li.appendChild(tool);
  li.appendChild(document.createTextNode(" (" + p.kind + "): "));
  const reason = document.createElement("span");
  reason.className = "reason";
  reason.textContent = p.reason;
  li.appendChild(reason);
  return li;
}

function followApprovals() {
  const list = document.getElementById("pending");
  const es = new EventSource(document.body.dataset.base + "approvals/live");
  es.addEventListener("pending", (ev) => {
    const items = JSON.parse(ev.data) || [];
    list.replaceChildren();
    if (items.length === 0) {
      const li = document.createElement("li");
      li.className = "empty";
      li.textContent = "Nothing waits for a decision.";
      list.appendChild(li);
    }
    for (const p of items) {
      list.appendChild(pendingItem(p));
    }
    document.body.dataset.live = "1";
  });
}

function followRun() {
  const run = document.body.dataset.run;
  const count = document.body.dataset.count;
  const es = new EventSource(document.body.dataset.base + "runs/" + encodeURIComponent(run) + "/live");
  es.addEventListener("tail", (ev) => {
    const reason = document.getElementById("reason");
    if (ev.data !== count && !(reason && reason.value !== "")) {
      es.close();
      const u = new URL(window.location.href);
      window.location.replace(u.pathname + u.search);
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  if (document.body.dataset.page === "approvals") followApprovals();
  if (document.body.dataset.page === "run") followRun();
});
