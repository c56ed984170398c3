"""Reading records from .jsonl / .json (optionally .gz) / .parquet, from `datasets` data sets
(hf:ORG/NAME, a save_to_disk folder, a folder laid out like a hub data set repository), and the
download cache for built-in sources.

Cache folder: $GMTS_DATA_DIR if set (relative paths are taken from the current directory), else
~/.cache/gmts. A built-in file lives at <cache>/<source>/<name>, e.g. <cache>/gsm8k/test.jsonl, so
pointing GMTS_DATA_DIR at a folder laid out like shared/data works with no download. Offline
(GMTS_OFFLINE=1 or HF_HUB_OFFLINE=1) nothing is downloaded and a missing file is an error that names
the file, where to put it and where it comes from.
"""
import gzip
import hashlib
import json
import os
import threading
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class RemoteFile:
    name: str  # path inside the cache folder, "<source>/<file>"
    url: str
    # None: not pinned yet; the first download records it in <file>.sha256 and later loads check it
    sha256: str | None


def data_dir() -> str:
    return os.path.abspath(os.environ.get("GMTS_DATA_DIR")
                           or os.path.join(os.path.expanduser("~"), ".cache", "gmts"))


def offline() -> bool:
    return any(
        os.environ.get(v, "").lower() in ("1", "true", "yes") for v
        in ("GMTS_OFFLINE", "HF_HUB_OFFLINE"))


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(remote: RemoteFile) -> str:
    """Local path of a built-in file, downloading it once if needed; its checksum is verified on
    every load."""
    path = os.path.join(data_dir(), remote.name)
    if not os.path.exists(path):
        where = (f"Place the file at {path} (from {remote.url}"
                 + (f", sha256 {remote.sha256})" if remote.sha256 else ")")
                 + " or set GMTS_DATA_DIR to a folder that contains " + remote.name)
        if offline():
            raise FileNotFoundError(f"{remote.name} is not in the data folder and downloads are "
                                    f"off (GMTS_OFFLINE / HF_HUB_OFFLINE). {where}.")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = path + ".partial"
        try:
            with (urllib.request.urlopen(remote.url, timeout=60) as response,
                  open(partial, "wb") as out):
                out.write(response.read())
        except OSError as e:  # URLError is an OSError
            raise FileNotFoundError(f"could not download {remote.url} ({e}). {where}.") from e
        os.replace(partial, path)
        if remote.sha256 is None:
            with open(path + ".sha256", "w") as f:
                f.write(sha256_of(path) + "\n")
    expected = remote.sha256
    if expected is None and os.path.exists(path + ".sha256"):
        with open(path + ".sha256") as f:
            expected = f.read().strip()
    if expected is not None:
        actual = sha256_of(path)
        if actual != expected:
            raise ValueError(f"{path}: sha256 {actual} does not match the expected {expected}. The "
                             "file is damaged or a different version; delete it to download "
                             f"{remote.url} again.")
    return path


