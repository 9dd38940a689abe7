"""The notebooks' models at their quick shapes, each with one training batch, for the training-step benches
(``bench heads --training``, ``bench precision``). The commands layer builds them: it may import the studies, which
the method layers (``bab.heads``, ``bab.core``) that time them may not.

The custom encoders (01, 02) train on a batch of their data; the others take their quick profile's shape and batch
on random inputs (MiniLM and SmolLM2 with their packaged weights; the ViT and the from-scratch GPT-2 freshly built).
"""

from __future__ import annotations


def quick_training_case(study_name: str, seed: int = 0):
    """(model, input ids [B, T], labels [B]): a fresh gated encoder of ``study_name`` ("synthetic": notebook 01,
    "ag_news_custom": 02) at its quick profile and one training batch of its data (AG News: texts of similar
    length, as the quick profile's length-grouped batches)."""
    import torch

    from bab.experiments.profiles import get_profile
    from bab.heads.encoder import EncoderClassifier

    profile = get_profile(study_name, "quick")
    if study_name == "synthetic":
        from bab.experiments.synthetic import SyntheticExperiment

        study, batch_size = SyntheticExperiment(profile, progress=False), profile.scratch.batch_size
    elif study_name == "ag_news_custom":
        from bab.experiments.text import TextStudy

        study, batch_size = TextStudy(profile, experiment=study_name, progress=False), profile.warm.batch_size
    else:
        raise ValueError(f"study_name must be 'synthetic' or 'ag_news_custom', got {study_name!r}")
    ids, labels = study.splits()["train"].tensors
    generator = torch.Generator().manual_seed(seed)
    start = int(torch.randint(0, len(ids) - batch_size, (1,), generator=generator))
    order = ids.ne(study.model_config().pad_id).sum(1).argsort(stable=True)[start:start + batch_size]
    torch.manual_seed(seed)
    return EncoderClassifier(study.model_config("budget")), ids[order], labels[order]


def _custom_encoder(study_name: str):
    import torch.nn.functional as F

    model, ids, labels = quick_training_case(study_name)

    def loss_of(m):
        out = m(ids, budget=0.5, mode="soft")
        return F.cross_entropy(out.logits, labels) + out.cost

    return model, loss_of


def _minilm():
    import torch

    from bab.experiments.profiles import get_profile
    from bab.heads.hf_encoder import load_classifier

    profile = get_profile("bert_ag_news", "quick")
    model = load_classifier(profile.model, num_labels=4)[0]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, model.config.vocab_size, (profile.warm.batch_size, profile.max_len), generator=g)
    labels = torch.randint(0, 4, (len(ids),), generator=g)
    return model, lambda m: m(input_ids=ids, labels=labels).loss


def _vit():
    import torch
    import torch.nn.functional as F

    from bab.experiments.profiles import get_profile
    from bab.sparsifiner.vit import ViTClassifierConfig, build_vit

    profile = get_profile("vit_sparsifiner", "quick")
    config = ViTClassifierConfig(**profile.model)
    torch.manual_seed(0)
    model = build_vit(config)
    g = torch.Generator().manual_seed(0)
    images = torch.randn(profile.dense.batch_size, config.num_channels, config.image_size, config.image_size,
                         generator=g)
    labels = torch.randint(0, config.num_classes, (len(images),), generator=g)
    return model, lambda m: F.cross_entropy(m(images).logits, labels)


def _decoder(experiment: str):
    import torch

    from bab.experiments.profiles import get_profile

    profile = get_profile(experiment, "quick")
    if experiment == "gpt2_context_pruning":
        from bab.experiments.context_pruning import ContextPruningStudy

        study = ContextPruningStudy(profile, progress=False)
        model, train = study.new_model(), profile.dense
    else:
        from bab.context.pretrained import load_hf_decoder

        model, train = load_hf_decoder(profile.source)[0], profile.finetune
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (train.batch_size, train.context), generator=g)
    return model, lambda m: m(input_ids=ids, labels=ids, use_cache=False).loss


PRECISION_CASES = {  # notebook -> (what is timed, how to build it)
    "01": ("custom encoder, synthetic task", lambda: _custom_encoder("synthetic")),
    "02": ("custom encoder, AG News", lambda: _custom_encoder("ag_news_custom")),
    "03": ("MiniLM, AG News shape (also 04's)", _minilm),
    "05": ("ViT, 50 tokens", _vit),
    "06": ("GPT-2 from scratch", lambda: _decoder("gpt2_context_pruning")),
    "07": ("SmolLM2-135M", lambda: _decoder("pretrained_context_pruning")),
}


def chosen_cases(only: str) -> list[str]:
    """The notebooks of a comma-separated ``--only`` among ``PRECISION_CASES``, or a ValueError naming them."""
    chosen = [n.strip() for n in only.split(",") if n.strip()]
    if not chosen or any(n not in PRECISION_CASES for n in chosen):
        raise ValueError(f"--only takes notebooks among {', '.join(PRECISION_CASES)}, got {only!r}")
    return chosen
