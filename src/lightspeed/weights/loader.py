"""`load(path)`: a GGUF file or a Hugging Face directory -> config, float32 tensors and tokenizer."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .convert import IGNORED_TENSORS, fix_rows, fix_tensor, gguf_config, hf_name
from .errors import WeightError
from .gguf_file import GGMLQuantizationType, GGUFFile
from .quant import BLOCK_BYTES, REPACKED, Blocks, QuantTensor, attach
from .safetensors_dir import hf_dir_files, index_weight_map, read_json, read_safetensors
from .shapes import check_config, expected_shapes

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

__all__ = ["LoadedWeights", "load"]


@dataclass
class LoadedWeights:
    """A model's weights in Hugging Face conventions.

    `config`: a config.json-style dict (`model_type`, `architectures`, `hidden_size`, ...).
    `tensors`: state_dict name -> array, laid out as the transformers model's state_dict; floating-point
    tensors are float32. Tied embeddings (`config["tie_word_embeddings"]`) have no `lm_head.weight`.
    `tokenizer`: a `lightspeed.weights.tokenizer.Tokenizer`, or None when the source has none.
    `path`: the file or directory loaded. `metadata`: the GGUF key/values (empty for directories)."""

    config: dict[str, Any]
    tensors: dict[str, np.ndarray]
    tokenizer: Tokenizer | None = None
    path: Path | None = None
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        n = sum(a.size for a in self.tensors.values())
        return (f"LoadedWeights({self.config.get('model_type')!r}, {len(self.tensors)} tensors, {n / 1e6:.1f}M "
                f"parameters, path={str(self.path)!r})")


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, leave=False, file=sys.stderr,
                disable=not enabled or not sys.stderr.isatty())


def load(path: str | os.PathLike, *, progress: bool = True, tokenizer: bool = True, lazy: bool = False
         ) -> LoadedWeights:
    """Load a `.gguf` file or a Hugging Face directory (config.json + model.safetensors, or the shards
    listed in model.safetensors.index.json).

    Quantised GGUF tensors are dequantised to float32 and llama.cpp's layout changes are undone (see
    `lightspeed.weights.convert`). Shapes are checked against the config for the zoo's model types.
    A progress bar goes to stderr when it is a terminal and `progress` is true. With `lazy`, a GGUF
    file's Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K matrices stay as their blocks (`weights.quant.QuantTensor`, float32 values
    made only if something asks for them: the `native` backend's block matmuls never do). Raises
    WeightError naming the file (and tensor) for anything missing, truncated, corrupt or inconsistent."""
    p = Path(path)
    if p.is_dir():
        return _load_hf_dir(p, progress, tokenizer)
    if not p.exists():
        raise WeightError(f"{p}: no such file or directory")
    return _load_gguf(p, progress, tokenizer, lazy)


def _check(path: Path, config: dict[str, Any], shapes: dict[str, tuple[int, ...]], names: dict[str, str],
           dtypes: dict[str, np.dtype] | None = None) -> None:
    """Compare tensor shapes (HF name -> shape) with what the config implies; `names` maps HF names to the
    names in the file, for messages. With `dtypes`, the config's tensors must be floating point."""
    # before expected_shapes loops over the layers: a corrupt layer count must fail here, at once
    check_config(path if not path.is_dir() else path / "config.json", config, len(shapes))
    expected = expected_shapes(config)
    if expected is None:
        return
    for name, shape in shapes.items():
        want = expected.get(name)
        if want is None:
            continue  # an extra tensor: judged below, once the layer count is known good
        if tuple(shape) != want:
            raise WeightError(f"{path}: tensor {names.get(name, name)!r} has shape {list(shape)}, but the config "
                              f"({config['model_type']}) implies {list(want)} for {name}")
        # every weight of the checked models is floating point: an integer one is a corrupt dtype field
        if dtypes is not None and dtypes[name].kind != "f":
            raise WeightError(f"{path}: tensor {names.get(name, name)!r} is stored as {dtypes[name]} (an integer "
                              f"type), but {config['model_type']} weights are floating point")
    missing = [n for n in expected if n not in shapes]
    if missing:
        raise WeightError(f"{path}: missing tensor {missing[0]!r} ({len(missing)} missing in all)")
    # a layer the config does not count (a wrong num_hidden_layers / block_count) would be dropped
    # silently: the model would run with fewer layers than the file holds
    layers = config.get("num_hidden_layers")
    beyond = sorted((n for n in shapes if n not in expected and (m := _LAYER.search(n)) and int(m.group(1)) >= layers),
                    key=lambda n: (int(_LAYER.search(n).group(1)), n)) if isinstance(layers, int) else []
    if beyond:
        raise WeightError(f"{path}: tensor {names.get(beyond[0], beyond[0])!r} belongs to layer "
                          f"{_LAYER.search(beyond[0]).group(1)}, but the config has {layers} layers "
                          f"({len(beyond)} tensors beyond them); the config's layer count is wrong")
    # any other tensor the config does not use would be dropped just as silently (a head beside
    # tied embeddings is the model's to judge: it checks the two are the same)
    unused = sorted(n for n in shapes if n not in expected and n != "lm_head.weight" and not n.endswith(_BUFFERS))
    if unused:
        raise WeightError(f"{path}: tensor {names.get(unused[0], unused[0])!r} is not a weight of "
                          f"{config['model_type']} with this config ({len(unused)} unused in all)")


