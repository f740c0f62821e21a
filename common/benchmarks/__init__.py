"""The harness every ``python -m <package>.benchmark`` command is built on, one module per topic: its options, its
run and files, timing, memory, a measurement in a fresh process, the machine, plots, fits, store reads and BERT
inputs. torch is imported only inside what needs it, so a benchmark's ``--help`` does not wait for it."""
