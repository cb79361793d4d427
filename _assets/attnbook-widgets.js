/*
 * Static-site support for the labs' ipywidgets. myst-nb loads this file on pages that hold saved
 * widget state, after require.js and before the widget manager (embed-amd.js): see
 * nb_ipywidgets_js in _config.yml. It does three things.
 *
 * 1. require.js maps "@jupyter-widgets" to this site's copy of the widget manager. The manager
 *    asks for its icon fonts next to the URL require.js gives its modules, so they come from here
 *    too and the page needs no other host.
 * 2. ipywidgets 8 controls typeset their labels with the MathJax 2 API (MathJax.Hub.Queue); the
 *    site runs MathJax 3, so a small MathJax.Hub forwards those calls to MathJax.typesetPromise.
 * 3. Below each widget with controls that are not precomputed, a note says that this is the saved
 *    default view and that moving the controls needs a live kernel, with a link that opens the lab
 *    in Colab. Widgets made by attnbook.lab.static_widgets.static_interact (a VBox with the class
 *    attnbook-static-interact) need no note: every view is stored and the controls switch them.
 */
(function () {
  "use strict";

  var script = document.currentScript;
  var staticRoot = new URL(".", script ? script.src : document.baseURI).href; // .../_static/

  // 1. Serve the widget manager's modules (and so its fonts) from _static/third_party/html-manager.
  if (window.requirejs) {
    var manager = staticRoot + "third_party/html-manager";
    window.requirejs.config({
      paths: {
        "@jupyter-widgets/html-manager/dist": manager,
        "@jupyter-widgets": manager,
      },
    });
  }

  // 2. MathJax 2's Hub.Queue(["Typeset", MathJax.Hub, element]) on top of MathJax 3.
  function typeset(element) {
    var mj = window.MathJax;
    if (!mj || !mj.startup || !mj.startup.promise || !mj.typesetPromise) return;
    mj.startup.promise
      .then(function () {
        return mj.typesetPromise(element ? [element] : undefined);
      })
      .catch(function (err) {
        console.warn("MathJax typeset of a widget failed:", err);
      });
  }

  function installHub() {
    var mj = window.MathJax;
    if (!mj || !mj.version || (mj.Hub && mj.Hub.Queue)) return;
    mj.Hub = {
      Queue: function () {
        for (var i = 0; i < arguments.length; i++) {
          var job = arguments[i];
          if (Array.isArray(job) && job[0] === "Typeset") typeset(job[2]);
          else if (typeof job === "function") job();
        }
      },
      Typeset: function (element) {
        typeset(element);
      },
    };
  }

  // 3. The note under each widget output that has controls (a progress bar needs none).
  var CONTAINERS = /^(Box|VBox|HBox|GridBox|Accordion|Tab|Stack|Output|Layout)Model$/;
  var CONTROLS = /Slider|Dropdown|Checkbox|ToggleButton|RadioButtons|Select|Text|Button|Combobox|Picker|Play/;

  function savedState() {
    var el = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
    try {
      return el ? JSON.parse(el.textContent).state || {} : {};
    } catch (err) {
      return {};
    }
  }

  function isStatic(state, modelId) {
    var model = state[modelId];
    var classes = (model && model.state && model.state._dom_classes) || [];
    return classes.indexOf("attnbook-static-interact") >= 0;
  }

  function hasControls(state, modelId, seen) {
    var model = state[modelId];
    if (!model || seen[modelId]) return false;
    seen[modelId] = true;
    var name = model.model_name || "";
    if (!/Style|Layout/.test(name) && !CONTAINERS.test(name) && CONTROLS.test(name)) return true;
    var refs = JSON.stringify(model.state || {}).match(/IPY_MODEL_[0-9a-f]+/g) || [];
    for (var i = 0; i < refs.length; i++) {
      if (hasControls(state, refs[i].slice(10), seen)) return true;
    }
    return false;
  }

  function colabLink() {
    var link = document.querySelector('a[href^="https://colab.research.google.com/"]');
    return link ? link.href : null;
  }

  function addNotes() {
    var views = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]');
    var state = savedState();
    var href = colabLink();
    var seen = [];
    for (var i = 0; i < views.length; i++) {
      var output = views[i].closest(".cell_output") || views[i].parentElement;
      var modelId;
      try {
        modelId = JSON.parse(views[i].textContent).model_id;
      } catch (err) {
        continue;
      }
      if (seen.indexOf(output) >= 0 || isStatic(state, modelId)) continue;
      if (!hasControls(state, modelId, {})) continue;
      seen.push(output);
      var note = document.createElement("p");
      note.className = "attnbook-widget-note";
      note.appendChild(
        document.createTextNode(
          "This is the saved default view: on this page the controls do not redraw the figure, " +
            "because that needs a live Python kernel. "
        )
      );
      if (href) {
        var a = document.createElement("a");
        a.href = href;
        a.target = "_blank";
        a.rel = "noopener";
        a.textContent = "Open this lab in Colab";
        note.appendChild(a);
        note.appendChild(document.createTextNode(" (or in Jupyter) to move them."));
      } else {
        note.appendChild(
          document.createTextNode("Open this lab in Colab (the rocket icon) to move them.")
        );
      }
      output.parentNode.insertBefore(note, output.nextSibling);
    }
  }

  function onReady() {
    installHub();
    addNotes();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", onReady);
  } else {
    onReady();
  }
  // MathJax loads with defer, so it exists by DOMContentLoaded; check again before the widget
  // manager renders (it does so on "load") in case MathJax was slower.
  window.addEventListener("load", installHub);
})();
