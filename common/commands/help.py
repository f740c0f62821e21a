"""The front door of every training command: ``--help`` and bad options answered without importing Lightning.

Importing Lightning takes seconds, and a LightningCLI parser cannot exist without it.
So each command's help text and a schema of its options are generated from the real parser
(`common.commands.cli.RankerCLI`'s) and committed beside the command, ``<package>/train.help.txt`` and
``<package>/train.options.yaml``. The command's ``main`` calls `check_command_line` first; it imports only
the standard library and PyYAML:

- ``-h``/``--help`` prints the stored help and exits 0 (with ``--config`` or ``--ckpt_path``, whose
  defaults the help would show instead, the real parser answers);
- each ``--option value`` (or ``--option=value``) is checked against the schema: an unknown option (with
  the closest known one), a value of the wrong type, not one of the choices, or out of range (a
  ``jsonargparse.typing.PositiveInt``...), a missing value or a stray argument end in one line,
  ``error: --model.window: must be a positive integer, got 0``, and exit status 2 (`common.refusals`);
- the run ``--ckpt_path`` names is checked (`common.commands.run_folder.resumed_run`): a missing checkpoint, nothing to
  resume, or a finished run is answered here;
- the command's own check of what no single type rules out (heads dividing the hidden size...) runs
  on the settings resolved as the parser would: option defaults, the default config (or the
  ``--config`` files), then the flags in order.

It never refuses what the real parser accepts: what it does not understand passes on to it (values of
complex types, nested keys under them such as ``--data.train.topics_path``, ``--trainer.callbacks+=...``,
``--optimizer ...``, config files' contents, ``--print_config``, ``--<class>.help``); the real parser
then answers, also in one line (`common.commands.cli.RankerCLI`). The cross-option check is skipped where the
settings cannot be known here (a section config such as ``--model FILE``, ``--ckpt_path last``, which
resumes with its run's ``config.yaml``) or would not be checked there (``--print_config``).

``python -m common.commands.help --write`` regenerates the files of every command in `COMMANDS`;
``--check`` exits 1 naming those that differ from what the live parser gives (a test runs it, so the
committed files cannot go stale).
"""

from __future__ import annotations

import argparse
import difflib
import operator
import os
import re
import sys
from collections.abc import Callable
from contextlib import contextmanager
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from types import NoneType, UnionType
from typing import Literal, Union, get_args, get_origin

import yaml

from common.commands.run_folder import resumed_run
from common.refusals import ArgumentParser, usage_error

#: Each training command, a module whose ``COMMAND`` declares it (`common.commands.train.TrainCommand`).
COMMANDS = ("qds.train", "conformer_kernel.train", "earl.train", "mva.train")
#: Columns of the stored help (argparse wraps to the terminal's width; the stored text must not depend on it).
HELP_COLUMNS = 100
_HEADER = ("# Generated from the parser of `python -m {command}` by `python -m common.commands.help --write`: "
           "do not edit.\n")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: argparse reads a token that looks like a negative number as a value, not an option.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
#: Options after which the real parser's help differs from the stored one (they change the defaults it shows).
_OWN_DEFAULTS = ("--config", "--ckpt_path")


def is_int(value) -> bool:
    """Whether `value` is an integer (a bool is not), as the commands' checks of resolved settings need."""
    return isinstance(value, int) and not isinstance(value, bool)


def replaces_default_config(given: list[str]) -> bool:
    """Whether ``--config`` is on the command line `given`: its files then replace the command's default config."""
    return any(arg == "--config" or arg.startswith("--config=") for arg in given)


def command_files(command: str) -> tuple[Path, Path]:
    """The stored help and options schema of `command` (``qds.train``), beside its module."""
    module = Path(find_spec(command).origin)
    return module.with_suffix(".help.txt"), module.with_suffix(".options.yaml")


# --- the front door ----------------------------------------------------------------------------------


def check_command_line(command: str, args: list[str] | None, default_config: Path,
                       check: Callable[[dict], str | None] | None = None) -> None:
    """Answer `command`'s ``--help`` and refuse its bad options before anything heavy is imported (see the
    module docstring); returns when the command line is for the real parser.

    `args` is the command line (None: ``sys.argv[1:]``); `default_config` the config used without ``--config``;
    `check` the command's check of resolved settings (a ``config.yaml`` as a dict -> a one-line problem or None).
    """
    given = sys.argv[1:] if args is None else list(args)
    help_file, options_file = command_files(command)
    schema = yaml.load(options_file.read_text(), Loader=_LOADER)
    settings = _read(given, schema["options"], help_file)
    if not {"-h", "--help"} & set(given):  # help with --ckpt_path is the real parser's
        resumed_run(given)  # the run --ckpt_path names: its files exist, or one line now
    if check is None or settings is None:
        return
    config = _resolved(settings, schema["options"], default_config, given)
    problem = check(config) if config is not None else None
    if problem:
        usage_error(problem)


