"""Token data: shards (shards.py), the offline tokenizer (tokenizer.py) and the bundled smoke world (smoke/).

`resolve_data(name_or_dir)` turns what a spec's `data:` field says into a directory of shards:
- "smoke": the bundled corpus, generated once into the cache (env EXOFORMER_CACHE, default
  <repo>/results/cache/) under a name keyed by the generator's version, parameters and source, built in a
  temporary folder and renamed into place (a crash never leaves a half corpus), reused afterwards after
  a check against the SHA256SUMS recorded with it (a damaged cache is rebuilt, never trained on);
- "fineweb-edu-10b": env EXOFORMER_DATA_DIR, else <repo>/data/finewebedu10B (what `prefetch` downloads);
- any other value: a directory path holding `*_train_*.bin` and `*_val_*.bin` shards.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import asdict
from pathlib import Path

from exoformer.environ import env_directory
from exoformer.errors import UserError, did_you_mean

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE_DATA = "smoke"
"""The bundled, generated smoke world (its corpus, and its tasks as the `smoke` eval suite)."""
NAMED_DATA = (SMOKE_DATA, "fineweb-edu-10b")

__all__ = ["resolve_data", "smoke_data_dir", "cache_dir", "validate_data_dir", "NAMED_DATA"]


CACHE_FIX = ("unset it (results/cache is the default) or point it at a directory this user may write into (it is "
             "created when missing)")


def cache_dir() -> Path:
    """$EXOFORMER_CACHE, else results/cache; a value naming a file, a FIFO, ... is one line naming the variable."""
    return env_directory("EXOFORMER_CACHE", must_exist=False, fix=CACHE_FIX) or REPO_ROOT / "results" / "cache"


def validate_data_dir(directory: str | os.PathLike) -> Path:
    """A directory with valid train and val shards (headers and lengths checked, tokens not read)."""
    from exoformer.data.shards import find_shards, read_header

    directory = Path(directory)
    for split in ("train", "val"):
        for shard in find_shards(directory, split):
            read_header(shard)
    return directory


@functools.lru_cache(maxsize=1)
def smoke_key() -> str:
    """Identity of the bundled smoke world (corpus and tasks): changes whenever the generator's version,
    parameters or source code change. Part of a smoke spec's hash, so runs on older smoke data are never reused."""
    from exoformer.data.smoke import corpus

    digest = hashlib.sha256()
    digest.update(json.dumps({"version": corpus.GENERATOR_VERSION, "config": asdict(corpus.SmokeCorpusConfig())},
                             sort_keys=True).encode())
    for source in sorted(Path(corpus.__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return f"v{corpus.GENERATOR_VERSION}-{digest.hexdigest()[:12]}"


def smoke_data_dir() -> Path:
    """The smoke corpus directory, generated on first use (a few seconds) and reused afterwards.

    Every reuse checks the cached files against the SHA256SUMS written with them (the corpus is a few MB,
    so this costs milliseconds); a cache that fails the check, or predates the check, is rebuilt with a
    warning rather than trained on. The generator is deterministic, so the rebuilt files are the same.
    """
    target = cache_dir() / f"smoke-{smoke_key()}"
    problem = _smoke_cache_problem(target)
    if problem is None:
        return target
    if problem != "not built yet":
        warnings.warn(f"{target}: cached smoke corpus {problem}; rebuilding it", stacklevel=2)
    _build_smoke(target, replace=problem != "not built yet")
    problem = _smoke_cache_problem(target)
    if problem is not None:
        raise UserError(f"the rebuilt smoke corpus still fails its check ({problem})", where=str(target),
                        fix="delete the folder and check the disk (EXOFORMER_CACHE selects another place)")
    return target


def _smoke_cache_problem(target: Path) -> str | None:
    """None when `target` holds a complete smoke corpus matching its recorded checksums, else what is wrong."""
    from exoformer.data.checksums import SUMS_FILE, read_sums
    from exoformer.data.smoke import corpus
    from exoformer.io import sha256_file

    if not (target / corpus.META_FILE).is_file():
        return "not built yet"
    sums_path = target / SUMS_FILE
    if not sums_path.is_file():
        return f"has no {SUMS_FILE} (made before checksums were recorded)"
    try:
        expected = read_sums(sums_path)
    except UserError as error:
        return f"has an unreadable {SUMS_FILE} ({error.problem})"
    present = {p.name for p in target.iterdir() if p.is_file() and p.name != SUMS_FILE}
    if present != set(expected):
        return f"holds files {sorted(present ^ set(expected))} that differ from its {SUMS_FILE}"
    for name, digest in sorted(expected.items()):
        if sha256_file(target / name) != digest:
            return f"file {name} does not match its recorded checksum (damaged)"
    return None


def _build_smoke(target: Path, *, replace: bool) -> None:
    """Generate the corpus in a temporary folder with its SHA256SUMS, then rename it into place."""
    from exoformer.data.checksums import write_sums
    from exoformer.data.smoke import corpus

    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".building", dir=target.parent))
    stale = None
    try:
        corpus.write_corpus(building)
        write_sums(building, sorted(p for p in building.iterdir() if p.is_file()))
        if replace and target.exists():
            stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".stale", dir=target.parent))
            os.rename(target, stale / "old")
        try:
            os.rename(building, target)
        except OSError:  # another process finished first (the target exists and is not empty): use theirs
            if not (target / corpus.META_FILE).is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
        if stale is not None:
            shutil.rmtree(stale, ignore_errors=True)


def resolve_data(name_or_dir: str | os.PathLike) -> Path:
    """The shard directory for a `data:` value: "smoke", "fineweb-edu-10b" or a directory path."""
    value = str(name_or_dir)
    if value == "smoke":
        return smoke_data_dir()
    if value == "fineweb-edu-10b":
        directory = env_directory("EXOFORMER_DATA_DIR", fix="unset it (data/finewebedu10B is the default) or point "
                                  "it at the shard folder `python reproduce.py prefetch` wrote") \
            or REPO_ROOT / "data" / "finewebedu10B"
        if not directory.is_dir():
            raise UserError("FineWeb-Edu 10B shards not found", where=str(directory),
                            fix="run `python reproduce.py prefetch` (or set EXOFORMER_DATA_DIR), or use data: smoke")
        return validate_data_dir(directory)
    directory = Path(value).expanduser()
    if not directory.is_dir():
        hint = did_you_mean(value, NAMED_DATA)
        raise UserError(f"data is neither a known name nor an existing directory ({hint})", where=value,
                        fix="use data: smoke, data: fineweb-edu-10b or a folder of *_train_*.bin/*_val_*.bin shards")
    return validate_data_dir(directory.resolve())
