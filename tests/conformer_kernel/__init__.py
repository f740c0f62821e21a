"""The Conformer-Kernel's inner modules as the tests build them: over the LightningCLI classes' defaults (the
model's read from `ConformerKernelRanker`'s signature, the featuriser's limits from `conformer_kernel`), `given`
over them."""

import inspect


def model_settings(**given) -> dict:
    """`conformer_kernel.model.SETTINGS` but ``model`` and ``vocab_size``, as `ConformerKernelRanker` defaults them."""
    from conformer_kernel.model import SETTINGS
    from conformer_kernel.ranker import ConformerKernelRanker

    defaults = inspect.signature(ConformerKernelRanker).parameters
    return {**{name: defaults[name].default for name in SETTINGS[2:]}, **given}


def ndrm1_options(**given) -> dict:
    """`NDRM1`'s (and `NDRM3`'s) options but ``vocab_size``: the ranker's defaults, its Conformer's separable attention."""
    settings = model_settings()
    del settings["encoder"]
    return {**settings, "separable": True, **given}


def featurizer_of(resources, **given):
    """A `Featurizer` of `resources` with the data module's limits (`conformer_kernel.portable.INPUTS`)."""
    from conformer_kernel.features import Featurizer
    from conformer_kernel.portable import INPUTS

    return Featurizer(resources, **{**INPUTS, **given})