def _read(given: list[str], options: dict, help_file: Path) -> list | None:
    """Check each option of `given` in order, as argparse meets them; exits on the first bad one.

    Returns the settings in order, ``(key, value)`` or ``(_CONFIG, path)``, or None where the rest is the real
    parser's alone or the settings cannot be resolved here (see the module docstring).
    """
    settings, resolvable = [], True
    i = 0
    while i < len(given):
        token = given[i]
        i += 1
        if token == "--":
            return None  # what follows is positional: the real parser's (which refuses it)
        if _is_value(token, options):
            usage_error(f"unrecognized argument {token} (options are given as --name value)")
        name, equals, inline = token.partition("=")
        spec = options.get(name) or _unlisted_spec(name, options)
        if spec.get("help"):
            if any(arg.split("=", 1)[0] in _OWN_DEFAULTS for arg in given):
                return None
            print(help_file.read_text(), end="")
            raise SystemExit(0)
        if spec.get("passthrough"):
            return None
        if spec.get("nargs") == "=":  # --print_config[=flags]: the real parser prints the config, checking nothing
            resolvable = False
            continue
        if equals:
            raw = inline
        elif i < len(given) and _is_value(given[i], options):
            raw = given[i]
            i += 1
        else:
            hint = f" (write {name}=VALUE for one that starts with -)" if i < len(given) else ""
            usage_error(f"{name}: expected a value{hint}")
        problem = _complaint(spec, raw)
        if problem:
            usage_error(f"{name}: {problem}, got {raw}")
        if spec.get("section") or spec.get("append"):  # a section's own config; an item added to a list
            resolvable = False
        settings.append((_CONFIG, raw) if spec.get("config") else (name.lstrip("-"), _value(spec, raw)))
    return settings if resolvable else None


def _is_value(token: str, options: dict) -> bool:
    """Whether argparse reads `token` as a value rather than an option (argparse's ``_parse_optional``)."""
    if not token or token[0] != "-":
        return True
    if token in options or token.split("=", 1)[0] in options:
        return False
    return len(token) == 1 or bool(_NEGATIVE_NUMBER.match(token)) or " " in token


def _unlisted_spec(name: str, options: dict) -> dict:
    """The spec of an option the schema does not list: a key under an option of a complex type (jsonargparse
    gives ``--data.train.topics_path`` to ``--data.train``) takes any value; otherwise exits naming the closest
    known option."""
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        parent = options.get(".".join(parts[:end]))
        if parent is not None and "type" in parent:
            if parent["type"] == "any":
                return {"type": "any"}
            break
    known = [option for option in options if option.startswith("--") and not option.endswith("+")]
    close = difflib.get_close_matches(name, known, n=1)
    usage_error(f"unknown option {name}" + (f" (did you mean {close[0]}?)" if close else ""))


# --- values -----------------------------------------------------------------------------------------


class _ValueLoader(_LOADER):
    """YAML as jsonargparse reads a command-line value: no timestamps, and ``1e-3`` is a float (YAML 1.1 wants
    ``1.0e-3``); its ``get_yaml_default_loader``."""


_ValueLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:timestamp",
                                                                     "tag:yaml.org,2002:float")]
    for first, resolvers in _LOADER.yaml_implicit_resolvers.items()
}  # fmt: skip
_ValueLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+][0-9]+)?
                |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def _load(raw: str):
    """`raw` as the parser reads it (YAML; the text itself where it is not YAML)."""
    try:
        return yaml.load(raw, Loader=_ValueLoader)
    except yaml.YAMLError:
        return raw


def _value(spec: dict, raw: str):
    """The value `raw` sets for an option of `spec` (a string option keeps the text)."""
    return raw if spec.get("type") == "str" else _load(raw)


#: The comparisons of `jsonargparse.typing.restricted_number_type`.
_OPERATORS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
              "!=": operator.ne}  # fmt: skip


