"""Conformer-Kernel with Query Term Independence (NDRM1, NDRM2, NDRM3).

TREC 2020 Deep Learning track (../shared/papers/conformer-kernel.txt). The models
arrive with the Conformer-Kernel issue; until then this package only names its paper.
"""
