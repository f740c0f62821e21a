"""What the four paper packages share: data loading, metrics, sparse attention kernels, reporting."""
