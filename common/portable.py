"""What a trained ranker needs to score, carried by its checkpoint (`portable_entry` under `KEY`: package, format,
version, scoring config and files such as a learnt tokenizer) and written as a folder to share (`write_folder`:
``config.json``, ``model.safetensors``, those files, a ``README.md``). `read_folder` refuses another format in one line
(`PortableError`). Neither this module nor `common.api` imports Lightning.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from common.io import umask

#: The checkpoint entry (``checkpoint[KEY]``) that carries `portable_entry`.
KEY = "portable"
#: The format of `portable_entry` and of an exported folder; a reader refuses another.
FORMAT = 1
CONFIG, WEIGHTS, CARD = "config.json", "model.safetensors", "README.md"
#: The distribution's name, whose version every entry records.
DISTRIBUTION = "efficient-rankers"


class PortableError(ValueError):
    """A checkpoint or folder that cannot be loaded here; the message is one line naming it and why."""


def package_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class Portable:
    """What scoring needs: `package`, scoring `config`, `files` (name -> bytes), `version`, `training` settings."""

    package: str
    config: dict
    files: dict[str, bytes]
    version: str
    training: dict

    def entry(self) -> dict:
        return {"package": self.package, "format": FORMAT, "version": self.version, "config": self.config,
                "files": dict(self.files), "training": self.training}


def portable_entry(package: str, config: dict, files: dict[str, bytes], training: dict | None = None) -> dict:
    """The checkpoint entry of a ranker of `package`: its JSON-able scoring `config` (checked here) and `files`."""
    json.dumps(config)
    return Portable(package, config, files, package_version(), _plain(training or {})).entry()


def from_entry(entry: dict, where: str) -> Portable:
    """`Portable` of a checkpoint's entry; `where` (the file) names it in a refusal of another format."""
    _check_format(entry.get("format"), entry.get("version"), where)
    return Portable(entry["package"], entry["config"], dict(entry["files"]), entry["version"], entry["training"])


def _check_format(found, version, where: str) -> None:
    if found != FORMAT:
        raise PortableError(f"{where} was written by {DISTRIBUTION} {version} in format {found}; this is "
                            f"{package_version()}, which reads format {FORMAT}")


def check_package(portable: Portable, package: str, where: str) -> None:
    """Refuse, in one line, a ranker of another package than `package`."""
    if portable.package != package:
        raise PortableError(f"{where} holds a {portable.package} ranker, not a {package} one")


def tokenizer_files(tokenizer) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        return {name: (Path(tmp) / name).read_bytes() for name in sorted(os.listdir(tmp))}


def materialized(files: dict[str, bytes]) -> Path:
    """A folder holding `files`, under the cache and named by their contents."""
    from common.io import built_once, cache_root

    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())

    def write(tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (tmp / name).write_bytes(data)

    return built_once(cache_root() / "portable" / digest.hexdigest()[:24], write,
                      ready=lambda folder: all((folder / name).is_file() for name in files))


@dataclass(frozen=True)
class Scoring:
    """What a package's ``build(config, folder)`` returns (``<package>.portable``)."""

    model: Any
    encode: Callable[[list[str], list], dict]
    score: Callable[[Any, dict], Any] | None = None
    open_store: Callable[[Any, Path], Callable[[list[str], list[str]], Any]] | None = None


def write_folder(folder: Path, portable: Portable, save_weights, card: str) -> None:
    """Write `portable` into the new folder `folder` at once (a temporary folder beside it, then renamed)."""
    folder = Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} already exists; export into a new folder")
    if reserved := {CONFIG, WEIGHTS, CARD} & set(portable.files):
        raise ValueError(f"a scoring file may not be named {', '.join(sorted(reserved))}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        config = {**portable.entry(), "files": sorted(portable.files)}
        (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        for name, data in portable.files.items():
            (tmp / name).write_bytes(data)
        save_weights(tmp / WEIGHTS)
        (tmp / CARD).write_text(card)
        for path in tmp.iterdir():
            os.chmod(path, 0o666 & ~umask())
        os.chmod(tmp, 0o777 & ~umask())
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_folder(folder: Path) -> Portable:
    """The `Portable` of an exported folder; one line (`PortableError`) where it is not one of this format."""
    folder = Path(folder)
    path = folder / CONFIG
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise PortableError(f"{folder} is not an exported ranker ({CONFIG}: {type(error).__name__})") from None
    if not isinstance(config, dict) or "package" not in config or not (folder / WEIGHTS).is_file():
        raise PortableError(f"{folder} is not an exported ranker (no package in its {CONFIG}, or no {WEIGHTS})")
    _check_format(config.get("format"), config.get("version"), str(folder))
    if missing := [name for name in config["files"] if not (folder / name).is_file()]:
        raise PortableError(f"{folder} lacks {', '.join(missing)}, which its {CONFIG} lists")
    files = {name: (folder / name).read_bytes() for name in config["files"]}
    return Portable(config["package"], config["config"], files, config["version"], config.get("training", {}))


def _plain(value):
    return json.loads(json.dumps(value, default=lambda x: vars(x) if hasattr(x, "__dict__") else str(x)))
