"""Multi-Vector Attention Models for Deep Re-ranking.

Zhou and Devlin (../shared/papers/mva.txt): MVA re-ranking with learned pooling
tokens and down-projected document vectors. Until the MVA issue lands this
package only names its paper.
"""
