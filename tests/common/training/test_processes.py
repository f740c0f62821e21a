"""`common.training.processes`: the process group is gone before the interpreter tears down."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, socket
    import torch.distributed as dist
    from common.training.processes import leave_process_group_at_exit

    atexit.register(lambda: print("group at exit:", dist.is_initialized()))  # registered first, so run last
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{{port}}", rank=0, world_size=1)
    if {leave}:
        leave_process_group_at_exit()
        leave_process_group_at_exit()  # twice registers it once
""")


@pytest.mark.parametrize("leave", [True, False])
def test_the_group_is_destroyed_at_exit(leave):
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(leave=leave)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"group at exit: {not leave}"]
