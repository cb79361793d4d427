"""Copy the JavaScript the site serves itself from node_modules into _assets/third_party/.

The built pages must need no host but their own (a classroom network may block CDNs), so MathJax 3,
require.js and the ipywidgets HTML manager come from ``npm ci`` (versions pinned in package.json
and package-lock.json) and are copied here; ``_config.yml`` names ``_assets`` in
``html_static_path`` and points ``mathjax_path`` and ``nb_ipywidgets_js`` at these copies.
axe-core comes the same way for the browser test, which injects it into every page to audit its
accessibility offline; ``_config.yml`` excludes it from the site's ``_static``.
Only what is used is copied. ``_assets/third_party/`` is generated: it is git-ignored.

Usage: python scripts/vendor_assets.py   (after ``npm ci``; ``make book`` runs both)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODE = ROOT / "node_modules"
VENDOR = ROOT / "_assets" / "third_party"

# (package folder, files or folders inside it, destination folder under VENDOR)
COPIES = [
    # MathJax: the combined component, then what it loads on demand from its own folder: TeX
    # extensions (\boldsymbol, ...), the CHTML fonts, and the menu's accessibility tools.
    ("mathjax", ["LICENSE", "es5/tex-mml-chtml.js", "es5/input/tex/extensions",
                 "es5/output/chtml/fonts", "es5/a11y", "es5/ui", "es5/sre"], "mathjax"),
    ("requirejs", ["require.js", "README.md"], "requirejs"),
    # The widget manager finds its icon fonts next to the path require.js maps
    # "@jupyter-widgets" to (see _assets/attnbook-widgets.js), so the fonts sit beside it.
    ("@jupyter-widgets/html-manager", ["LICENSE", "dist/embed-amd.js", "dist/*.woff2",
                                       "dist/*.woff", "dist/*.ttf", "dist/*.eot", "dist/*.svg"],
     "html-manager"),
    # The accessibility audit of tests/test_site_browser.py (not served by the site).
    ("axe-core", ["LICENSE", "axe.min.js"], "axe-core"),
]


def _strip(rel: str) -> str:
    """Drop the build folder (es5/, dist/): the copies sit at the top of their folder."""
    for prefix in ("es5/", "dist/"):
        if rel.startswith(prefix):
            return rel[len(prefix):]
    return rel


def main() -> int:
    if not NODE.is_dir():
        print("node_modules/ is missing: run `npm ci` first", file=sys.stderr)
        return 1
    if VENDOR.exists():
        shutil.rmtree(VENDOR)
    versions = {}
    for package, items, dest in COPIES:
        src = NODE / package
        versions[package] = json.loads((src / "package.json").read_text())["version"]
        for item in items:
            matches = sorted(src.glob(item))
            if not matches:
                raise FileNotFoundError(f"{package}: nothing matches {item}")
            for path in matches:
                target = VENDOR / dest / _strip(path.relative_to(src).as_posix())
                target.parent.mkdir(parents=True, exist_ok=True)
                if path.is_dir():
                    shutil.copytree(path, target)
                else:
                    shutil.copy2(path, target)
    (VENDOR / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
    size = sum(p.stat().st_size for p in VENDOR.rglob("*") if p.is_file()) / 2**20
    print(f"vendored {', '.join(f'{k}@{v}' for k, v in versions.items())} "
          f"into {VENDOR.relative_to(ROOT)} ({size:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
