"""The report's notebook pages: each executed notebook as an HTML page that reads offline.

``notebook_page`` converts one notebook: MathJax from the report folder (``install_mathjax``), no script from the
web, no machine or staging path (``scrub_paths``), and "–" where a table holds no value. ``write_pages`` brings a
report folder's pages up to date.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

# Copied beside the pages: MathJax 3's TeX-to-HTML component and the fonts it loads (static/mathjax/README.md).
MATHJAX_DIR = "mathjax"
MATHJAX_URL = f"{MATHJAX_DIR}/tex-chtml.js"  # relative: the pages sit beside the folder
# Marks a page written by ``notebook_page``; bump the number when the page changes, and ``write_pages`` rewrites
# the pages of an existing report folder.
PAGE_VERSION = "bab notebook page 6"
PAGE_MARKER = f'<meta name="generator" content="{PAGE_VERSION}">'
# the rules a page's claims were judged by (``judged_now``): a page judged by other rules is written again
RULES_MARKER = "<!-- bab:rules {digest} -->"

# MathJax 3 reads its configuration from window.MathJax before it loads (nbconvert's own block configures
# MathJax 2); nothing is loaded from the web: require.js, mermaid and the widget manager are left out, since
# the notebooks use none of them and an offline reader has no network.
PAGE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}
""" + PAGE_MARKER + """
{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}
<script>
window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']],
        processEscapes: true, processEnvironments: true, tags: 'ams'},
  options: {ignoreHtmlClass: 'tex2jax_ignore', processHtmlClass: 'tex2jax_process'}
};
</script>
<script src="{{ resources.mathjax_url }}" defer></script>
{%- endblock html_head_js_mathjax -%}
{%- block notebook_css -%}
<!-- bab:notebook-css -->{{ super() }}<!-- /bab:notebook-css -->
{%- endblock notebook_css -%}
"""
# The notebook stylesheet (JupyterLab's, about 260 kB) is the same on every page: written once beside the pages as
# notebook-<digest>.css and linked, not inlined in each (``shared_stylesheet``)
_NOTEBOOK_CSS = re.compile(r"<!-- bab:notebook-css -->(.*?)<!-- /bab:notebook-css -->", re.S)
_STYLE = re.compile(r"<style[^>]*>(.*?)</style>", re.S)
_CSS_FILE = re.compile(r'href="(notebook-[0-9a-f]+\.css)"')

# a table cell that pandas filled with its text for a missing value
_EMPTY_CELL = re.compile(r"(<t[dh]\b[^>]*>)\s*(?:NaN|nan|None|NaT|&lt;NA&gt;|<NA>)\s*(</t[dh]>)")
# characters that end a path in a page's text (quotes and entities included: the page is HTML)
_PATH_END = r"\s\"'<>()&,;`"
_CHECKOUT = "\x00checkout\x00"  # stands for the checkout while paths are rewritten


def install_mathjax(folder) -> Path:
    """Copy the vendored MathJax into ``folder``/mathjax (the pages load it from there); return the script's
    path."""
    from importlib import resources

    target = Path(folder) / MATHJAX_DIR
    with resources.as_file(resources.files("bab.report.pages") / "static" / MATHJAX_DIR) as source:
        shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("README.md"))
    return Path(folder) / MATHJAX_URL


def empty_cells_as_dashes(html: str) -> str:
    """Table cells that show a missing value (NaN, None, NaT, <NA>) show "–" instead."""
    return _EMPTY_CELL.sub(lambda m: f"{m.group(1)}–{m.group(2)}", html)


def scrub_paths(text: str, checkout=None, report=None) -> str:
    """``text`` without this machine's paths: a report folder's files (the staging folder's results path papermill
    injects) as ``results/<notebook>.json``, installed packages as ``site-packages/<package>/...``, the checkout's
    other files relative to it, temporary folders and home folders by neutral names. ``checkout``: the checkout's
    absolute path, ``report``: the report folder's, wherever it is; their ``<checkout>`` and ``<report>`` stand-ins
    (``bab.report.runner.build.scrub_machine_paths``) are handled either way."""
    for form in ([str(Path(report).resolve())] if report is not None else []) + ["<report>", "&lt;report&gt;"]:
        text = text.replace(form + "/", "")  # the report folder's own files: relative to it
    forms = ["<checkout>", "&lt;checkout&gt;"]
    if checkout is not None:
        forms.insert(0, str(Path(checkout).resolve()))
    data_dir = os.environ.get("BAB_DATA_DIR")
    if data_dir:
        text = text.replace(str(Path(data_dir).resolve()), "$BAB_DATA_DIR")
    for form in forms:
        text = text.replace(form, _CHECKOUT)
    end = _PATH_END
    text = re.sub(rf"{_CHECKOUT}/reports/[^/{end}]+/", "", text)  # a report folder's own files: relative to it
    if "-packages/" in text:  # its lazy scan from every "/" of a base64 figure: half a second a page
        text = re.sub(rf"(?:{_CHECKOUT}|(?<![\w.])/)[^{end}]*?/((?:site|dist)-packages)/", r"\1/", text)
    text = re.sub(rf"{_CHECKOUT}/", "", text)  # the checkout's other files: relative to it
    text = text.replace(_CHECKOUT, "the checkout")
    text = re.sub(rf"(?<![\w.~])/(?:var/)?tmp/(?:[^{end}]*/)?", "(temporary folder)/", text)
    text = re.sub(rf"(?<![\w.~])/(?:home|Users)/[^/{end}]+(?=[/{end}]|$)", "~", text)
    return re.sub(rf"(?<![\w.~])/root(?=[/{end}]|$)", "~", text)


