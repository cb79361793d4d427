/*
 * Accessible names for what the ipywidgets HTML manager draws (added by _ext/attnbook_a11y.py on
 * every page; the browser test's axe audit checks the result). The manager renders a widget's
 * stored figures as <img> without alternative text, and its sliders and drop-downs without a
 * name when the control has no description. This script, once the widgets are drawn and again
 * whenever they change:
 *
 * - gives each figure in a widget alternative text: the description the lab stored with it
 *   (attnbook.lab.static_widgets puts it in the figure's output metadata,
 *   {"image/png": {"alt": ...}}, in the saved widget state), else the values of the controls
 *   that select its view ("T = 8, layout = zigzag");
 * - names each slider handle and drop-down after its control (its description, else "control
 *   k of this widget"), and makes a slider announce the selected value, not its index.
 */
(function () {
  "use strict";

  var STATE = 'script[type="application/vnd.jupyter.widget-state+json"]';
  var VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]';
  var STATIC = "attnbook-static-interact";
  var VIEWS = "attnbook-static-views";
  var cached = null;

  function savedState() {
    if (cached) return cached;
    var el = document.querySelector(STATE);
    try {
      cached = el ? JSON.parse(el.textContent).state || {} : {};
    } catch (err) {
      cached = {};
    }
    return cached;
  }

  function modelOf(id) {
    return savedState()[String(id).replace(/^IPY_MODEL_/, "")] || null;
  }

  function describe(model, k) {
    var d = model && model.state && model.state.description;
    d = d ? String(d).replace(/<[^>]*>/g, "").replace(/\$/g, "").trim() : "";
    return d || "control " + (k + 1) + " of this widget";
  }

  // The static widgets drawn on the page: their root element and the models of their controls.
  function staticWidgets() {
    var out = [];
    var scripts = document.querySelectorAll(VIEW);
    for (var i = 0; i < scripts.length; i++) {
      var id;
      try {
        id = JSON.parse(scripts[i].textContent).model_id;
      } catch (err) {
        continue;
      }
      var model = modelOf(id);
      if (!model || (model.state._dom_classes || []).indexOf(STATIC) < 0) continue;
      var output = scripts[i].closest(".cell_output") || scripts[i].parentElement;
      var root = output && output.querySelector("." + STATIC);
      if (!root) continue;
      var kids = model.state.children || [];
      out.push({ root: root, controls: kids.slice(0, -1).map(modelOf),
                 stack: modelOf(kids[kids.length - 1]) });
    }
    return out;
  }

  // Which view an element belongs to: the index chosen at each level of stacks, outermost first.
  function viewPath(el, root) {
    var path = [];
    for (var node = el; node && node !== root; node = node.parentElement) {
      var parent = node.parentElement;
      if (parent && parent.classList.contains(VIEWS)) {
        path.unshift(Array.prototype.indexOf.call(parent.children, node));
      }
    }
    return path;
  }

  // The Output model of the view at this path, and the alt text stored with its k-th figure.
  function storedAlt(widget, path, k) {
    var node = widget.stack;
    for (var d = 0; d < path.length && node && node.model_name === "StackModel"; d++) {
      node = modelOf((node.state.children || [])[path[d]]);
    }
    if (!node || node.model_name !== "OutputModel") return "";
    var figures = (node.state.outputs || []).filter(function (o) {
      return o.data && o.data["image/png"] !== undefined;
    });
    var meta = figures[k] && figures[k].metadata && figures[k].metadata["image/png"];
    return meta && meta.alt ? String(meta.alt) : "";
  }

  function altFromControls(widget, path) {
    var parts = [];
    widget.controls.forEach(function (model, k) {
      var labels = (model && model.state._options_labels) || [];
      if (path[k] !== undefined && labels[path[k]] !== undefined) {
        var name = describe(model, k);
        parts.push((/^control \d/.test(name) ? "" : name + " = ") + labels[path[k]]);
      }
    });
    return parts.length ? "Figure of this widget for " + parts.join(", ") : "";
  }

  function nameImages(widgets) {
    var imgs = document.querySelectorAll(".cell_output .jupyter-widgets img, .cell_output .widget-output img");
    for (var i = 0; i < imgs.length; i++) {
      var img = imgs[i];
      if (img.hasAttribute("alt") && img.getAttribute("data-attnbook-alt") === null) continue;
      var alt = "";
      for (var w = 0; w < widgets.length; w++) {
        if (widgets[w].root.contains(img)) {
          var path = viewPath(img, widgets[w].root);
          var view = img.closest(".widget-output");
          var k = view ? Array.prototype.indexOf.call(view.querySelectorAll("img"), img) : 0;
          alt = storedAlt(widgets[w], path, k) || altFromControls(widgets[w], path);
          break;
        }
      }
      if (!alt) alt = "Figure of this widget in its saved state";
      if (img.getAttribute("alt") !== alt) {
        img.setAttribute("alt", alt);
        img.setAttribute("data-attnbook-alt", "");
      }
    }
  }

  function nameControls(widgets) {
    widgets.forEach(function (widget) {
      var children = widget.root.children;
      widget.controls.forEach(function (model, k) {
        var el = children[k];
        if (!el || !model) return;
        var name = describe(model, k);
        var labels = model.state._options_labels || [];
        el.querySelectorAll(".noUi-handle, select").forEach(function (control) {
          if (!control.getAttribute("aria-label")) control.setAttribute("aria-label", name);
          var now = control.getAttribute("aria-valuenow");
          if (now !== null && labels[Math.round(Number(now))] !== undefined) {
            var text = String(labels[Math.round(Number(now))]);
            if (control.getAttribute("aria-valuetext") !== text) {
              control.setAttribute("aria-valuetext", text);
            }
          }
        });
      });
    });
    // Any other widget control left without a name (a live widget with no description).
    var rest = document.querySelectorAll(".cell_output .noUi-handle, .cell_output .jupyter-widgets select");
    for (var i = 0; i < rest.length; i++) {
      var control = rest[i];
      if (control.getAttribute("aria-label")) continue;
      var box = control.closest(".widget-inline-hbox, .widget-dropdown, .widget-slider");
      var label = box && box.querySelector(".widget-label");
      var text = label ? label.textContent.trim() : "";
      control.setAttribute("aria-label", text || "a control of this widget");
    }
  }

  var scheduled = false;
  function pass() {
    scheduled = false;
    if (!document.querySelector(VIEW)) return;
    var widgets = staticWidgets();
    nameImages(widgets);
    nameControls(widgets);
  }
  function schedule() {
    if (!scheduled) {
      scheduled = true;
      window.requestAnimationFrame(pass);
    }
  }

  function start() {
    if (!document.querySelector(VIEW)) return;
    schedule();
    new MutationObserver(schedule).observe(document.body, {
      childList: true,
      subtree: true,
      attributes: true,
      attributeFilter: ["aria-valuenow"],
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
