// tgagent web: the little the page does in the browser. Everything works without it;
// it asks before a replay is kept as a fork, and shows that a replay is running.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
        return;
      }
      form.elements.namedItem("confirmed").value = "1";
    });
  }
  for (const form of document.querySelectorAll("form[method=post]")) {
    form.addEventListener("submit", (event) => {
      if (event.defaultPrevented) return;
      const button = form.querySelector("button[type=submit]");
      if (button) {
        button.disabled = true;
        button.textContent = "Replaying… (the model is answering)";
      }
    });
  }
});