def _page_notebook(ipynb):
    """The executed notebook as its page shows it: outputs of widgets (progress bars, which need a live kernel to
    draw) left out."""
    import nbformat

    nb = nbformat.read(str(ipynb), as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs
                            if "application/vnd.jupyter.widget-view+json" not in o.get("data", {})]
    return nb


def judged_now(ipynb, profile=None) -> str:
    """The claims this notebook's rows test, judged by the rules as they are now, as an HTML section for the end of
    its page ("" when the report folder holds no rows of it): a page built later than its notebook ran then shows
    the verdicts the front page gives, beside the table the notebook showed when it ran. ``profile``: the report's,
    for the test-set sizes of rows that do not carry theirs."""
    from bab.core import outcomes
    from bab.report.claims import Evidence, judgement_table, registry_digest
    from bab.report.results.contract import read_json

    results = Path(ipynb).parent / "results"
    data = read_json(results / f"{Path(ipynb).stem}.json") or {}
    if not data.get("rows"):
        return ""
    npz = results / f"{Path(ipynb).stem}.outcomes.npz"
    evidence = Evidence(profile=profile, outcomes=outcomes.read(npz) if npz.is_file() else {})
    table = judgement_table(data["rows"], evidence)
    if table.empty:
        return ""
    return (f'<section id="claims-now" style="margin: 2em 1em"><h2>The papers\' claims on this page\'s rows, '
            f'judged by the rules now</h2><p>Rules digest <code>{registry_digest()}</code> '
            f'(<code>bab/report/claims/rules/</code>), as on the front page. The table the notebook showed when it '
            f'ran was judged by the rules of then; where the two differ, this one holds.</p>'
            f'{table.to_html(index=False, escape=True, border=0)}</section>')


def notebook_page(ipynb, out, checkout=None, profile=None) -> Path:
    """Write the executed notebook ``ipynb`` as an HTML page ``out`` that reads offline (MathJax from ``mathjax/``
    beside it: ``install_mathjax``), with no path of this machine (``scrub_paths``), "–" in table cells without
    a value, and its claims judged by the rules now at the end (``judged_now``)."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(raw_template=PAGE_TEMPLATE, mathjax_url=MATHJAX_URL)
    # the page's title names the notebook (nbconvert's default is "Notebook")
    body, _ = exporter.from_notebook_node(_page_notebook(ipynb), resources={"metadata": {"name": Path(ipynb).stem}})
    body = shared_stylesheet(body, Path(out).parent)
    closing = f"{judged_now(ipynb, profile)}\n{RULES_MARKER.format(digest=_rules_digest())}\n</body>"
    body = body.replace("</body>", closing, 1)
    Path(out).write_text(scrub_paths(empty_cells_as_dashes(body), checkout, Path(out).parent), encoding="utf-8")
    return Path(out)


def shared_stylesheet(html: str, folder) -> str:
    """``html`` with its notebook stylesheet (the template's marked ``<style>`` elements) moved to
    ``folder``/notebook-<digest>.css, written there unless it exists, and linked in their place."""
    found = _NOTEBOOK_CSS.search(html)
    if found is None:
        return html
    css = "\n".join(style.strip() for style in _STYLE.findall(found.group(1))) + "\n"
    name = f"notebook-{hashlib.sha256(css.encode()).hexdigest()[:12]}.css"
    target = Path(folder) / name
    if not target.is_file():
        target.write_text(css, encoding="utf-8")
    return html[:found.start()] + f'<link rel="stylesheet" type="text/css" href="{name}">' + html[found.end():]


def _rules_digest() -> str:
    from bab.report.claims import registry_digest

    return registry_digest()


def page_is_current(page) -> bool:
    """Whether ``page`` exists, was written by this version of ``notebook_page`` and judged by the rules now."""
    page = Path(page)
    if not page.is_file():
        return False
    with page.open(encoding="utf-8", errors="replace") as f:
        if f'content="{PAGE_VERSION}"' not in f.read(4096):  # the marker sits right after the title
            return False
    return RULES_MARKER.format(digest=_rules_digest()) in page.read_text(encoding="utf-8", errors="replace")


def linked_stylesheets(page) -> list[str]:
    """The names of the shared stylesheets (notebook-<digest>.css, beside it) a notebook page links."""
    return _CSS_FILE.findall(Path(page).read_text(encoding="utf-8"))


def write_pages(folder, checkout=None, profile=None) -> dict[str, str]:
    """Give every executed notebook (``<stem>.ipynb``) in a report folder its page (``<stem>.html``) where the page
    is missing or older than this version of ``notebook_page``, and put MathJax beside them. Returns {stem: error}
    of the notebooks whose page could not be written (their earlier page, if any, is kept)."""
    folder = Path(folder)
    install_mathjax(folder)
    errors = {}
    for ipynb in sorted(folder.glob("*.ipynb")):
        page = ipynb.with_suffix(".html")
        if (page_is_current(page) and page.stat().st_mtime >= ipynb.stat().st_mtime
                and all((folder / name).is_file() for name in linked_stylesheets(page))):
            continue  # a page copied in without its stylesheet is written again, with it
        try:
            notebook_page(ipynb, page, checkout, profile)
        except Exception as exc:  # a notebook that cannot be read keeps its old page; the others go on
            errors[ipynb.stem] = f"{type(exc).__name__}: {exc}"
    linked = {name for page in folder.glob("*.html") for name in linked_stylesheets(page)}
    for stylesheet in folder.glob("notebook-*.css"):
        if stylesheet.name not in linked:  # an older converter's, no page links it any more
            stylesheet.unlink()
    return errors
