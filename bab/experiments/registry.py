"""Every notebook once: its experiments and their profiles, the package holding its study, the paper it
reproduces, whether the report runs it once per seed, and the steps ``python -m bab train / evaluate`` run for it.

Adding a notebook means adding its folder under ``bab/experiments/`` and one ``Notebook`` in ``NOTEBOOKS``. What
the rest of bab needs is derived from it: the profiles by experiment name (``bab.experiments.profiles``), the
packages that declare method sets (``bab.experiments.methods``), the train and evaluate commands' notebooks
(``bab.experiments.steps``), the seeded notebooks (``bab.report.results.seeds``) and the front page's panel of each
experiment (``bab.report.pages.figures``). Modules are named by strings and imported on first use, so asking for the
synthetic profile does not import transformers for the BERT studies.
"""

from __future__ import annotations

from dataclasses import dataclass

# The papers reproduced, in the order the front page shows their panels
BUDGETED_ATTENTION = "budgeted attention"
DYNAMIC_CONTEXT_PRUNING = "dynamic context pruning"
SPARSIFINER = "sparsifiner"
PAPERS = (BUDGETED_ATTENTION, DYNAMIC_CONTEXT_PRUNING, SPARSIFINER)


@dataclass(frozen=True)
class Notebook:
    """One notebook, ``notebooks/<stem>.ipynb``, and its study.

    ``profiles``: (experiment name, the attribute of ``module`` holding its {profile name: profile}) for each
    experiment whose profiles the notebook runs; the first is the notebook's own (its seeds and steps use it).
    ``module`` also holds ``METHOD_SETS``, the rows the notebook reports. ``study`` names the study class of
    ``module`` that ``training_steps`` / ``evaluation_steps`` (``"module:function"``, each listing the steps of a
    study, ``bab.experiments.steps``) take; "" where the notebook has no such steps.
    """

    stem: str
    module: str
    paper: str
    profiles: tuple[tuple[str, str], ...]
    seeded: bool = False  # run once per seed of its profile's ``report_seeds`` (bab.report.results.seeds)
    study: str = ""
    training_steps: str = ""
    evaluation_steps: str = ""

    def __post_init__(self):
        if self.paper not in PAPERS:
            raise ValueError(f"notebook {self.stem}: paper must be one of {PAPERS}, got {self.paper!r}")
        if not self.profiles:
            raise ValueError(f"notebook {self.stem}: name at least one (experiment, profiles attribute)")
        if bool(self.study) != bool(self.training_steps) or (self.evaluation_steps and not self.study):
            raise ValueError(f"notebook {self.stem}: steps need the study class they take, and a study its "
                             f"training steps")

    @property
    def number(self) -> str:
        """The stem's first two characters ("05"): the report's ``--only`` and the commands' notebook name."""
        return self.stem[:2]

    @property
    def experiment(self) -> str:
        """The notebook's own experiment: the first of ``profiles``."""
        return self.profiles[0][0]


NOTEBOOKS = (
    Notebook("01_synthetic", "bab.experiments.synthetic", BUDGETED_ATTENTION, (("synthetic", "SYNTHETIC"),),
             seeded=True),
    Notebook("02_ag_news_custom", "bab.experiments.text", BUDGETED_ATTENTION, (("ag_news_custom", "AG_NEWS"),),
             seeded=True),
    Notebook("03_bert_ag_news", "bab.experiments.bert", BUDGETED_ATTENTION, (("bert_ag_news", "BERT_AG_NEWS"),),
             seeded=True, study="BertStudy", training_steps="bab.experiments.steps:bert_training_steps"),
    Notebook("04_dbpedia_bert", "bab.experiments.bert", BUDGETED_ATTENTION, (("bert_dbpedia14", "BERT_DBPEDIA"),),
             seeded=True, study="BertStudy", training_steps="bab.experiments.steps:bert_training_steps"),
    Notebook("05_vit_sparsifiner", "bab.experiments.vit", SPARSIFINER, (("vit_sparsifiner", "VIT"),),
             seeded=True, study="ViTStudy", training_steps="bab.experiments.steps:vit_training_steps"),
    Notebook("06_gpt2_context_pruning", "bab.experiments.context_pruning", DYNAMIC_CONTEXT_PRUNING,
             (("gpt2_context_pruning", "GPT2_CONTEXT_PRUNING"),), seeded=True, study="ContextPruningStudy",
             training_steps="bab.experiments.steps:gpt2_training_steps"),
    Notebook("07_pretrained_decoder_context_pruning", "bab.experiments.pretrained_context", DYNAMIC_CONTEXT_PRUNING,
             (("pretrained_context_pruning", "PRETRAINED_CONTEXT_PRUNING"),), seeded=True,
             study="PretrainedContextStudy", training_steps="bab.experiments.steps:decoder_training_steps",
             evaluation_steps="bab.experiments.steps:decoder_evaluation_steps"),
)

# the packages holding the notebooks' studies, each once, in notebook order (03 and 04 share bab.experiments.bert)
MODULES = tuple(dict.fromkeys(notebook.module for notebook in NOTEBOOKS))