def _open_bytes(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _gzip_problem(path: str, err: Exception, lineno: int = 0) -> ValueError:
    """A damaged .gz as one line: not gzip at all, or cut short (an interrupted download or
    copy)."""
    if isinstance(err, gzip.BadGzipFile):
        return ValueError(f"{path}: not a gzip file ({err}); rename it without .gz if it is plain "
                          "text")
    where = f" after line {lineno}" if lineno else ""
    return ValueError(f"{path}: the gzip data is truncated or damaged{where} "
                      f"({type(err).__name__}: {err}); download or copy it again")


def _decode(raw: bytes, path: str, lineno: int = 0) -> str:
    """UTF-8 text, or a ValueError naming file:line and the byte (a Latin-1 file, say)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = lineno or raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1 if not lineno else 0) + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                         f"{column}); save the file as UTF-8") from None


def read_records(path: str) -> list[tuple[str, dict]]:
    """[(where, row)] with where = "file:line" (jsonl) or "file item i" (json), for error
    messages."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such data file: {path}")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder; pass a data file (.jsonl, .json, optionally .gz, or "
                         ".parquet), or read the folder as a data set (data.load_problems)")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{path}: cannot be read (permission denied)")
    base = path.removesuffix(".gz")
    if base.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError(f"{path} is a parquet file: `pip install pyarrow` to read it, or "
                              f"convert it to .jsonl") from e
        try:
            rows = pq.read_table(path).to_pylist()
        # pyarrow's ArrowInvalid / OSError for a truncated or foreign file
        except Exception as e:  # noqa: BLE001
            raise ValueError(f"{path}: not a readable parquet file ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:200]})") from None
        records = [(f"{path} row {i}", row) for i, row in enumerate(rows)]
    elif base.endswith(".jsonl"):
        records, lines = [], []
        # read whole first: a .gz cut short fails while reading, named with the lines read
        try:
            with _open_bytes(path) as f:
                lines.extend(f)           # the lines read so far stay when the stream breaks
        # BadGzipFile is an OSError; a cut stream an EOFError
        except (OSError, EOFError, zlib.error) as err:
            if not path.endswith(".gz"):
                raise
            raise _gzip_problem(path, err, len(lines)) from None
        for lineno, raw in enumerate(lines, 1):
            line = _decode(raw, path, lineno)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: invalid JSON ({e.msg} at column "
                                 f"{e.colno})") from None
            records.append((f"{path}:{lineno}", row))
    elif base.endswith(".json"):
        try:
            with _open_bytes(path) as f:
                raw = f.read()
        except (OSError, EOFError, zlib.error) as err:
            if not path.endswith(".gz"):
                raise
            raise _gzip_problem(path, err) from None
        text = _decode(raw, path)
        if not text.strip():
            raise ValueError(f"{path}: empty file, no problems")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}: invalid JSON ({e.msg} at column "
                             f"{e.colno})") from None
        if isinstance(data, dict):  # {"data": [...]} and the like: the one list inside
            lists = [v for v in data.values() if isinstance(v, list)]
            if len(lists) != 1:
                raise ValueError(f"{path}: expected a list of objects, or an object holding "
                                 "exactly one list")
            data = lists[0]
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a list of objects, got {type(data).__name__}")
        records = [(f"{path} item {i}", row) for i, row in enumerate(data)]
    else:
        raise ValueError(f"unsupported data file {path!r}: use .jsonl, .json (optionally .gz) or "
                         ".parquet")
    if not records:
        raise ValueError(f"{path}: empty file, no problems")
    for where, row in records:
        if not isinstance(row, dict):
            raise ValueError(  # noqa: TRY004 - bad data, not a bad argument type
                f"{where}: expected a JSON object, got {type(row).__name__}")
    return records


# ------------------------------------------------------------------------------------------------
# Data sets through `datasets` (an optional dependency: pip install datasets).

def is_dataset_source(source: str) -> bool:
    """hf:ORG/NAME[:CONFIG], or a folder (save_to_disk's, or laid out like a hub repository)."""
    return source.startswith("hf:") or os.path.isdir(source)


