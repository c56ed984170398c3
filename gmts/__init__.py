"""gmts: GRPO with token selection (ETS, GMTS) in plain PyTorch.

The package is laid out by role (README.md, "Layout"):

    gmts/method/    the method: pure functions on tensors, importable on their own (torch only)
        grpo.py         advantage, ω, the selectors' scores, the exact top-ρ selection, the masked
                        loss
        checked.py      grpo.py's functions with their arguments checked (what `gmts.<name>` is)
        head.py         log π(o_it) and entropy E_it through the output head, chunked over the
                        vocabulary
        options.py      the method's option names and their checks (no torch: the command line
                        checks flags first)
    gmts/trainer/   the trainer's parts: the sampler (rollout.py), the batch and its passes
                    (batches.py), what a step logs (metrics.py), model loading and LoRA
                    (models.py), the optimizer, several processes and FSDP (distributed.py, which a
                    single process's step never enters)
    gmts/run/       the run infrastructure: config, validation, building a run (build.py), saving it
                    (checkpoint.py), signals, the run folder, logs, reporters
    gmts/tools/     the tools: evaluate, analyze, plot, memory planner, statistics, toy models

The data sets' loaders and the answer checkers are `gmts.data` and `gmts.rewards`: the repository
keeps them in data/ and rewards/ beside gmts/, pip installs them under gmts/ (pyproject.toml's
package-dir), and from a clone the finder below maps the two names to those folders. So a user's
own `data/` folder or `rewards.py` never shadows them, and the package claims no top-level name but
`gmts`. Nothing in the method, trainer or run code imports them (train.py and eval.py pass the data
loader and the reward functions in; gmts/tools/evaluate.py and analyze.py import them inside the
functions that read data sets). `import gmts` loads no torch until a name below is used: the
method's public names are loaded on first use (PEP 562), and `pip install -e .` makes it importable
from any folder.
"""
import importlib
import importlib.util
import os
import sys


# gmts.data and gmts.rewards from a clone: the repository's folders beside gmts/
_BESIDE = {"gmts.data": "data", "gmts.rewards": "rewards"}
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _BesideFinder:
    """From a clone: gmts.data and gmts.rewards are the repository's data/ and rewards/ folders.
    Asked only after the ordinary finders (an installed gmts has them under gmts/)."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname not in _BESIDE:
            return None
        folder = os.path.join(_ROOT, _BESIDE[fullname])
        init = os.path.join(folder, "__init__.py")
        if not os.path.isfile(init):
            return None
        return importlib.util.spec_from_file_location(fullname, init,
                                                      submodule_search_locations=[folder])


if not any(getattr(f, "__name__", "") == "_BesideFinder" for f in sys.meta_path):
    sys.meta_path.append(_BesideFinder)

# Where each public name lives. Imported on first use, so that `import gmts.run.config` /
# `gmts.run.validate` do not load torch: the command line checks its flags before torch loads (~3 s)
# and a bad one fails at once.
_EXPORTS = {
    "method.checked": ("group_advantages", "overlong_penalty", "loss_weights", "policy_loss",
                       "token_objective", "clip_active", "token_omega", "token_scores",
                       "num_to_select", "select_tokens"),
    "method.grpo": ("mixed_groups", "kl_share", "relative_token_weight"),
    "method.options": ("check_loss_config", "SELECTORS"),
    "method.head": ("token_entropy", "token_logprobs_and_entropy"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = [name for name in sorted(_WHERE)]


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gmts' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
