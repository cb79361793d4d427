/*
 * The "Report a problem" link of every page (added by _ext/attnbook_report.py to the header bar):
 * keeps the section it names in step with the reader. The link is built with the page's title as
 * its section; as the reader scrolls, this replaces it with the last heading the reader has
 * passed (or sees in the top quarter of the window), with that section's anchor, in the
 * issue's title and in the "Section:" line of its body. Headings inside closed dropdowns are
 * skipped. Without this script the link still opens an issue naming the page.
 */
(function () {
  "use strict";

  var LINK = "a.btn-report-problem";
  var HEADINGS = "article.bd-article h1, article.bd-article h2, article.bd-article h3";
  var pending = false;

  function headingText(h) {
    var copy = h.cloneNode(true);
    copy.querySelectorAll(".headerlink").forEach(function (a) { a.remove(); });
    return copy.textContent.replace(/\s+/g, " ").trim();
  }

  function anchorOf(h) {
    if (h.id) return h.id;
    var section = h.closest("section[id]");
    return section ? section.id : "";
  }

  // The last visible heading in or above the top quarter of the window below the sticky
  // header: the section whose text fills the window, or whose heading the reader just passed.
  function currentHeading() {
    var bar = document.querySelector(".bd-header-article");
    var top = bar ? Math.max(0, bar.getBoundingClientRect().bottom) : 0;
    var limit = top + Math.max(24, (window.innerHeight - top) / 4);
    var best = null;
    document.querySelectorAll(HEADINGS).forEach(function (h) {
      if (h.getClientRects().length === 0) return;  // hidden (a closed dropdown)
      if (!best || h.getBoundingClientRect().top <= limit) best = h;
    });
    return best;
  }

  function update() {
    pending = false;
    var h = currentHeading();
    if (!h) return;
    var section = headingText(h);
    var anchor = anchorOf(h);
    document.querySelectorAll(LINK).forEach(function (link) {
      var url;
      try {
        url = new URL(link.href);
      } catch (err) {
        return;
      }
      var title = url.searchParams.get("title") || "";
      var body = url.searchParams.get("body") || "";
      var page = title.split(": ")[0];
      url.searchParams.set("title", page + ": " + section);
      url.searchParams.set("body", body.replace(
        /^\*\*Section:\*\* .*$/m,
        "**Section:** " + section + (anchor ? " (#" + anchor + ")" : "")));
      link.href = url.toString();
    });
  }

  function schedule() {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(update);
  }

  function setUp() {
    update();
    window.addEventListener("scroll", schedule, { passive: true });
    window.addEventListener("resize", schedule);
    window.addEventListener("hashchange", schedule);
    document.addEventListener("toggle", schedule, true);
    // Right before the reader follows the link, whatever moved the page since.
    document.querySelectorAll(LINK).forEach(function (link) {
      ["pointerdown", "focus", "keydown"].forEach(function (name) {
        link.addEventListener(name, update);
      });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