def _complaint(spec: dict, raw: str) -> str | None:
    """What is wrong with `raw` for an option of `spec` (``must be ...``), or None where it fits or only the real
    parser can tell."""
    kind = spec.get("type", "any")
    if kind in ("any", "str"):
        return None
    value = _load(raw)
    if value is None and spec.get("null") and raw.strip():
        return None
    if kind == "list":
        fits = isinstance(value, list) and all(_fits(spec["items"], item) for item in value)
        return None if fits else f"must be a list ([a, b]), each item {_expected(spec['items'])}"
    # jsonargparse gives a restricted type (PositiveInt...) the text itself, which it converts with int() or float().
    return None if _fits(spec, raw if "restrictions" in spec else value) else f"must be {_expected(spec)}"


def _fits(spec: dict, value) -> bool:
    """Whether `value`, loaded (or the text, for a restricted type), is of `spec`'s type, choices and restrictions
    (jsonargparse's checks)."""
    kind = spec["type"]
    if kind in ("any", "str"):
        return True
    if kind == "choice":
        return any(value == choice and type(value) is type(choice) for choice in spec["choices"])
    if kind == "bool":
        return isinstance(value, bool)
    restricted = "restrictions" in spec
    if restricted and isinstance(value, str):
        try:
            value = int(value) if kind == "int" else float(value)
        except ValueError:
            return False
    if kind == "int":  # a restricted int also takes an integral float, which it converts
        number = is_int(value) or (restricted and isinstance(value, float) and value.is_integer())
    else:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
    checks = [_OPERATORS[op](value, ref) for op, ref in spec.get("restrictions", [])] if number else [False]
    return all(checks) if spec.get("join", "and") == "and" else any(checks)


def _expected(spec: dict) -> str:
    """``a positive integer``, ``one of qds, sparse``...: what an option of `spec` takes, for an error."""
    kind = spec["type"]
    if kind == "choice":
        text = "one of " + ", ".join(str(choice) for choice in spec["choices"])
    elif kind == "bool":
        text = "true or false"
    elif kind in ("str", "any"):
        text = "a string" if kind == "str" else "a value"
    else:
        noun = "integer" if kind == "int" else "number"
        bounds = [f"{op} {ref}" for op, ref in spec.get("restrictions", [])]
        named = {"> 0": "positive", ">= 0": "non-negative", "> 0.0": "positive", ">= 0.0": "non-negative"}
        if len(bounds) == 1 and bounds[0] in named:
            text = f"a {named[bounds[0]]} {noun}"
        else:
            text = " ".join([f"{'an' if kind == 'int' else 'a'} {noun}", f" {spec.get('join', 'and')} ".join(bounds)])
    return text.strip() + (" or null" if spec.get("null") else "")


# --- settings as the parser resolves them --------------------------------------------------------------

#: The key of a config file's entry, ``(_CONFIG, path)``, in `_read`'s settings.
_CONFIG = object()


def _resolved(settings: list, options: dict, default_config: Path, given: list[str]) -> dict | None:
    """The config the real parser resolves (`common.commands.cli.RankerCLI`): the options' defaults, the default config
    unless ``--config`` is given, then the config files and flags in command-line order. None where it
    cannot be told here: a config file that does not load (the real parser says why), ``--ckpt_path last``."""
    config: dict = {}
    for name, spec in options.items():
        if "default" in spec:
            _put(config, name.lstrip("-"), spec["default"])
    files = [] if replaces_default_config(given) else [default_config]
    for key, value in [(_CONFIG, path) for path in files] + settings:
        if key is _CONFIG:
            try:
                loaded = yaml.load(Path(value).read_text(), Loader=_LOADER)
            except (OSError, yaml.YAMLError):
                return None
            if not isinstance(loaded, dict):
                return None
            _merge(config, loaded)
        else:
            _put(config, key, value)
    return None if config.get("ckpt_path") == "last" else config


def _put(config: dict, key: str, value) -> None:
    """Set the dotted `key` of the nested `config`."""
    *parents, last = key.split(".")
    for part in parents:
        if not isinstance(config.get(part), dict):
            config[part] = {}
        config = config[part]
    config[last] = value


def _merge(config: dict, update: dict) -> None:
    """Merge the nested `update` into `config`, key by key, as a config file is merged over defaults."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            _merge(config[key], value)
        else:
            config[key] = value


# --- the stored files, generated from the real parser -------------------------------------------------------


def generated(command: str) -> dict[Path, str]:
    """The help and options files of `command` as its live parser gives them (imports Lightning)."""
    parser = live_parser(command)
    help_file, options_file = command_files(command)
    with _columns(HELP_COLUMNS):
        text = parser.format_help()
    options = {name: _OneLine(spec) for action in parser._actions for name, spec in _option_specs(action)}
    schema = yaml.dump({"options": options}, Dumper=_SchemaDumper, sort_keys=False, width=1000)
    return {help_file: text, options_file: _HEADER.format(command=command) + schema}


class _OneLine(dict):
    """An option's spec, written on one line of the schema."""