# buffers some checkpoints carry beside the weights (recomputed by every implementation)
_BUFFERS = (".rotary_emb.inv_freq",)
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _load_gguf(p: Path, progress: bool, want_tokenizer: bool, lazy: bool = False) -> LoadedWeights:
    with GGUFFile(p) as g:
        config = gguf_config(g)
        arch = g.architecture
        names: dict[str, str] = {}  # HF name -> GGUF name
        for gname in g.tensors:
            if gname in IGNORED_TENSORS:
                continue
            hname = hf_name(arch, gname)
            if hname is None:
                raise WeightError(f"{p}: tensor {gname!r} has no Hugging Face counterpart for architecture {arch!r}")
            names[hname] = gname
        _check(p, config, {h: g.tensors[n].shape for h, n in names.items()}, {h: n for h, n in names.items()})
        g.check_supported()
        tensors: dict[str, np.ndarray] = {}
        with _progress(sum(g.tensors[n].nbytes for n in names.values()), f"loading {p.name}", progress) as bar:
            for hname, gname in names.items():
                blocks = _blocks(g, config, hname, gname)
                if lazy and blocks is not None:
                    tensors[hname] = QuantTensor(blocks)
                else:
                    tensors[hname] = fix_tensor(config, hname, g.read(gname))
                    if blocks is not None and tensors[hname].dtype == np.float32 and tensors[hname].flags.c_contiguous:
                        attach(tensors[hname], blocks)
                g.release(gname)  # its mapped pages leave the resident set: the copies above hold it
                bar.update(g.tensors[gname].nbytes)
        tok = None
        if want_tokenizer and "tokenizer.ggml.model" in g.metadata:
            from .tokenizer import Tokenizer

            tok = Tokenizer.from_gguf_metadata(g.metadata, source=str(p))
        metadata = g.metadata
    return LoadedWeights(config, tensors, tok, p, metadata)


# the GGUF storage types whose blocks are kept (weights.quant names them)
_BLOCK_TYPES = {getattr(GGMLQuantizationType, q.upper()): q for q in BLOCK_BYTES}


def _blocks(g: GGUFFile, config: dict[str, Any], hname: str, gname: str) -> Blocks | None:
    """A block-quantised matrix's blocks (rows fixed like the float32 tensor, `convert.fix_rows`), kept
    beside its float32 array or instead of it (`weights.quant`): a backend with block kernels reads
    them (the same values, a quarter of the bytes).  None for other tensors."""
    t = g.tensors[gname]
    qtype = _BLOCK_TYPES.get(t.qtype)
    if qtype is None or len(t.shape) != 2:
        return None
    raw = g.raw(gname).reshape(t.shape[0], -1)  # a view of the mapping: copied below, once
    rows = fix_rows(config, hname, raw if qtype in REPACKED else np.array(raw))
    return None if rows is None else Blocks(qtype, rows)  # repacked types: Blocks writes its own copy


def _load_hf_dir(d: Path, progress: bool, want_tokenizer: bool) -> LoadedWeights:
    cfg_path = d / "config.json"
    if not cfg_path.exists():
        raise WeightError(f"{d}: not a Hugging Face model directory (no config.json)")
    config = read_json(cfg_path)
    if not isinstance(config, dict):
        raise WeightError(f"{cfg_path}: not a JSON object")
    check_config(cfg_path, config)  # types and ranges, before reading any tensor
    files = hf_dir_files(d)
    for f in files:
        if not f.exists():
            raise WeightError(f"{f}: shard listed in model.safetensors.index.json is missing")
    tensors: dict[str, np.ndarray] = {}
    owner: dict[str, Path] = {}
    with _progress(sum(f.stat().st_size for f in files), f"loading {d.name}", progress) as bar:
        for f in files:
            for name, a in read_safetensors(f, on_bytes=bar.update).items():
                if name in tensors:
                    raise WeightError(f"{f}: tensor {name!r} also appears in {owner[name]}")
                tensors[name], owner[name] = a, f
    index = d / "model.safetensors.index.json"
    if index.exists():
        for name, fname in index_weight_map(d).items():
            if name not in tensors:
                raise WeightError(f"{d / fname}: tensor {name!r} listed in the index is missing from the file")
    _check(d, config, {n: a.shape for n, a in tensors.items()}, {}, {n: a.dtype for n, a in tensors.items()})
    tok = None
    if want_tokenizer and (d / "tokenizer.json").exists():
        from .tokenizer import Tokenizer

        tok = Tokenizer.from_dir(d)
    return LoadedWeights(config, tensors, tok, d, {})
