// The chapters' retrieval questions (_ext/attnbook_questions.py renders them): marks an answer
// in the browser, at once and without a kernel or a request. Each question is a <form>; Check
// (or Enter) submits it; the verdict and the explanation appear in its role="status" region, so
// a screen reader announces them.
(function () {
  "use strict";

  // "0.25", "-1e-3", "1/8", "16.5 %", "1,024": a number, or NaN.
  function readNumber(text, unit) {
    let s = text.trim().replace(/\u2212/g, "-").replace(/,/g, "");
    if (unit && s.endsWith(unit)) s = s.slice(0, -unit.length).trim();
    if (s.endsWith("%")) s = s.slice(0, -1).trim();
    if (s === "") return NaN;
    const frac = s.match(/^([-+]?[\d.]+(?:e[-+]?\d+)?)\s*\/\s*([-+]?[\d.]+(?:e[-+]?\d+)?)$/i);
    if (frac) return Number(frac[1]) / Number(frac[2]);
    return /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(s) ? Number(s) : NaN;
  }

  function normalise(text) {
    return text.trim().replace(/\s+/g, " ");
  }

  function show(form, verdict, state, selector) {
    const feedback = form.querySelector(".attnbook-q-feedback");
    feedback.querySelectorAll(".attnbook-q-why").forEach(function (e) { e.hidden = true; });
    if (selector) {
      const why = feedback.querySelector(selector);
      if (why) why.hidden = false;
    }
    const line = feedback.querySelector(".attnbook-q-verdict");
    line.textContent = verdict;
    form.dataset.state = state;
  }

  function check(form) {
    const kind = form.dataset.kind;
    if (kind === "choice") {
      const picked = form.querySelector("input[type=radio]:checked");
      if (!picked) {
        show(form, "Choose one of the options first.", "empty", null);
        return;
      }
      const right = picked.value === form.dataset.correct;
      show(form, right ? "Correct." : "Not quite: see why, then try another option.",
           right ? "right" : "wrong", '.attnbook-q-why[data-option="' + picked.value + '"]');
      return;
    }
    const input = form.querySelector("input[type=text]");
    if (form.dataset.answerType === "text") {
      const right = normalise(input.value) === normalise(form.dataset.answer);
      if (!normalise(input.value)) {
        show(form, "Type your answer first.", "empty", null);
        return;
      }
      show(form, right ? "Correct: the lab prints " + form.dataset.answer + "."
                       : "Not quite.", right ? "right" : "wrong",
           right ? '.attnbook-q-why[data-when="right"]' : '.attnbook-q-why[data-when="wrong"]');
      return;
    }
    const unit = form.dataset.unit || "";
    const value = readNumber(input.value, unit);
    if (Number.isNaN(value)) {
      show(form, "Type a number, such as 0.25, 1e-3 or 1/8.", "empty", null);
      return;
    }
    const answer = Number(form.dataset.value);
    const tolerance = Number(form.dataset.tolerance);
    // A hair of slack so that 0.1 + 0.2 style rounding never rejects an exact answer.
    const slack = 1e-9 * Math.max(1, Math.abs(answer));
    if (Math.abs(value - answer) <= tolerance + slack) {
      const said = kind === "predict" ? "Correct: the lab prints " : "Correct: ";
      show(form, said + form.dataset.answer + (unit && unit !== "%" ? " " + unit : "") + ".",
           "right", '.attnbook-q-why[data-when="right"]');
      return;
    }
    const mistakes = form.querySelectorAll('.attnbook-q-why[data-when="mistake"]');
    for (const m of mistakes) {
      const wrong = Number(m.dataset.mistake);
      if (Math.abs(value - wrong) <= tolerance + 1e-9 * Math.max(1, Math.abs(wrong))) {
        show(form, "Not quite: " + input.value.trim() + " is a common slip.", "wrong",
             '.attnbook-q-why[data-when="mistake"][data-mistake="' + m.dataset.mistake + '"]');
        return;
      }
    }
    show(form, "Not quite: " + input.value.trim() + " is not it. A hint:", "wrong",
         '.attnbook-q-why[data-when="wrong"]');
  }

  function setUp() {
    document.querySelectorAll("form.attnbook-q").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        check(form);
      });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