class _SchemaDumper(yaml.SafeDumper):
    """Plain YAML: each option's spec on its line, no anchors for specs shared by aliases (``-c``, ``--config``)."""

    def ignore_aliases(self, data) -> bool:
        return True


_SchemaDumper.add_representer(_OneLine, lambda dumper, spec: dumper.represent_mapping(
    "tag:yaml.org,2002:map", spec, flow_style=True))


def live_parser(command: str):
    """The parser `command`'s RankerCLI builds, before it parses anything."""
    return import_module(command).COMMAND.parser()


@contextmanager
def _columns(columns: int):
    """argparse wraps help to ``$COLUMNS`` (else the terminal's width)."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _option_specs(action) -> list[tuple[str, dict]]:
    """``(option string, spec)`` of each of `action`'s option strings (``--x`` and, for a list, ``--x+``)."""
    kind = type(action).__name__  # jsonargparse's own actions are private classes
    typehint = getattr(action, "_typehint", None)
    if isinstance(action, argparse._HelpAction):
        spec = {"help": True}
    elif kind == "_ActionPrintConfig":
        spec = {"nargs": "="}  # jsonargparse reads a bare --print_config as --print_config=
    elif kind == "_ActionHelpClassPath":  # --<option>.help CLASS: the real parser prints that class's help
        spec = {"passthrough": True}
    elif typehint is not None:
        spec = _type_spec(typehint)
        default = _plain(action.default)
        if default is not _NO_YAML:
            spec["default"] = default
    elif action.dest == "config":
        spec = {"config": True}
    elif kind == "_ActionConfigLoad":  # --model FILE: a config of one section
        spec = {"section": True}
    else:
        spec = {"passthrough": True}
    return [(name, _appended(spec) if name.endswith("+") else spec)
            for name in action.option_strings if name.startswith("-")]  # not a link's "a --> b"


def _type_spec(typehint) -> dict:
    """The schema of a type: int, float, bool, str (restricted, a choice, optional, a list of one), else any."""
    origin, args = get_origin(typehint), get_args(typehint)
    if typehint in (int, float, bool, str):
        return {"type": typehint.__name__}
    if getattr(typehint, "_restrictions", None) and typehint._type in (int, float):  # restricted_number_type
        symbols = {fn: symbol for symbol, fn in _OPERATORS.items()}
        restrictions = [[symbols[fn], ref] for fn, ref in typehint._restrictions]
        spec = {"type": typehint._type.__name__, "restrictions": restrictions}
        return spec if typehint._join == "and" else {**spec, "join": typehint._join}
    if origin is Literal and all(isinstance(a, (str, int, float, bool)) for a in args):
        return {"type": "choice", "choices": list(args)}
    if origin in (Union, UnionType) and NoneType in args and len(args) == 2:
        spec = _type_spec(next(a for a in args if a is not NoneType))
        return {**spec, "null": True} if spec["type"] not in ("any", "list") else {"type": "any"}
    if origin is list and len(args) == 1 and _type_spec(args[0])["type"] not in ("any", "list"):
        return {"type": "list", "items": _type_spec(args[0])}
    return {"type": "any"}


def _appended(spec: dict) -> dict:
    """The spec of ``--x+ item``, which appends one item to the list ``--x``."""
    items = spec["items"] if spec.get("type") == "list" else {"type": "any"}
    return {**items, "append": True}


_NO_YAML = object()


def _plain(value):
    """`value` as plain YAML (tuples as lists, PositiveInt(3) as 3), or `_NO_YAML` where it has none."""
    if value is None or type(value) in (bool, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return _NO_YAML if _NO_YAML in items else items
    return _NO_YAML


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m common.commands.help", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate every command's help and options files")
    action.add_argument("--check", action="store_true", help="exit 1 naming the files that differ from the parser's")
    given = parser.parse_args(argv)
    stale = []
    for command in COMMANDS:
        for path, text in generated(command).items():
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
                if given.write:
                    path.write_text(text)
    done = "written" if given.write else "stale (regenerate: python -m common.commands.help --write)"
    print(f"{done}: {', '.join(str(p) for p in stale)}" if stale else "up to date")
    if stale and given.check:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