def _import_datasets(source: str):
    try:
        import datasets
    except ImportError:
        raise ImportError(f"{source} is read with the `datasets` library, which is not installed: "
                          "pip install datasets") from None
    # its progress bars and cache notices are not our output
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    return datasets


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub (HF_ENDPOINT) opens within `timeout` seconds (name lookup
    included: it runs in a thread, so a resolver that never answers costs `timeout`, not
    minutes)."""
    from huggingface_hub import constants
    url = urllib.parse.urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    done = []

    def probe():
        import socket
        try:
            socket.create_connection((url.hostname, port), timeout=timeout).close()
            done.append(True)
        except OSError:
            done.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(done and done[0])


class _HubOffline:
    """Within the block, `datasets` and huggingface_hub act as under HF_HUB_OFFLINE=1: the cache
    only, no retries."""

    def __enter__(self):
        import datasets.config
        from huggingface_hub import constants
        self.saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
        constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True

    def __exit__(self, *exc):
        import datasets.config
        from huggingface_hub import constants
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = self.saved


def _rows(table, source: str, split: str):
    where = f"{source}" + (f" split {split}" if split else "")
    rows = table.to_list()
    if not rows:
        raise ValueError(f"{where}: empty data set, no problems")
    return [(f"{where} row {i}", row) for i, row in enumerate(rows)]


def _empty_saved(folder: str, split: str) -> str | None:
    """The save_to_disk folder (`folder`, or its `split` in a DatasetDict) that holds no data file
    (an empty Dataset: `datasets` cannot load it back), or None."""
    for where in (folder, os.path.join(folder, split)):
        try:
            with open(os.path.join(where, "state.json"), encoding="utf-8") as fh:
                state = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(state, dict) and state.get("_data_files") == []:
            return f"{folder}" + (f" split {split}" if where != folder else "")
    return None


def read_dataset(source: str, split: str) -> list[tuple[str, dict]]:
    """[(where, row)] of `split` of a data set read with `datasets`: hf:ORG/NAME[:CONFIG]
    (datasets.load_dataset; offline or with the hub unreachable, the local cache only), a folder
    written by save_to_disk (load_from_disk; a DatasetDict gives `split`) or a folder laid out like
    a hub repository (load_dataset on the folder). Problems are one-line FileNotFoundError /
    ValueError / ImportError."""
    datasets = _import_datasets(source)
    if not source.startswith("hf:"):
        saved = ("state.json", "dataset_dict.json")            # what save_to_disk writes
        if any(os.path.exists(os.path.join(source, f)) for f in saved):
            empty = _empty_saved(source, split)
            if empty:
                raise ValueError(f"{empty}: empty data set (save_to_disk wrote no rows), no "
                                 "problems")
            try:
                loaded = datasets.load_from_disk(source)
            except (OSError, ValueError, IndexError) as e:
                raise ValueError(f"{source}: not a readable save_to_disk folder "
                                 f"({' '.join(str(e).split()) or type(e).__name__})") from None
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise ValueError(f"{source} has splits {sorted(loaded)}, got split={split!r}")
                loaded = loaded[split]
                return _rows(loaded, source, split)
            return _rows(loaded, source, "")           # one Dataset: it is the split
        try:
            with _HubOffline():                        # a local folder needs no hub
                loaded = datasets.load_dataset(source, split=split)
        except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as e:
            raise ValueError(f"{source} is a folder that `datasets` cannot read as a data set "
                             f"({' '.join(str(e).split())[:300]}); pass a data file (.jsonl, "
                             ".json, .parquet), a save_to_disk folder or one laid out like a hub "
                             "repository") from None
        return _rows(loaded, source, split)
    name, _, config = source[3:].partition(":")
    if name.count("/") != 1 or not all(name.split("/")):
        raise ValueError(f"{source}: write a hub data set as hf:ORG/NAME or hf:ORG/NAME:CONFIG")
    cut_off = offline() or not hub_reachable()
    why = ("downloads are off (HF_HUB_OFFLINE / GMTS_OFFLINE)" if offline() else
           "the hub is unreachable") if cut_off else ""
    try:
        if cut_off:
            with _HubOffline():
                loaded = datasets.load_dataset(name, config or None, split=split)
        else:
            loaded = datasets.load_dataset(name, config or None, split=split)
    except datasets.exceptions.DatasetNotFoundError:
        raise FileNotFoundError(f"{source}: no data set {name} on the hub (or it is private: "
                                "hf auth login)") from None
    except (ConnectionError, FileNotFoundError) as e:
        if cut_off:
            raise FileNotFoundError(f"{source} is not in the datasets cache "
                                    f"({datasets.config.HF_DATASETS_CACHE}) and {why}; load it "
                                    "once online, or pass a save_to_disk folder") from None
        raise FileNotFoundError(f"{source}: {' '.join(str(e).split())[:300]}") from None
    except ValueError as e:             # an unknown config or split: datasets lists the right ones
        raise ValueError(f"{source}: {' '.join(str(e).split())[:300]}") from None
    return _rows(loaded, source, split)
