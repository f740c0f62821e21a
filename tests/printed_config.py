"""The config a training command resolves, as ``--print_config`` prints it (the configs' tests)."""

import contextlib
import io
import sys
from unittest import mock

import pytest
import yaml


def printed_config(main, name: str, *args: str) -> dict:
    """The config ``python -m <name> ARGS --print_config`` resolves (`main`: the command's), pytest's own command
    line out of sys.argv (LightningCLI warns about it beside `args`)."""
    out = io.StringIO()
    with mock.patch.object(sys, "argv", [name]), contextlib.redirect_stdout(out), \
            pytest.raises(SystemExit) as exit_info:
        main([*args, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(out.getvalue())
