"""A seed fixes the run whatever the number of loader workers: a `qds.train` run with 2 workers (kept between epochs)
ends as the one that loads in its main process, byte for byte.

The items depend on the seed, the epoch and the index alone, and the epoch comes with each index
(`common.training.global_batch`); the workers' base seed comes from a generator of the loader's own, not from the
one that draws the training order.
"""

import subprocess
import sys

import pytest

from tests.qds.test_resume import OUTPUTS, TINY

pytestmark = pytest.mark.slow

#: test_resume's tiny run cut to 12 steps, dev every 6, the loss logged every 2.
RUN = [*TINY, "--trainer.max_steps", "12", "--trainer.val_check_interval", "6", "--trainer.log_every_n_steps", "2",
       "--save_every_n_steps", "4"]


def test_two_loader_workers_give_the_run_of_none(tmp_path):
    for workers in (0, 2):
        done = subprocess.run([sys.executable, "-m", "qds.train", *RUN, "--data.num_workers", str(workers),
                               "--output_dir", f"w{workers}"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
    for output in OUTPUTS:
        assert (tmp_path / "w2" / output).read_bytes() == (tmp_path / "w0" / output).read_bytes(), output
